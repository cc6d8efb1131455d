"""CPU schedules for the kernels of TVM's loops that no other schedule takes (softmax, layer
norm, means, pools, ArgMax): every step computed row by row, rows spread over the cores, and
within a row in vectors (cpu_kernels.default_schedule tries this last).

A row is the leading loops all steps share; its intermediates then stay in cache. Within it,
a sum along the row keeps SUM_LANES partial sums in one vector (TIR's rfactor), a reduction
over NCHWc's H and W walks the channel block in a vector, one over NCHW's channels 16
positions along W; each step's loop along the row is vectorized.
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
    classes 0.71 -> 0.28 ms (docs/benchmarks.md, stop 79). Where TIR refuses a vector
    schedule, the rows as before."""
    from tvm import s_tir, tirx

    sch, blocks = kernel_steps(func)
    if not blocks:
        return None
    leads, total = [], 0
    for block in blocks:
        loops = sch.get_loops(block)
        iter_vars = sch.get(block).iter_vars
        extents = [sch.get(loop).extent for loop in loops]
        # as TE made it: one loop per block axis, in order (spatial axes, then reduced ones)
        if len(loops) != len(iter_vars) or not all(isinstance(e, tirx.IntImm) for e in extents):
            return None
        lead = []
        for iv, e in zip(iter_vars, extents):
            if iv.iter_type != tirx.IterVar.DataPar:
                break
            lead.append(int(e))
        leads.append(lead)
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
    if any(_vector_axis(sch, block) == common - 1 for block in blocks):
        extent = leads[-1][common - 1]
        if extent <= MAX_VECTOR_LOOP and common > 1 and rows // extent >= 2:
            in_vectors = common - 1
        elif extent > MAX_VECTOR_LOOP and extent % SUM_LANES == 0:
            split = SUM_LANES
    try:  # vectors where TIR allows them
        return _rows(*kernel_steps(func), in_vectors, True, split)
    except Exception:  # noqa: BLE001 (TIR's own errors too, rfactor's among them: a rule's
        pass           # failure, not the kernel's, which the rows without vectors then take)
    try:
        return _rows(*kernel_steps(func), common, False)
    except s_tir.ScheduleError:
        return None


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


def _rows(sch, blocks, common: int, in_lanes: bool, split: int | None = None):
    """`sch` with `blocks` computed row by row (the leading `common` loops of the last),
    rows in parallel; `in_lanes`: sums along a row in SUM_LANES partial sums and each step's
    loop along the row vectorized; `split`: the last of the `common` loops split, its inner
    `split` iterations left to each row."""
    lane_sums = []
    if in_lanes:
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
    outer = sch.fuse(*loops[:common]) if common > 1 else loops[0]
    for block in reversed(blocks[:-1]):
        sch.compute_at(block, outer)
    sch.parallel(outer)
    if in_lanes:
        for block in blocks:
            _vectorized_along_the_row(sch, block, block in lane_sums)
    return sch


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
        if not r.min.same_as(iv.var) or not isinstance(size, tirx.IntImm) \
                or int(size) != int(iv.dom.extent):
            return False
    return True


def _vectorized_along_the_row(sch, block, lane_sums: bool) -> None:
    """The innermost loop of `block` under the row vectorized: a partial sums block's lanes
    (moved innermost, its initialization split off), or a data-parallel step's last loop
    (whole up to MAX_VECTOR_LOOP, else in SUM_LANES)."""
    from tvm import tirx

    own = sch.get_loops(block)[1:]  # the row's loop comes first
    if lane_sums:
        if len(own) < 2 or int(sch.get(own[-2]).extent) != SUM_LANES:
            raise _NotVectorized(sch.get(block).name_hint)
        sch.reorder(own[-1], own[-2])
        lanes, along = sch.get_loops(block)[-1], sch.get_loops(block)[-2]
        sch.vectorize(lanes)  # before the initialization is split off, which TIR needs
        sch.decompose_reduction(block, along)
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
    if int(extent) <= MAX_VECTOR_LOOP:
        sch.vectorize(own[-1])
    elif int(extent) % SUM_LANES == 0:
        sch.vectorize(sch.split(own[-1], [None, SUM_LANES])[1])
