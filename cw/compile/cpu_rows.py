"""CPU schedules for the kernels of TVM's loops that no other schedule takes (softmax, layer
norm, means, pools, ArgMax): every step computed row by row, rows spread over the cores, and
within a row in vectors (cpu_kernels.default_schedule tries this last).

A row is the leading loops all steps share; its intermediates then stay in cache. Within it,
a sum along the row keeps SUM_LANES partial sums in one vector (TIR's rfactor), a reduction
over NCHWc's H and W walks the channel block in a vector, one over NCHW's channels 16
positions along W; each step's loop along the row is vectorized. Where the reductions reduce
an axis between others (a softmax over NCHW's channels), the elementwise steps walk that axis
last, so that they share the reductions' rows. A row that whole vectors do not fill is walked
in whole vectors and one shorter one (loop_partition); where a step reads it through a clamped
index (fast_math's softmax over ragged rows), the last vector is a loop of its own, so that the
others load whole vectors.
"""

from __future__ import annotations

from cw.compile.cpu_kernels import MAX_VECTOR_LOOP, kernel_steps

# iterations of all its steps together from which a kernel is computed row by row in parallel
# (schedule_rows): mobilenet_v2's global average pool at batch 1 (64 K) took 0.025 ms that way
# against 0.013 on one thread; BERT-base's layer norm (3 steps, 295 K) 0.18 against 0.33
ROWS_MIN_ITERATIONS = 1 << 17
# partial sums a reduction along a row's contiguous axis keeps, one vector of them (rfactor): one
# running sum made every add wait for the one before (4 cycles each), and held BERT-base's
# layer norm kernel at 0.15 ms (0.064 with 16; onnxruntime's whole run 0.048). 16 sums also
# round less: its error at a mean 1000 times the spread 2.4e-3 -> 3.3e-4
SUM_LANES = 16
# rows from this long whose length no SUM_LANES divide are summed padded to whole vectors
# (_padded_to_lanes): an audio encoder's InstanceNorm over 3,199 frames ×0.25-0.3 of its
# time; a ViT's softmax over 197 keys ran ×1.1-1.4 slower so (the padded loads' conditions)
PADDED_ROW_MIN = 512


def schedule_rows(func):
    """Any other kernel of TVM's loops (softmax, layer norm, mean, pooling: one loop nest per
    step, each over the whole tensor, on one thread) computed row by row: every step at the
    last step's leading loops that all steps share (equal extents, data-parallel in each),
    those loops fused and spread over the cores. A row's intermediates then stay in cache:
    BERT-base's softmax (12 x 128 rows of 128) went from 0.68 to 0.37 ms, its layer norm from
    0.26 to 0.14 ms, the same bits. Steps differ in extent where one reads a window of another
    (a pool's padding), so rows stop before such loops and nothing is computed twice. None
    where no such rows exist or the kernel is too small to pay for the thread pool.

    Within a row, a sum along it is kept in SUM_LANES partial sums, one vector, and each
    step's loop along the row is vectorized: softmax 0.31 -> 0.11 ms, layer norm 0.17 ->
    0.04 ms. A reduction over NCHWc's H and W (a pool's window, a global mean) takes a row
    per channel block and the block's channels as its vector: YOLOX's 13x13 max pool 1.93 ->
    0.14 ms; one over NCHW's channels a row per 16 along W, in a vector: an ArgMax over 21
    classes 0.71 -> 0.28 ms (docs/benchmarks.md, stop 79). The elementwise steps around a
    reduction over NCHW's channels take its rows (_reduced_between): a softmax over 21
    classes at 128 x 128 2.6-2.9 -> 0.8-1.0 ms (stop 80). Where TIR refuses a vector schedule,
    the rows as before."""
    from tvm import s_tir, tirx

    sch, blocks = kernel_steps(func)
    if not blocks:
        return None
    across = _reduced_between(sch, blocks)
    if across is not None:
        _moved_last(sch, blocks, across)
    leads, axes, total = [], [], 0
    for block in blocks:
        loops = sch.get_loops(block)
        extents = [sch.get(loop).extent for loop in loops]
        # as TE made it, but for the order: one loop per block axis (spatial ones first)
        bound = _loop_axes(sch, block)
        if bound is None or not all(isinstance(e, tirx.IntImm) for e in extents):
            return None
        lead = []
        for iv, e in zip(bound, extents):
            if iv.iter_type != tirx.IterVar.DataPar:
                break
            lead.append(int(e))
        leads.append(lead)
        axes.append(bound)
        size = 1
        for e in extents:
            size *= int(e)
        total += size
    common = 0
    while len(leads[-1]) > common and all(len(lead) > common and lead[common] == leads[-1][common]
                                          for lead in leads):
        common += 1
    rows = 1
    for e in leads[-1][:common]:
        rows *= e
    if common == 0 or rows < 2 or total < ROWS_MIN_ITERATIONS:
        return None
    # the contiguous axis of a reduction over others (NCHWc's channel block under a pool, W
    # under a reduction over NCHW's channels) is walked in vectors: the whole axis where it
    # is short (no longer a row of its own), else SUM_LANES at a time
    in_vectors, split = common, None
    if any(_vector_axis(sch, block) is not None
           and axes[i][common - 1].same_as(sch.get(block).iter_vars[_vector_axis(sch, block)])
           for i, block in enumerate(blocks)):
        extent = leads[-1][common - 1]
        if extent <= MAX_VECTOR_LOOP and common > 1 and rows // extent >= 2:
            in_vectors = common - 1
        elif extent > MAX_VECTOR_LOOP and extent % SUM_LANES == 0:
            split = SUM_LANES

    def steps():
        sch, blocks = kernel_steps(func)
        if across is not None:
            _moved_last(sch, blocks, across)
        return sch, blocks

    try:  # vectors where TIR allows them
        return _rows(*steps(), in_vectors, True, split, across is not None)
    except Exception:  # noqa: BLE001 (TIR's own errors too, rfactor's among them: a rule's
        pass           # failure, not the kernel's, which the rows without vectors then take)
    try:
        return _rows(*steps(), common, False)
    except s_tir.ScheduleError:
        return None


