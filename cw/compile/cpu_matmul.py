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


def packed_matmul(x, panels):
    """x [..., K] @ W, with W given as panels [N / b, K, b] (TE)."""
    from tvm import te

    *lead, depth = x.shape
    blocks, _, width = panels.shape
    k = te.reduce_axis((0, depth), name="k")

    def element(*index):
        *rows, j = index
        return te.sum(x[(*rows, k)] * panels[j // width, k, j % width], axis=k)

    return te.compute((*lead, blocks * width), element, name=PACKED_BLOCK)


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
        product = builder.call_te(packed_matmul, x, builder.emit(panels),
                                  primfunc_name_hint="matmul")
        if padded == n:
            return product
        # the zero columns' products dropped (a copy TVM fuses into what reads them)
        return relax.op.strided_slice(builder.emit(product), axes=[x_ty.ndim - 1], begin=[0],
                                      end=[n])

    return rewrite_calls(mod, replacement, with_builder=True)
