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
2-D float32 weight matrices whose N a panel divides are packed.
"""

from __future__ import annotations

from cw.compile.relax_rewrite import rewrite_calls
from cw.tvm_env import load_tvm

PACKED_BLOCK = "packed_matmul"  # the TIR block cpu_kernels.schedule_matmul looks for


def panel_width(n: int, lanes: int) -> int | None:
    """Columns per panel: two vectors of `lanes` floats (the schedule's register tile), else one;
    None where neither divides N."""
    return next((b for b in (2 * lanes, lanes) if n % b == 0), None)


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
        panels = relax.op.permute_dims(relax.op.reshape(w, [depth, n // width, width]),
                                       [1, 0, 2])
        return builder.call_te(packed_matmul, x, builder.emit(panels),
                               primfunc_name_hint="matmul")

    return rewrite_calls(mod, replacement, with_builder=True)