def _loop_axes(sch, block):
    """The axis of `block` each of its loops walks, in the loops' order, where each loop walks
    one axis, all spatial ones before the reduced ones; else None."""
    from tvm import s_tir, tirx

    loops = sch.get_loops(block)
    if not loops:
        return None
    realize = sch.get(loops[-1]).body
    node = sch.get(block)
    if not isinstance(realize, s_tir.SBlockRealize) or len(loops) != len(node.iter_vars):
        return None
    by_var = {}
    for iv, value in zip(node.iter_vars, realize.iter_values):
        if not isinstance(value, tirx.Var):
            return None
        by_var[value] = iv
    bound = [by_var.get(sch.get(loop).loop_var) for loop in loops]
    if any(iv is None for iv in bound):
        return None
    kinds = [iv.iter_type == tirx.IterVar.DataPar for iv in bound]
    if kinds != sorted(kinds, reverse=True):
        return None
    return bound


def _reduced_between(sch, blocks) -> tuple[int, int] | None:
    """Where a kernel's reductions reduce an axis that lies between others (a softmax or a
    norm over NCHW's channels), its position in the kernel's whole tensors and their rank;
    else None. Steps over the whole tensors walk it among their axes: with it moved last
    (_moved_last), their leading loops are the reductions' (the rows)."""
    from tvm import tirx
    from tvm.tirx.analysis import undefined_vars

    position, rank = None, None
    for block in blocks:
        node = sch.get(block)
        spatial = [iv for iv in node.iter_vars if iv.iter_type == tirx.IterVar.DataPar]
        if len(spatial) == len(node.iter_vars):
            continue
        if len(node.iter_vars) - len(spatial) != 1 \
                or node.iter_vars[-1].iter_type == tirx.IterVar.DataPar:
            return None
        reduced = node.iter_vars[-1].var
        for read in node.reads:
            indices = [r.min for r in read.region]
            if not any(v.same_as(reduced) for d in indices for v in undefined_vars(d)):
                continue
            at = next((i for i, d in enumerate(indices) if d.same_as(reduced)), None)
            if at is None or at == len(indices) - 1 or position not in (None, at):
                return None
            # the reduction keeps the axis (keepdims: a unit one in its place) or drops it
            kept = list(spatial)
            if len(kept) == len(indices) and int(kept[at].dom.extent) == 1:
                del kept[at]
            rest = indices[:at] + indices[at + 1:]
            if len(rest) != len(kept) or not all(d.same_as(iv.var) for d, iv in zip(rest, kept)) \
                    or rank not in (None, len(indices)):
                return None
            position, rank = at, len(indices)
    if position is None:
        return None
    whole = [b for b in blocks if len(sch.get(b).iter_vars) == rank
             and all(iv.iter_type == tirx.IterVar.DataPar for iv in sch.get(b).iter_vars)
             and int(sch.get(b).iter_vars[position].dom.extent) > 1]
    return (position, rank) if whole else None


