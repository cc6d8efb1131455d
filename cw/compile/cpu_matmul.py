"""Weight matrices of CPU matrix products stored in column panels.

`x @ W` with W [K, N] stored row-major: cw's matrix-product schedule (cpu_kernels) computes a
tile of output rows x one panel of `b` columns (two SIMD vectors) by reading, for every k, the
`b` values W[k, j:j+b]. Consecutive k are then N floats apart: BERT-base's 768 x 3072 layers
touch a new 4 KiB page for every k of every tile. Stored as panels [N / b, K, b] (as
onnxruntime's MLAS packs its B matrix), a tile's whole panel is one contiguous run of memory
read front to back; with the schedule's K blocks (cpu_kernels.K_BLOCK) BERT-base went from
×2.0 of onnxruntime's time to ×1.12 on 2 EPYC cores (docs/benchmarks.md, CPU kernels).

The packing is weight-only math, lifted with the rest when the graph is imported
(frontend.import_model), so bundles store packed matrices and pay nothing per inference; only
2-D float32 weight matrices are packed, their columns padded with zeros up to a whole panel
where a panel does not divide N (panel_width).

The schedule takes exact tiles of rows and whole vectors of columns. A product whose rows no
tile divides (a ViT's 197 tokens) computes whole tiles, the extra rows from x's last row
through a clamped index (packed_matmul, clamped_matmul), and a batched W's columns are padded
with zeros to whole vectors (batched_columns); the extra rows and columns are sliced off in
the epilogue.
"""

from __future__ import annotations

from cw.compile.relax_rewrite import rewrite_calls
from cw.tvm_env import load_tvm

PACKED_BLOCK = "packed_matmul"  # the TIR block cpu_kernels.schedule_matmul looks for


def panel_width(n: int, lanes: int) -> int | None:
    """Columns per panel: two vectors of `lanes` floats (the schedule's register tile), else
    one; the product pads N with zero columns up to a multiple of it (padded_columns). None where
    the padding would add more than an eighth of the work (a classifier's 10 columns)."""
    return next((b for b in (2 * lanes, lanes) if -n % b * 8 <= n), None)


def padded_columns(n: int, width: int) -> int:
    """N rounded up to whole panels. Two vectors wide, padded, beat one vector wide, exact: a
    1000-class classifier on 2 AVX2 cores, x0.65 of the time at batch 1 and x0.75 at 16 (to 1008
    in panels of 16 columns, not 125 of 8); a DFT's 402 columns, unpacked, took x24 the time."""
    return n + -n % width


