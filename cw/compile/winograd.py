"""Winograd convolutions F(m x m, 3 x 3): fewer multiplications for 3x3 stride-1 convolutions.

A direct 3x3 convolution spends 9 multiply-adds per input channel on each output. Winograd's
minimal filtering (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016)
computes an m x m tile of outputs from an (m+2) x (m+2) tile of inputs with (m+2)^2 products per
input channel: 2.25x fewer for m = 2, 4x fewer for m = 4. cuDNN uses it for such layers.
`--conv-algo winograd2|winograd4` rewrites each eligible relax.nn.conv2d into four steps:

- U = G g G^T per filter: (alpha*alpha, K, C). It depends on the weights only, so the front
  end's LiftTransformParams computes it at compile time and the bundle stores U instead of g:
  (m+2)^2 / 9 times the filter's bytes (1.8x for m = 2, 4x for m = 4), to LOAD and to hold in
  the page cache. That is the price of the option, and why it is not the default.
- V = B^T d B per input tile: (alpha*alpha, C, N, T), T tiles per image. Elementwise
  (injective): it reads the padded input through bounds checks, no padding kernel.
- M = U V: alpha*alpha independent (K x C) @ (C x N*T) products, one batched matmul, the kernel
  TVM's GEMM schedules (and tuning records) know best. The reshapes around it are views. (V and
  M keep the batch as an axis of its own: the graph is imported with a symbolic batch, and a
  kernel whose buffer has a shape like N*T fails TVM's operator fusion once N is bound.)
- Y = A^T M A per tile, elementwise too, so that operator fusion puts the convolution's epilogue
  (bias, BatchNorm's scale and shift, residual add, ReLU) in the same kernel.

The transforms are written with their coefficients as constants selected by index, so that both
stay elementwise kernels (a reduction would not take the epilogue). Results differ from a
direct convolution's in rounding only: the transforms add and scale before the products; F(4x4)
more than F(2x2) (checked against onnxruntime by the tests). fp32 only: in fp16 the transforms'
rounding would be too coarse.
"""

from __future__ import annotations

from fractions import Fraction as F

from cw.compile.shapes import static_shape
from cw.tvm_env import load_tvm

ALGOS = {"direct": 0, "winograd2": 2, "winograd4": 4}

# (A^T, G, B^T) for F(m x m, 3 x 3): Lavin & Gray's matrices (points 0, ±1 for m = 2; 0, ±1, ±2
# for m = 4). tests/unit/test_winograd.py checks each against a direct 1-D convolution.
MATRICES = {
    2: ([[1, 1, 1, 0],
         [0, 1, -1, -1]],
        [[1, 0, 0],
         [F(1, 2), F(1, 2), F(1, 2)],
         [F(1, 2), F(-1, 2), F(1, 2)],
         [0, 0, 1]],
        [[1, 0, -1, 0],
         [0, 1, 1, 0],
         [0, -1, 1, 0],
         [0, 1, 0, -1]]),
    4: ([[1, 1, 1, 1, 1, 0],
         [0, 1, -1, 2, -2, 0],
         [0, 1, 1, 4, 4, 0],
         [0, 1, -1, 8, -8, 1]],
        [[F(1, 4), 0, 0],
         [F(-1, 6), F(-1, 6), F(-1, 6)],
         [F(-1, 6), F(1, 6), F(-1, 6)],
         [F(1, 24), F(1, 12), F(1, 6)],
         [F(1, 24), F(-1, 12), F(1, 6)],
         [0, 0, 1]],
        [[4, 0, -5, 0, 1, 0],
         [0, -4, -4, 1, 1, 0],
         [0, 4, -4, -1, 1, 0],
         [0, -2, -1, 2, 1, 0],
         [0, 2, -1, -2, 1, 0],
         [0, 4, 0, -5, 0, 1]]),
}



def eligible(call) -> bool:
    """A plain 3x3, stride-1, undilated, ungrouped NCHW fp32 convolution with static shapes but
    for the batch (the front end imports one graph for every batch size)."""
    if getattr(call.op, "name", "") != "relax.nn.conv2d":
        return False
    attrs = call.attrs
    if (attrs.groups != 1 or attrs.data_layout != "NCHW" or attrs.kernel_layout != "OIHW"
            or attrs.out_layout not in ("", "NCHW")
            or [int(s) for s in attrs.strides] != [1, 1]
            or [int(d) for d in attrs.dilation] != [1, 1]):
        return False
    data, weight = call.args[0].ty, call.args[1].ty
    if data.dtype != "float32" or weight.dtype != "float32" or \
            (attrs.out_dtype and attrs.out_dtype != "float32"):
        return False
    if getattr(data, "ndim", None) != 4:
        return False
    d, w = static_shape(list(data.shape)[1:]), static_shape(weight.shape)
    return d is not None and w is not None and w[2:] == [3, 3] and w[1] == d[0]


def _coefficient(index, values):
    """values[index] for a symbolic index, as a chain of selects over constants."""
    from tvm import tirx

    expr = tirx.const(float(values[-1]), "float32")
    for k in range(len(values) - 2, -1, -1):
        expr = tirx.Select(index == k, tirx.const(float(values[k]), "float32"), expr)
    return expr


def weight_transform(weight, m: int):
    """U[a*alpha + b, k, c] = (G g[k, c] G^T)[a, b] (computed at compile time)."""
    from tvm import te

    _, g, _ = MATRICES[m]
    alpha = m + 2
    out_c, in_c = weight.shape[0], weight.shape[1]

    def u(ab, k, c):
        a, b = ab // alpha, ab % alpha
        total = None
        for i in range(3):
            for j in range(3):
                term = (_coefficient(a, [row[i] for row in g])
                        * _coefficient(b, [row[j] for row in g]) * weight[k, c, i, j])
                total = term if total is None else total + term
        return total

    return te.compute((alpha * alpha, out_c, in_c), u, name="winograd_weight")