def _moved_last(sch, blocks, across: tuple[int, int]) -> None:
    """The loop of each step over the kernel's whole tensors (`across` as _reduced_between
    gives it) that walks the reduced axis, or its unit axis in its place, moved after its
    other spatial loops: then the steps' leading loops are the reductions' (the rows)."""
    from tvm import tirx

    position, rank = across
    for block in blocks:
        node = sch.get(block)
        spatial = [iv for iv in node.iter_vars if iv.iter_type == tirx.IterVar.DataPar]
        if len(spatial) != rank:
            continue
        loops = sch.get_loops(block)
        sch.reorder(*loops[:position], *loops[position + 1:rank], loops[position])


def _vector_axis(sch, block) -> int | None:
    """The position of `block`'s last data-parallel axis where it is a reduction over other
    axes whose input holds that axis contiguous (its last index: the channel block of a pool
    or a mean over NCHWc, W of a reduction over NCHW's channels); else None."""
    from tvm import tirx
    from tvm.tirx.analysis import undefined_vars

    iter_vars = list(sch.get(block).iter_vars)
    spatial = [iv.iter_type == tirx.IterVar.DataPar for iv in iter_vars]
    if all(spatial) or not spatial[0]:
        return None
    position = spatial.index(False) - 1
    if any(spatial[position + 1:]) or position < 0:
        return None
    axis = iter_vars[position]
    reduced = [iv.var for iv in iter_vars[position + 1:]]
    # the reads the reduction walks (an index of a reduced axis in them), each along the axis
    walked = [r for r in sch.get(block).reads
              if any(v.same_as(k) for d in r.region for v in undefined_vars(d.min)
                     for k in reduced)]
    if not walked or not all(r.region[-1].min.same_as(axis.var) for r in walked):
        return None
    return position


class _NotVectorized(Exception):
    """A step's loops are not as the vectorization expects."""


def _rows(sch, blocks, common: int, in_lanes: bool, split: int | None = None,
          across: bool = False):
    """`sch` with `blocks` computed row by row (the leading `common` loops of the last),
    rows in parallel; `in_lanes`: sums along a row in SUM_LANES partial sums and each step's
    loop along the row vectorized; `split`: the last of the `common` loops split, its inner
    `split` iterations left to each row; `across`: the last block's last loop is the axis the
    reductions reduce (_moved_last), walked outside the row's contiguous one."""
    from tvm import tirx

    lane_sums = []
    if in_lanes:
        blocks = _padded_to_lanes(sch, blocks)
        blocks = _inlined(sch, blocks)
        steps = []
        for block in blocks:
            partial = _lane_sums(sch, block)
            if partial is not None:
                lane_sums.append(partial)
                steps.append(partial)
            steps.append(block)
        blocks = steps
    if split:
        sch.split(sch.get_loops(blocks[-1])[common - 1], [None, split])
    loops = sch.get_loops(blocks[-1])
    if across and len(loops) > common + 1 and all(
            iv.iter_type == tirx.IterVar.DataPar for iv in sch.get(blocks[-1]).iter_vars):
        sch.reorder(loops[-1], *loops[common:-1])  # the contiguous axis back innermost
        loops = sch.get_loops(blocks[-1])
    outer = sch.fuse(*loops[:common]) if common > 1 else loops[0]
    for block in reversed(blocks[:-1]):
        sch.compute_at(block, outer)
    sch.parallel(outer)
    if in_lanes:
        for block in blocks:
            _vectorized_along_the_row(sch, block, block in lane_sums)
    return sch


