"""Default CPU schedules for the kernels that are not convolutions (cw/compile/cpu_conv.py has
those): fused elementwise kernels as one parallel, vectorized pass, and matrix products with one
weight matrix (a classifier's, a transformer's linear layers).

TVM's CPU pipeline compiles a fused kernel it has no schedule for as it comes out of FuseTIR:
one loop nest per fused operator, each writing a whole intermediate buffer, on one thread.
densenet121's pre-activation `concat → BatchNorm (decomposed: subtract, divide, multiply, add)
→ ReLU` became six passes over a tensor of up to 1,024 channels per layer: 36 of its 82 ms at
batch 1 on a 2-core Xeon, more than onnxruntime's whole model. Inlined into one pass, spread
over the cores and vectorized, the same 58 kernels took 4 ms. A classifier's `x @ W + b` with W
stored K x N walked W column by column: mobilenet_v2's took 2.1-2.5 ms, a quarter of the model,
and 0.44 ms with W read row by row in vectors (docs/benchmarks.md). A tiny transformer's eight
linear layers (x: 16 tokens x 128) took 3.2 of its 3.4 ms that way, and 0.25 ms scheduled.

The rest (softmax, layer norm, means, pooling) keep TVM's loops, computed row by row on every
core, in vectors along the row (cpu_rows.py). Tuning records still win over all of these
schedules.
"""

from __future__ import annotations

# below this many elements a kernel runs on one thread: waking the pool costs more than the loop
PARALLEL_MIN_ELEMENTS = 1 << 14
# an innermost loop up to this long is vectorized whole (a channel block of 8 or 16, a row)
MAX_VECTOR_LOOP = 64
# rows from which a kernel no vector divides keeps its innermost loop apart (enough rows for
# any core count of the machines cw runs on)
MIN_ROWS_UNFUSED = 64
# from this many rows on, a product's sums are kept in registers (_register_tiled); below, a
# classifier at batch 1-4 ran 5-12 % slower that way
REGISTER_TILE_MIN_ROWS = 8
# K per block of a product by a packed W (_register_tiled): 256 x 2 AVX2 vectors = 16 KiB of
# panel, half of L1. 128 x 768 x 3072 on 2 EPYC cores, 4-row tiles: 81-86 GFLOP/s unblocked,
# 93-97 in blocks of 128, 97-107 of 256, 84-85 of 512 (onnxruntime's MLAS: 124)
K_BLOCK = 256