def packed_matmul(x, panels, rows: int | None = None):
    """x [..., K] @ W, with W given as panels [N / b, K, b] (TE); with `rows`, that many rows
    (more than x's M, for whole tiles), the extra ones computed from x's last row (a clamped
    index: no condition in the loop) and dropped by the caller."""
    from tvm import te, tirx

    *lead, depth = x.shape
    blocks, _, width = panels.shape
    k = te.reduce_axis((0, depth), name="k")
    m = lead[-1] if lead else None

    def element(*index):
        *outer, j = index
        if rows is not None:
            outer[-1] = tirx.min(outer[-1], m - 1)
        return te.sum(x[(*outer, k)] * panels[j // width, k, j % width], axis=k)

    shape = (*lead[:-1], rows, blocks * width) if rows is not None else (*lead, blocks * width)
    return te.compute(shape, element, name=PACKED_BLOCK)


def pack_weights(mod, lanes: int):
    """Every matmul of `main` by a 2-D float32 matrix as a product with its matrix in panels of
    `panel_width` columns (before LiftTransformParams, so that the packing is lifted). Returns
    (module, products rewritten)."""
    load_tvm()
    from tvm import relax

    matmul = "relax.matmul"

    def replacement(call, builder):
        if getattr(call.op, "name", "") != matmul:
            return None
        x, w = call.args
        x_ty, w_ty = x.ty, w.ty
        if (getattr(w_ty, "ndim", None) != 2 or getattr(x_ty, "ndim", 0) < 2
                or x_ty.dtype != "float32" or w_ty.dtype != "float32"
                or (call.attrs.out_dtype and str(call.attrs.out_dtype) != "float32")):
            return None
        try:
            depth, n = (int(d) for d in w_ty.shape)
        except (TypeError, ValueError):  # a symbolic dimension
            return None
        width = panel_width(n, lanes)
        if width is None:
            return None
        padded = padded_columns(n, width)
        if padded != n:
            w = relax.op.nn.pad(w, [0, 0, 0, padded - n])
        panels = relax.op.permute_dims(relax.op.reshape(w, [depth, padded // width, width]),
                                       [1, 0, 2])
        m = _static(list(x_ty.shape)[-2:-1])
        rows = _tile_rows(m[0]) if m else None
        product = builder.call_te(packed_matmul, x, builder.emit(panels), rows,
                                  primfunc_name_hint="matmul")
        if padded == n and rows is None:
            return product
        # the zero columns' and the extra rows' products dropped (a copy TVM fuses into what
        # reads them)
        axes, ends = [x_ty.ndim - 1], [n]
        if rows is not None:
            axes, ends = [x_ty.ndim - 2, x_ty.ndim - 1], [m[0], n]
        return relax.op.strided_slice(builder.emit(product), axes=axes, begin=[0] * len(axes),
                                      end=ends)

    return rewrite_calls(mod, replacement, with_builder=True)


# a product's rows run in tiles of 4-8 (cpu_kernels.schedule_matmul takes exact tiles only)
# and its columns in chunks of 8-64: rows no such tile divides are computed in whole tiles of 8,
# columns of a batched W from COLUMN_PAD_MIN on padded to whole vectors (batched_columns)
ROW_TILES = (8, 7, 6, 5, 4)
ROW_PAD = 8
COLUMN_PAD_MIN = 16


def _static(shape) -> list[int] | None:
    try:
        return [int(d) for d in shape]
    except (TypeError, ValueError):
        return None


def batched_columns(n: int, lanes: int) -> int:
    """Columns to compute of a product by a batched W of `n`: a multiple of two vectors (the
    schedule's tile of 4 rows x 2 vectors) where that adds at most an eighth to the least
    padding, else of one vector (its tile then 8 rows x 1 vector), else n where 8 divides it.
    A ViT's scores, 197 keys: 224 columns took x0.57 of the time of 208 (8 sums in registers,
    not 4: the FMAs waited on each other); CLIP's 77: 80 (96 was x1.08)."""
    if n < COLUMN_PAD_MIN:
        return n
    least = n if n % 8 == 0 else n + -n % lanes
    return next((p for p in (n + -n % (2 * lanes), n + -n % lanes) if p * 8 <= least * 9),
                least)


def _same_dimension(a, b) -> bool:
    """Whether two dimensions are one number or one symbolic variable (a batch)."""
    try:
        return int(a) == int(b)
    except (TypeError, ValueError):
        return a.same_as(b)


def _tile_rows(m: int) -> int | None:
    """Rows to compute for a product of `m` rows no tile of 4-8 divides (a ViT's 197 tokens,
    a prime: its linear layers ran one row at a time, 38-45 GFLOP/s), else None."""
    if m < ROW_PAD or any(m % t == 0 for t in ROW_TILES):
        return None
    return m + -m % ROW_PAD


def clamped_matmul(x, w, rows: int):
    """x [B..., M, K] @ w [B..., K, N] (TE) over `rows` rows (more than M, for whole tiles),
    the extra ones computed from x's last row (a clamped index, as packed_matmul) and dropped
    by the caller. Named as TVM's own matmul block, which cpu_kernels.schedule_matmul takes."""
    from tvm import te, tirx

    *lead, m, depth = x.shape
    k = te.reduce_axis((0, depth), name="k")

    def element(*index):
        *outer, i, j = index
        return te.sum(x[(*outer, tirx.min(i, m - 1), k)] * w[(*outer, k, j)], axis=k)

    return te.compute((*lead, rows, w.shape[-1]), element, name="matmul")


def ragged_products_padded(mod, lanes: int):
    """Every float32 matmul by a batched W (attention's products, W an activation) whose rows
    no tile of 4-8 divides computed in whole tiles (clamped_matmul), and whose columns no
    vector divides on a W padded with zeros (batched_columns; `lanes`: float32 per vector),
    the extra rows and columns sliced off after: a ViT's 197 x 197 attention scores ran in
    TVM's own loops (5 GFLOP/s). Rows padded with zeros instead put the pad in the kernel that
    made x, a softmax, whose rows then no longer lined up with its steps' (TVM's loops there).
    Products by a 2-D weight matrix are pack_weights'. Returns (module, products rewritten)."""
    load_tvm()
    from tvm import relax

    def replacement(call, builder):
        if getattr(call.op, "name", "") != "relax.matmul":
            return None
        x, w = call.args
        x_ty, w_ty = x.ty, w.ty
        if getattr(x_ty, "ndim", 0) < 2 or getattr(w_ty, "ndim", 0) < 3 \
                or x_ty.dtype != "float32" or w_ty.dtype != "float32":
            return None
        rows, columns = _static(list(x_ty.shape)[-2:-1]), _static(list(w_ty.shape)[-1:])
        if rows is None or columns is None:
            return None
        (m,), (n,) = rows, columns
        padded_m = _tile_rows(m) or m
        pad_n = batched_columns(n, lanes) - n
        if padded_m == m and not pad_n:
            return None
        if pad_n:
            w = relax.op.nn.pad(w, [0, 0] * (w_ty.ndim - 1) + [0, pad_n])
        if padded_m == m:
            product = relax.op.matmul(x, w, out_dtype=call.attrs.out_dtype)
        elif x_ty.ndim == w_ty.ndim and all(_same_dimension(a, b) for a, b in
                                            zip(list(x_ty.shape)[:-2], list(w_ty.shape)[:-2])):
            product = builder.emit(builder.call_te(clamped_matmul, x, builder.emit(w),
                                                   padded_m, primfunc_name_hint="matmul"))
        else:  # products broadcast over a batch: zero rows
            x = relax.op.nn.pad(x, [0, 0] * (x_ty.ndim - 2) + [0, padded_m - m, 0, 0])
            product = relax.op.matmul(x, w, out_dtype=call.attrs.out_dtype)
        ndim = max(x_ty.ndim, w_ty.ndim)
        return relax.op.strided_slice(product, axes=[ndim - 2, ndim - 1], begin=[0, 0],
                                      end=[m, n])

    return rewrite_calls(mod, replacement, with_builder=True)