def _padded_to_lanes(sch, blocks):
    """`blocks` with each sum along a row at least PADDED_ROW_MIN long that no SUM_LANES divide
    (an audio encoder's 3,199 frames) taken over the row padded to a multiple of SUM_LANES,
    its terms past the row's end zero (TIR's pad_einsum: the terms as a step of their own,
    which _inlined then computes inside the sum). Those sums were one running sum, each add
    waiting for the one before."""
    from tvm import s_tir, tirx

    padded = []
    for block in blocks:
        node = sch.get(block)
        reduced = [iv for iv in node.iter_vars if iv.iter_type != tirx.IterVar.DataPar]
        extent = reduced[0].dom.extent if len(reduced) == 1 else None
        if (not isinstance(extent, tirx.IntImm) or int(extent) < PADDED_ROW_MIN
                or int(extent) % SUM_LANES == 0
                or node.iter_vars[-1].iter_type == tirx.IterVar.DataPar
                or not _sums_loads(node)
                or not any(_reads_whole_rows(read, reduced) for read in node.reads)):
            padded.append(block)
            continue
        before = {sch.get(p).name_hint for p in sch.get_producers(block)}
        try:
            sch.pad_einsum(block, [1] * (len(node.iter_vars) - 1) + [SUM_LANES])
        except s_tir.ScheduleError:  # not an einsum TIR can pad: one running sum, as before
            padded.append(block)
            continue
        padded += [p for p in sch.get_producers(block) if sch.get(p).name_hint not in before]
        padded.append(block)
    return padded


def _sums_loads(node) -> bool:
    """Whether block `node` adds up, from 0, elements loaded from one buffer (`acc + t[.., k]`).
    pad_einsum pads that buffer with zeros: exact for such a sum, not for a maximum (whose
    padding would be -inf) nor for a sum of terms computed in the block from what it pads (a
    LayerNorm's (x - mean)^2: each padded term would add mean^2)."""
    from tvm import tirx

    store, init = node.body, node.init
    if not isinstance(store, tirx.BufferStore) or not isinstance(store.value, tirx.Add) \
            or not isinstance(init, tirx.BufferStore):
        return False
    zero = init.value
    if not isinstance(zero, (tirx.FloatImm, tirx.IntImm)) or float(zero.value) != 0:
        return False
    # loads (tirx.BufferLoad builds a TensorLoad here, its buffer the `source`)
    total, term = getattr(store.value.a, "source", None), getattr(store.value.b, "source", None)
    return total is not None and total.same_as(store.buffer) and term is not None


def _lane_sums(sch, block):
    """The block of SUM_LANES partial sums (rfactor) of `block`, a reduction over its last
    axes that an input holds contiguous (its last indices, whole: a LayerNorm's row, an
    InstanceNorm's H x W); None for any other block."""
    from tvm import tirx

    node = sch.get(block)
    kinds = [iv.iter_type != tirx.IterVar.DataPar for iv in node.iter_vars]
    count = sum(kinds)
    if not count or any(kinds[:-count]):
        return None
    reduced = node.iter_vars[-count:]
    if not any(_reads_whole_rows(read, reduced) for read in node.reads):
        return None
    loops = sch.get_loops(block)[-count:]
    extent = 1
    for loop in loops:
        if not isinstance(sch.get(loop).extent, tirx.IntImm):
            return None
        extent *= int(sch.get(loop).extent)
    if extent < 2 * SUM_LANES or extent % SUM_LANES:
        return None
    inner = sch.fuse(*loops) if count > 1 else loops[0]
    lanes = sch.split(inner, [None, SUM_LANES])[1]
    return sch.rfactor(lanes, len(node.iter_vars) - count)


def _reads_whole_rows(read, reduced) -> bool:
    """Whether `read` indexes its buffer's last dimensions by the `reduced` axes themselves,
    each over the whole dimension (so that together they walk contiguous memory)."""
    from tvm import tirx

    region, shape = read.region, read.source.shape
    if len(region) < len(reduced):
        return False
    for r, iv, size in zip(region[-len(reduced):], reduced, shape[-len(reduced):]):
        # a row padded to whole vectors (_padded_to_lanes) reads up to its end; one read
        # through a clamped index (fast_math's softmax over ragged rows) its last element again
        if not (r.min.same_as(iv.var) or _clamped(r.min, iv.var, size)) \
                or not isinstance(size, tirx.IntImm) \
                or not int(size) <= int(iv.dom.extent) < int(size) + SUM_LANES:
            return False
    return True


def _clamped(index, var, size) -> bool:
    """Whether `index` is min(var, size - 1)."""
    from tvm import tirx

    return isinstance(index, tirx.Min) and index.a.same_as(var) \
        and isinstance(index.b, tirx.IntImm) and isinstance(size, tirx.IntImm) \
        and int(index.b) == int(size) - 1