def kernel_steps(func):
    """A schedule of `func` and its steps (the blocks under its root; none where it has no
    root block)."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    try:
        return sch, sch.get_child_blocks(sch.get_sblock("root"))
    except s_tir.ScheduleError:
        return sch, []


def schedule_elementwise(func):
    """`func` scheduled as one parallel, vectorized pass, or None when it is not a kernel of
    static spatial blocks that inline into its last one."""
    from tvm import s_tir, tirx

    sch, blocks = kernel_steps(func)
    if not blocks:
        return None
    for block in blocks:
        spatial = all(iv.iter_type == tirx.IterVar.DataPar for iv in sch.get(block).iter_vars)
        if not spatial or not sch.get_loops(block):
            return None
    try:
        for block in blocks[:-1]:
            sch.compute_inline(block)  # fails on an output or a block read twice: left alone
    except s_tir.ScheduleError:
        return None
    loops = sch.get_loops(blocks[-1])
    extents = [sch.get(loop).extent for loop in loops]
    if not all(isinstance(e, tirx.IntImm) for e in extents):
        return None
    extents = [int(e) for e in extents]
    total = 1
    for e in extents:
        total *= e
    if len(loops) > 1 and extents[-1] <= MAX_VECTOR_LOOP:
        outer = sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0]
        vector = loops[-1]
    elif len(loops) > 1 and total % 8 and total // extents[-1] >= MIN_ROWS_UNFUSED:
        # no vectors of 8 divide it: rows in parallel, each a loop of its own, so that the
        # index arithmetic of the outer axes is done once a row, not once an element (YOLOX's
        # head, [3549, 85] gathered from 9 maps through nested selects: 1.4-1.7 -> 0.6-0.7 ms)
        outer = sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0]
        if total >= PARALLEL_MIN_ELEMENTS:
            sch.parallel(outer)
        return sch
    else:
        whole = sch.fuse(*loops) if len(loops) > 1 else loops[0]
        lanes = next((n for n in (16, 8) if total % n == 0), None)
        if lanes is None:
            if total >= PARALLEL_MIN_ELEMENTS:
                sch.parallel(whole)
            return sch
        outer, vector = sch.split(whole, [None, lanes])
    if total >= PARALLEL_MIN_ELEMENTS:
        sch.parallel(outer)
    sch.vectorize(vector)
    return sch


def fuse_epilogue(sch, block, loop) -> bool:
    """The elementwise operators after `block` (bias, BatchNorm's scale and shift, residual
    add, ReLU; SiLU's x * sigmoid(x), which reads x twice) inlined into the last one, which
    then runs under `loop`, vectorized: per tile, right after the tile is complete, so the
    results go to memory once. False where they end in more than one output (the caller
    then drops the schedule)."""
    epilogue, seen = [], set()
    frontier = list(sch.get_consumers(block))
    while frontier:  # every block downstream of `block`, each once, nearest first
        b = frontier.pop(0)
        name = sch.get(b).name_hint
        if name in seen:
            continue
        seen.add(name)
        epilogue.append(b)
        frontier += sch.get_consumers(b)
    sinks = [b for b in epilogue if not sch.get_consumers(b)]
    if len(sinks) > 1:
        return False
    # an elementwise side input of the epilogue (a quantized residual add's scaled skip
    # connection) is computed where it is read: reverse_compute_at needs every producer of
    # the sink under the loop
    names = {sch.get(b).name_hint for b in epilogue} | {sch.get(block).name_hint}
    side = [p for b in epilogue for p in sch.get_producers(b)
            if sch.get(p).name_hint not in names]
    while side:
        producer = side.pop()
        if sch.get(producer).name_hint in names:
            continue
        names.add(sch.get(producer).name_hint)
        side += sch.get_producers(producer)
        sch.compute_inline(producer)
    for b in epilogue:
        if b not in sinks:  # into all its consumers: a branch (SiLU's) joins again below
            sch.compute_inline(b)
    if sinks:
        sch.reverse_compute_at(sinks[0], loop)
        sch.vectorize(sch.get_loops(sinks[0])[-1])
    return True


def schedule_matmul(func):
    """`x @ W (+ elementwise epilogue)` with x [..., M, K] and W [K, N] (a classifier, where M
    is the batch; a transformer's linear layers, where the rows are every token of every
    sample), or W [B..., K, N] with x's leading dimensions B... (attention's products, one per
    sample and head): parallel over the products and chunks of N; then for each k one row of
    W in vectors times x[i, k] for every row i, so each W is read once, row by row. From
    REGISTER_TILE_MIN_ROWS rows on, in tiles of rows whose sums stay in registers
    (_register_tiled). None for any other kernel."""
    from tvm import s_tir, tirx

    from cw.compile.cpu_matmul import PACKED_BLOCK

    sch = s_tir.Schedule(func)
    matmul = packed = None
    for name in ("matmul", PACKED_BLOCK):
        try:
            matmul, packed = sch.get_sblock(name), name == PACKED_BLOCK
            break
        except s_tir.ScheduleError:
            continue
    if matmul is None:
        return None
    loops = sch.get_loops(matmul)
    block = sch.get(matmul)
    kinds = [iv.iter_type for iv in block.iter_vars]
    if len(loops) < 3 or len(loops) != len(kinds) or \
            kinds != [tirx.IterVar.DataPar] * (len(kinds) - 1) + [tirx.IterVar.CommReduce]:
        return None
    extents = [sch.get(loop).extent for loop in loops]
    if not all(isinstance(e, tirx.IntImm) for e in extents):
        return None
    lead_vars = [iv.var for iv in block.iter_vars[:-2]]
    j_var, k_var = (iv.var for iv in block.iter_vars[-2:])
    # W read as W[b..., k, j]: rows contiguous along N (not the transposed K-contiguous layout),
    # its b... a prefix of the loops (the batch of products); the rest of the loops are rows
    n = int(extents[-2])
    if packed:  # W in panels [N / b, K, b] (cpu_matmul): tiles of exactly one panel's columns
        widths = [int(r.source.shape[-1]) for r in block.reads
                  if len(r.region) == 3 and r.region[1].min.same_as(k_var)]
        batch, chunk = 0, (widths[0] if len(widths) == 1 else None)
    else:
        batch = _weight_batch(block, lead_vars, k_var, j_var)
        chunk = next((c for c in (64, 32, 16, 8) if n % c == 0), None)
    if batch is None or batch == len(lead_vars) or chunk is None:
        return None
    *lead, j, k = loops
    products, row_loops = lead[:batch], lead[batch:]
    # tiles within the last row dimension: a tile across two of them (fused) is no box, and
    # TVM then ran the epilogue over rows not yet summed (wrong results); and exact tiles (a
    # guarded partial one made the loop 8x slower)
    last, depth = int(extents[-3]), int(extents[-1])
    if packed:
        most = _packed_tile_rows()
    else:
        # up to 16 sums: 8 rows x 2 vectors where K is long enough to pay for them, else 4
        # (attention's K of 64: 4 rows faster); 8 rows where a tile is one vector wide (N no
        # two vectors divide), whose 4 sums left the FMA units waiting on each other
        # (attention's 12 x 128 x 64 x 80: x0.67 of the time)
        most = 8 if depth >= 256 or n % (2 * _target_lanes()) else 4
    tile = next(t for t in range(most, 0, -1) if last % t == 0)
    if last >= REGISTER_TILE_MIN_ROWS and tile > 1:
        return _register_tiled(sch, matmul, [*products, *row_loops[:-1]], row_loops[-1], tile,
                               j, k, n, chunk if packed else None,
                               K_BLOCK if packed and depth > K_BLOCK and depth % K_BLOCK == 0
                               else None)
    i = sch.fuse(*row_loops) if len(row_loops) > 1 else row_loops[0]
    jo, ji = sch.split(j, [None, chunk])
    sch.reorder(*products, jo, k, i, ji)
    outer = sch.fuse(*products, jo) if products else jo
    if not fuse_epilogue(sch, matmul, outer):
        return None
    # the order matters: TIR parallelizes and vectorizes a reduction before splitting its init
    sch.parallel(outer)
    sch.vectorize(ji)
    sch.decompose_reduction(matmul, k)
    return sch


def _packed_tile_rows() -> int:
    """Rows of a tile over a packed W's panel (two vectors wide): 8 where AVX-512's 32 vector
    registers hold their 16 sums, else 4. AVX2 has 16 registers: 16 sums left none for W's two
    vectors and the broadcast, and LLVM kept 4 of them on the stack (a load and a store each
    per k; 128 x 768 x 3072 on 2 EPYC cores: 80-83 GFLOP/s in 8-row tiles, 97-107 in 4-row)."""
    from cw.compile.cpu_conv import WIDE_BLOCK

    return 8 if _target_lanes() == WIDE_BLOCK else 4


def _register_tiled(sch, matmul, outer_loops, i, tile: int, j, k, n: int,
                    chunk: int | None = None, k_block: int | None = None):
    """`i` in tiles of `tile` rows whose sums stay in registers: rows x one or two vectors of N
    (of `n`), run in parallel with `outer_loops` and the chunks of N; for each k one
    load of W's vectors, a broadcast per row and one FMA per row and vector, the sums written
    once at the end (the schedule above loads and stores them for every k). Side by side on a
    2-core AVX2 EPYC: BERT-base's linear layers x0.66-0.71 of the time, attention's products
    x0.54-0.59, a classifier at batch 16 x0.61 (docs/benchmarks.md). None where the epilogue
    does not fuse.

    `k_block` (a packed W, cpu_matmul): K in blocks of that many, each block's part of the
    panel (k_block x 2 vectors: 16 KiB for AVX2) read by every tile of rows while it stays in
    L1, the tiles' sums kept in a local buffer across blocks (as MLAS and BLIS do). Without it,
    each tile streamed the whole panel from L2 (BERT-base's 3072 x 768: 192 KiB)."""
    if chunk is None:  # (a packed W's panel sets it)
        lanes = _target_lanes()
        chunk = next(c for c in (2 * lanes, lanes, 8) if n % c == 0)  # (the caller checked 8)
    io, ii = sch.split(i, [None, tile])
    jo, ji = sch.split(j, [None, chunk])
    if k_block:
        ko, ki = sch.split(k, [None, k_block])
        sch.reorder(*outer_loops, jo, ko, io, ki, ii, ji)
        outer = sch.fuse(*outer_loops, jo)
        first_k = ko
    else:
        sch.reorder(*outer_loops, jo, io, k, ii, ji)
        outer = sch.fuse(*outer_loops, jo, io)
        first_k = k
    sums = sch.cache_write(matmul, 0, "local")
    sch.reverse_compute_at(sums, outer)
    if not fuse_epilogue(sch, sums, outer):
        return None
    sch.parallel(outer)
    sch.unroll(ii)
    sch.vectorize(ji)
    sch.decompose_reduction(matmul, first_k)
    return sch


def _target_lanes() -> int:
    """float32 lanes of the current target's vectors (cw compiles under its target; 8 without
    one)."""
    from cw.compile.cpu_conv import target_block

    return target_block()


def _weight_batch(block, lead_vars, k_var, j_var) -> int | None:
    """How many of the leading loops index W as well as x (0 for one W shared by every row), or
    None where no operand is read as W[b..., k, j] with b... a prefix of `lead_vars`."""
    for r in block.reads:
        region = r.region
        if len(region) < 2 or not region[-2].min.same_as(k_var) or \
                not region[-1].min.same_as(j_var):
            continue
        batch = len(region) - 2
        if batch <= len(lead_vars) and all(region[d].min.same_as(lead_vars[d])
                                           for d in range(batch)):
            return batch
    return None


def default_schedule(func):
    """The schedule of this module or cpu_rows that takes `func`, or None."""
    from cw.compile.cpu_rows import schedule_rows  # which imports this module

    for schedule in (schedule_elementwise, schedule_matmul, schedule_rows):
        sch = schedule(func)
        if sch is not None:
            return sch
    return None


def schedule_kernels(mod):
    """Give every unscheduled kernel of `mod` that one of these schedules takes its schedule.
    Returns (module, number of kernels scheduled)."""
    from tvm import s_tir, tirx

    updates = {}
    for gv, func in mod.functions.items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        if func.attrs and ("tirx.is_scheduled" in func.attrs or "tir.is_scheduled" in func.attrs):
            continue  # a tuning record's or cw's convolution schedule
        try:
            sch = default_schedule(func)
        except s_tir.ScheduleError:
            sch = None
        if sch is not None:
            updates[gv] = sch.mod["main"].with_attr("tirx.is_scheduled", True)
    for gv, func in updates.items():
        mod[gv] = func
    return mod, len(updates)


def count_matmuls(mod) -> int:
    """How many of `mod`'s unscheduled kernels `schedule_matmul` takes (they run ~1.7x faster as
    AVX2 code: the choice of CPU level counts them)."""
    from tvm import s_tir, tirx

    count = 0
    for func in mod.functions.values():
        if not isinstance(func, tirx.PrimFunc) or (func.attrs and (
                "tirx.is_scheduled" in func.attrs or "tir.is_scheduled" in func.attrs)):
            continue
        try:
            count += schedule_matmul(func) is not None
        except s_tir.ScheduleError:
            pass
    return count
