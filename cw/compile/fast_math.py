"""Vectorized exp, sigmoid, tanh, erf, softmax and rounding for CPU kernels, and casts to
bfloat16 that round wherever they land.

TVM lowers these float32 functions on LLVM targets to libm calls (`expf`, `erff`; tanh and
sigmoid through `expf`), one scalar call per element even inside a vectorized loop: LLVM has no
vector libm to call. YOLOX-Nano's 110 SiLUs (`x * sigmoid(x)`, fused into its convolutions'
epilogues) made its 1x1 convolutions several times slower than their multiply-adds, and every
softmax of a transformer paid the same per score. TVM's topi has polynomial versions made of
multiply-adds and bit shifts (Cephes' exp, Eigen's rational tanh and erf), which LLVM vectorizes
with the rest of the kernel; onnxruntime's CPU kernels use approximations of the same kind.
Their error is a few units in the last place (tests/integration/test_fast_math.py measures it
against numpy's float64 over the whole float32 range that matters).

Applied when the graph is legalized for a CPU target (compiler.legalized), so that `cw tune`
extracts and measures the very kernels that `cw compile` builds. CUDA keeps TVM's lowering:
its `expf` is a fast device function already. Other dtypes keep TVM's lowering too.
"""

from __future__ import annotations

FUNCTIONS = ("relax.exp", "relax.sigmoid", "relax.tanh", "relax.erf", "relax.nn.softmax",
             "relax.round")


def _float32(call) -> bool:
    return getattr(call.args[0].ty, "dtype", None) == "float32"


def _instantiate(expr, placeholder, value):
    """`expr`, a topi function's value at one element of `placeholder`, with the reads of that
    element replaced by `value` (reads of the function's own intermediate tensors followed).
    topi's functions take whole tensors, and their formulas read the input several times: in
    a fused kernel, whatever computes the input is inlined at each read (ultraface's box
    decoder of slices, transposes and a concatenation went from 0.3 to 0.8 ms that way)."""
    from tvm import tirx
    from tvm.tirx import expr as E

    if isinstance(expr, (E.FloatImm, E.IntImm)):
        return expr
    if isinstance(expr, E.Cast):
        return tirx.Cast(str(expr.ty), _instantiate(expr.value, placeholder, value))
    if isinstance(expr, E.BinaryOpExpr):
        return type(expr)(_instantiate(expr.a, placeholder, value),
                          _instantiate(expr.b, placeholder, value))
    if isinstance(expr, E.Select):
        return tirx.Select(*(_instantiate(e, placeholder, value) for e in
                             (expr.condition, expr.true_value, expr.false_value)))
    op = getattr(getattr(expr, "op", None), "name", None)
    if op == "te.tensor_load":
        tensor = expr.args[0]
        if tensor.same_as(placeholder):
            return value
        return _instantiate(tensor.op.body[0], placeholder, value)
    if op is not None:
        return tirx.call_intrin(str(expr.ty), expr.op,
                                *(_instantiate(a, placeholder, value) for a in expr.args))
    raise TypeError(f"fast_math: unexpected {type(expr).__name__} in a topi formula")


def _formula(topi_fn):
    """value -> `topi_fn`'s formula at `value` (a float32 expression)."""
    from tvm import te

    placeholder = te.placeholder((1,), "float32", "x")
    body = topi_fn(placeholder).op.body[0]
    return lambda value: _instantiate(body, placeholder, value)


def _elementwise(formula, name: str):
    """A TE function computing `formula` (float32 expression -> expression) per element, with
    its input read once (bound by a Let)."""
    from tvm import te, tirx

    def compute(x):
        def element(*i):
            v = tirx.Var("v", "float32")
            return tirx.Let(v, x(*i), formula(v))
        return te.compute(x.shape, element, name=name)
    return compute


def legalizers() -> dict:
    """LegalizeOps' custom map: float32 calls of these functions as vectorizable kernels, the
    rest (fp16 after --precision fp16, float64) as TVM legalizes them."""
    from tvm import tirx, topi
    from tvm.ir import Op

    default = {name: Op.get(name).get_attr("FLegalize") for name in FUNCTIONS}
    exp, tanh, erf = (_formula(f) for f in (topi.fast_exp, topi.fast_tanh, topi.fast_erf))
    # sigmoid as 1 / (1 + e^-v): e^-v is inf for v < -88 (1 / inf = 0) and 0 for large v.
    # erf's formula clamps v to [-4, 4] first, which would turn NaN into a number.
    unary = {"relax.exp": exp, "relax.sigmoid": lambda v: 1.0 / (1.0 + exp(-v)),
             "relax.tanh": tanh, "relax.erf": lambda v: tirx.Select(tirx.isnan(v), v, erf(v))}

    def make_unary(name):
        hint = name.removeprefix("relax.")
        te_fn = _elementwise(unary[name], hint)

        def legalize(bb, call):
            if not _float32(call):
                return default[name](bb, call)
            return bb.call_te(te_fn, call.args[0], primfunc_name_hint=hint)
        return legalize

    def softmax(bb, call):
        if not _float32(call):
            return default["relax.nn.softmax"](bb, call)
        x_ty = call.args[0].ty
        axis = int(call.attrs.axis)
        length = x_ty.shape[-1] if x_ty.ndim > 0 else None
        if axis in (-1, x_ty.ndim - 1) and isinstance(length, tirx.IntImm) \
                and _ragged(int(length)):
            return bb.call_te(_ragged_softmax(exp), call.args[0], primfunc_name_hint="softmax")
        return bb.call_te(topi.nn.fast_softmax, call.args[0], axis,
                          primfunc_name_hint="softmax")

    table = {name: make_unary(name) for name in unary}
    table["relax.nn.softmax"] = softmax
    table["relax.round"] = _rounding(default["relax.round"])
    table["relax.astype"] = _bfloat16_cast(Op.get("relax.astype").get_attr("FLegalize"))
    return table