def _reads_clamped(node) -> bool:
    """Whether block `node` reads any buffer through a clamped index (min(v, n - 1))."""
    from tvm import tirx

    return any(isinstance(r.min, tirx.Min) for read in node.reads for r in read.region)


def _last_vector_apart(sch, loop) -> None:
    """`loop` (over a row's vectors) with its last iteration a loop of its own, where a read
    through a clamped index reads whole vectors only in the others (their index simplifies to
    the loop's; in the last it is a gather)."""
    extent = int(sch.get(loop).extent)
    if extent > 1:
        sch.loop_partition(loop, [extent - 1, None])


def _vectorized_along_the_row(sch, block, lane_sums: bool) -> None:
    """The innermost loop of `block` under the row vectorized: a partial sums block's lanes
    (moved innermost, its initialization split off), or a data-parallel step's last loop
    (whole up to MAX_VECTOR_LOOP, else in SUM_LANES and, where SUM_LANES do not divide it, a
    shorter vector after them: a softmax's last step over 197 keys had stayed in scalars)."""
    from tvm import s_tir, tirx

    # the row's loop comes first; a unit axis (a reduction's kept one) walks nothing
    own = [loop for loop in sch.get_loops(block)[1:] if not _is_one(sch.get(loop).extent)]
    if lane_sums:
        if len(own) < 2 or int(sch.get(own[-2]).extent) != SUM_LANES:
            raise _NotVectorized(sch.get(block).name_hint)
        sch.reorder(own[-1], own[-2])
        lanes, along = sch.get_loops(block)[-1], sch.get_loops(block)[-2]
        sch.vectorize(lanes)  # before the initialization is split off, which TIR needs
        sch.decompose_reduction(block, along)
        if _reads_clamped(sch.get(block)):
            _last_vector_apart(sch, sch.get_loops(block)[-2])
        return
    node = sch.get(block)
    if not own:
        return
    reduced = sum(iv.iter_type != tirx.IterVar.DataPar for iv in node.iter_vars)
    if reduced:
        position = _vector_axis(sch, block)
        if position is None or len(own) <= reduced:
            return
        vector, window = own[-reduced - 1], own[-reduced:]
        if not isinstance(sch.get(vector).extent, tirx.IntImm) \
                or int(sch.get(vector).extent) > MAX_VECTOR_LOOP:
            raise _NotVectorized(node.name_hint)
        sch.reorder(*window, vector)
        sch.vectorize(vector)  # before the initialization is split off, which TIR needs
        sch.decompose_reduction(block, window[0])
        return
    extent = sch.get(own[-1]).extent
    if not isinstance(extent, tirx.IntImm):
        return
    extent = int(extent)
    if _reads_clamped(node) and extent % SUM_LANES == 0:
        vectors, lanes = sch.split(own[-1], [None, SUM_LANES])
        sch.vectorize(lanes)
        _last_vector_apart(sch, vectors)
    elif extent <= MAX_VECTOR_LOOP:
        sch.vectorize(own[-1])
    elif extent % SUM_LANES == 0:
        sch.vectorize(sch.split(own[-1], [None, SUM_LANES])[1])
    else:  # whole vectors, then the rest of the row in one shorter vector
        try:
            whole, rest = sch.loop_partition(own[-1], [extent - extent % SUM_LANES, None])
        except s_tir.ScheduleError:  # the step in scalars, as before
            return
        sch.vectorize(sch.split(whole, [None, SUM_LANES])[1])
        sch.vectorize(rest)


def _is_one(extent) -> bool:
    """Whether a loop of this extent runs once."""
    from tvm import tirx

    return isinstance(extent, tirx.IntImm) and int(extent) == 1


def _inlined(sch, blocks):
    """`blocks` less the elementwise steps that only one step reads, computed inside that one
    (a softmax's x - max inside its exp): a buffer fewer written and read per row."""
    from tvm import s_tir, tirx

    kept = []
    for block in blocks[:-1]:
        node = sch.get(block)
        if all(iv.iter_type == tirx.IterVar.DataPar for iv in node.iter_vars) \
                and len(sch.get_consumers(block)) == 1:
            try:
                sch.compute_inline(block)
                continue
            except s_tir.ScheduleError:
                pass
        kept.append(block)
    return kept + blocks[-1:]