def input_transform(data, m: int, padding, tiles: tuple[int, int]):
    """V[a*alpha + b, c, n, ty*TW + tx] = (B^T d B)[a, b] for the input tile at
    (ty*m - top, tx*m - left); positions outside the input read 0 (the convolution's padding)."""
    from tvm import te, tirx

    _, _, bt = MATRICES[m]
    alpha = m + 2
    batch, in_c, height, width = data.shape
    height, width = int(height), int(width)
    top, left = int(padding[0]), int(padding[1])
    th, tw = tiles

    def v(ab, c, n, t):
        y0, x0 = (t // tw) * m - top, (t % tw) * m - left
        # Whether each row and column of the tile lies inside the input, bound once: written
        # out at each of the ~470 reads (m = 4), TVM's simplifier took 10 s per convolution to
        # build the kernel and as long again to inline a producer into it.
        rows = [tirx.Var(f"row{i}", "bool") for i in range(alpha)]
        cols = [tirx.Var(f"col{j}", "bool") for j in range(alpha)]

        def d(i, j):
            return tirx.if_then_else(tirx.And(rows[i], cols[j]), data[n, c, y0 + i, x0 + j],
                                     tirx.const(0.0, "float32"))

        # One branch per (a, b) with only its nonzero terms (4 of 16 for m = 2, about 13 of 36
        # for m = 4). `ab` is the outermost axis, so the threads of a warp take one branch.
        result = None
        for k in range(alpha * alpha - 1, -1, -1):
            a, b = divmod(k, alpha)
            terms = [float(bt[a][i] * bt[b][j]) * d(i, j) for i in range(alpha)
                     for j in range(alpha) if bt[a][i] and bt[b][j]]
            branch = terms[0]
            for term in terms[1:]:
                branch = branch + term
            result = branch if result is None else tirx.if_then_else(ab == k, branch, result)
        for j in reversed(range(alpha)):
            result = tirx.Let(cols[j], tirx.all(x0 + j >= 0, x0 + j < width), result)
        for i in reversed(range(alpha)):
            result = tirx.Let(rows[i], tirx.all(y0 + i >= 0, y0 + i < height), result)
        return result

    return te.compute((alpha * alpha, in_c, batch, th * tw), v, name="winograd_input")


def output_transform(product, m: int, out_shape):
    """Y[n, k, y, x] = (A^T M A)[y % m, x % m] of the tile holding (y, x); M is
    (alpha*alpha, K, N, T)."""
    from tvm import te

    at, _, _ = MATRICES[m]
    alpha = m + 2
    tw = -(-int(out_shape[3]) // m)  # tiles per row

    def y_(n, k, y, x):
        t = (y // m) * tw + x // m
        i, j = y % m, x % m
        total = None
        for a in range(alpha):
            for b in range(alpha):
                term = (_coefficient(i, [row[a] for row in at])
                        * _coefficient(j, [row[b] for row in at]) * product[a * alpha + b, k, n, t])
                total = term if total is None else total + term
        return total

    return te.compute(tuple(out_shape), y_, name="winograd_output")


def rewrite(mod, algo: str, max_weight_bytes: int | None = None):
    """Every eligible conv2d of `main` as Winograd steps; returns (module, convolutions
    rewritten, convolutions left direct because their transformed filter would exceed
    `max_weight_bytes`: a weights page). Run before LiftTransformParams, so that the filter
    transform is lifted."""
    m = ALGOS[algo]
    if not m:
        return mod, 0, 0
    tvm = load_tvm()
    from tvm import relax

    count = too_large = 0

    @relax.expr_functor.mutator
    class Rewriter(relax.PyExprMutator):
        def visit_call_(self, call):
            nonlocal count, too_large
            call = self.visit_expr_post_order(call)
            if not eligible(call):
                return call
            shape = call.args[1].ty.shape
            out_c, in_c = int(shape[0]), int(shape[1])
            if max_weight_bytes is not None and (m + 2) ** 2 * out_c * in_c * 4 > max_weight_bytes:
                too_large += 1
                return call
            count += 1
            bb = self.builder_
            data, weight = call.args
            out_shape = list(call.ty.shape)  # the batch may be symbolic
            tiles = (-(-int(out_shape[2]) // m), -(-int(out_shape[3]) // m))
            u = bb.emit(bb.call_te(weight_transform, weight, m,
                                   primfunc_name_hint="winograd_weight"))
            v = bb.emit(bb.call_te(input_transform, data, m, list(call.attrs.padding), tiles,
                                   primfunc_name_hint="winograd_input"))
            alpha2, in_c, out_c = (m + 2) ** 2, int(data.ty.shape[1]), int(out_shape[1])
            batch, count_tiles = out_shape[0], tiles[0] * tiles[1]
            flat = bb.emit(relax.op.reshape(v, (alpha2, in_c, batch * count_tiles)))
            product = bb.emit(relax.op.matmul(u, flat))
            product = bb.emit(relax.op.reshape(product, (alpha2, out_c, batch, count_tiles)))
            return bb.call_te(output_transform, product, m, out_shape,
                              primfunc_name_hint="winograd_output")

    rewriter = Rewriter(mod)
    main_gv = mod.get_global_var("main")
    new_main = rewriter.visit_expr(mod["main"])
    if not count:
        return mod, 0, too_large
    rewriter.builder_.update_func(main_gv, new_main)
    new_mod = rewriter.builder_.get()
    return tvm.IRModule(dict(new_mod.functions), attrs=mod.attrs), count, too_large