def _ragged(length: int) -> bool:
    """Whether a row of `length` ends in part of a vector of partial sums (cpu_rows.SUM_LANES):
    a ViT's 197 keys, CLIP's 77 tokens."""
    from cw.compile.cpu_rows import SUM_LANES

    return length >= 2 * SUM_LANES and length % SUM_LANES != 0


def _ragged_softmax(exp):
    """A softmax along the last axis whose length n no SUM_LANES divide (_ragged), with its
    maximum, exponentials and sum taken over the row padded to whole vectors: the padding
    reads the row's last element again (a clamped index: no load past the row), which leaves
    the maximum as it is, and the sum leaves it out (a select); the row is then multiplied by
    the sum's reciprocal (a 1,500-key row x0.82 of the time of dividing each). TVM's softmax
    over 197 keys was one running maximum and one running sum, each step waiting for the one
    before, and its other steps in scalars (cpu_rows vectorizes rows that whole vectors fill):
    x0.22-0.32 of its time. Rows that whole vectors fill keep TVM's softmax (this one was
    x0.93-1.02 of it at 128 and 384)."""
    from tvm import te, tirx

    from cw.compile.cpu_rows import SUM_LANES

    def compute(x):
        *lead, n = (int(d) if isinstance(d, tirx.IntImm) else d for d in x.shape)
        padded = n + -n % SUM_LANES

        def clamped(index, k):
            return x[(*index, tirx.min(k, n - 1))]

        k = te.reduce_axis((0, padded), name="k")
        maximum = te.compute(lead, lambda *i: te.max(clamped(i, k), axis=k),
                             name="T_softmax_maxelem")

        def exponential(*i):
            v = tirx.Var("v", "float32")  # (the formula reads its input several times)
            return tirx.Let(v, clamped(i[:-1], i[-1]) - maximum(*i[:-1]), exp(v))

        exps = te.compute((*lead, padded), exponential, name="T_fast_exp")
        k = te.reduce_axis((0, padded), name="k")
        total = te.compute(lead, lambda *i: te.sum(tirx.Select(
            k < n, exps[(*i, k)], tirx.const(0, "float32")), axis=k), name="T_softmax_expsum")
        return te.compute((*lead, n), lambda *i: exps(*i) * (1.0 / total(*i[:-1])),
                          name="T_softmax_norm")
    return compute


def _bfloat16_cast(default):
    """relax.astype from float32 to bfloat16 as the rounding (to nearest, ties to even; NaN
    kept) done in float32 bits, then the cast, which is exact from there. TVM's CPU lowering
    computes bfloat16 in float32 and rounds only where a value is stored in a bfloat16 buffer
    of the kernel's arguments: a cast fused with its reader (ONNX's float32 → bfloat16 →
    float32, an autocast model's round trips) did not round at all, x came back whole, 1.7e-3
    off what onnxruntime gives (stop 75)."""
    from tvm import te, tirx

    def u32(value):
        return tirx.const(value, "uint32")

    def rounded(v):
        bits = tirx.reinterpret("uint32", v)
        half = u32(0x7FFF) + tirx.bitwise_and(tirx.shift_right(bits, u32(16)), u32(1))
        kept = tirx.reinterpret("float32", tirx.bitwise_and(bits + half, u32(0xFFFF0000)))
        return tirx.Cast("bfloat16", tirx.Select(tirx.isnan(v), v, kept))

    def compute(x):
        def element(*i):
            v = tirx.Var("v", "float32")
            return tirx.Let(v, x(*i), rounded(v))
        return te.compute(x.shape, element, name="to_bfloat16")

    def legalize(bb, call):
        if not _float32(call) or str(call.attrs.dtype) != "bfloat16":
            return default(bb, call)
        return bb.call_te(compute, call.args[0], primfunc_name_hint="to_bfloat16")
    return legalize


def _rounding(default):
    """relax.round (ONNX Round, half to even) as LLVM's own nearbyint intrinsic, which TVM's
    loop vectorizer knows. TVM lowers it to its nearbyint op, which the vectorizer does not
    know: a vectorized store that rounds is taken apart into scalars, and where the store also
    holds one of the formulas above (bound by a Let), that fails ("Let cannot bind the same var
    to two different values": an int8 SiLU in a convolution's epilogue, where both the sigmoid
    and the requantizations' roundings land)."""
    from tvm import te, tirx

    def compute(x):
        return te.compute(x.shape, lambda *i: tirx.call_llvm_pure_intrin(
            "float32", "llvm.nearbyint", x(*i)), name="round")

    def legalize(bb, call):
        if not _float32(call):
            return default(bb, call)
        return bb.call_te(compute, call.args[0], primfunc_name_hint="round")
    return legalize


def without_lets(func):
    """`func` (a PrimFunc) with every Let of the formulas above replaced by its value at each
    use: the kernel `cw tune` measures and a record of it applies to. MetaSchedule's FLOP
    estimate knows no Let ("Do not have a default for prim.Let": `cw tune` failed on any model
    with a sigmoid, tanh, erf or exp, YOLOX's SiLUs, a transformer's GELU)."""
    import tvm_ffi
    from tvm import tirx

    def expand(let):
        return tvm_ffi.structural_map(
            let.body, (tirx.Var, lambda v: let.value if v.same_as(let.var) else v))
    return tvm_ffi.structural_map(func, (tirx.Let, expand))


def has_lets(func) -> bool:
    import tvm_ffi
    from tvm import tirx

    found = tvm_ffi.structural_walk(func, (tirx.Let, lambda _: tvm_ffi.VisitInterrupt(True)))
    return found is not None
