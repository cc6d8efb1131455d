"""Keeping activations in the blocked (NCHWc) layout past the operators TVM's layout conversion
stops at, on CPU targets.

TVM 0.27's ConvertLayout carries a convolution's NCHWc layout through elementwise operators and
concatenations, but not through `clip`, `image.resize2d` or a depth-to-space (reshape,
permute, reshape): it converts to NCHW before each and back after the convolution that comes
next, and whatever lies between runs in NCHW. In PP-OCR's DBNet (HardSwish's clips, a neck of
nearest upsamplings and a concatenation, transposed convolutions rewritten as convolutions and
a depth-to-space) those conversions took 13.7 of its 78 ms at batch 1, each a pass over a whole
tensor that is mostly memory traffic (docs/benchmarks.md).

- Before the conversion, `clip` with constant bounds becomes maximum and minimum, which the
  conversion carries (`clips_as_min_max`); and what stops the conversion of the whole model
  is rewritten: a negative squeeze axis, a one-channel tensor against a blocked one, a
  reduction over the channels that keeps its axes (GroupNormalization is arithmetic by then:
  cw/compile/norms.py); and PReLU, which it does not carry, as operators it does.
- After it, `keep_blocked` moves each conversion to NCHW later, past the operators that compute
  the same values on the blocked tensor: a resize (topi's takes NCHWc), a concatenation of
  whole blocks of channels, a depth-to-space whose phases are whole blocks, a pad along H and
  W (imported as Relax's pad for this: `pads_as_operators`), and elementwise
  operators (their other operand converted too: a value per channel, lifted with the weights).
  A conversion back to NCHWc that follows one to NCHW is dropped. A conversion is only moved
  when nothing else reads its result, so no tensor is ever converted twice.
"""

from __future__ import annotations

import contextlib

from cw.compile.relax_rewrite import rewrite_calls
from cw.tvm_env import load_tvm

MAX_PASSES = 4  # one pass follows chains (bindings in order); a second finds nothing more

# elementwise operators that act on each value alone, or on two tensors value by value: in
# any layout the same values, so a conversion to NCHW moves past them
_UNARY = {"relax.nn.relu", "relax.sigmoid", "relax.tanh", "relax.exp", "relax.negative"}
_BINARY = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum",
           "relax.minimum"}


def clips_as_min_max(mod):
    """`clip(x, low, high)` with constant bounds as `minimum(maximum(x, low), high)` (ONNX's
    order). Returns (module, calls rewritten)."""
    tvm = load_tvm()
    from tvm import relax, tirx

    clip = tvm.ir.Op.get("relax.clip")

    def replacement(call):
        if not call.op.same_as(clip) or len(call.args) != 3:
            return None
        dtype = getattr(call.args[0].ty, "dtype", None)
        bounds = call.args[1:]
        if dtype is None or not all(isinstance(b, (tirx.IntImm, tirx.FloatImm)) for b in bounds):
            return None
        low, high = (relax.const(b.value, dtype) for b in bounds)
        return relax.op.minimum(relax.op.maximum(call.args[0], low), high)

    return rewrite_calls(mod, replacement)


def positive_squeeze_axes(mod):
    """`squeeze` with negative axes given them counted from the front. TVM's layout conversion
    aborts (std::bad_alloc) on a negative axis of a tensor it has blocked, taking the whole
    model back to NCHW (Silero VAD's `squeeze(x, -1)` after its encoder). Returns (module,
    calls rewritten)."""
    tvm = load_tvm()
    from tvm import relax

    squeeze = tvm.ir.Op.get("relax.squeeze")

    def replacement(call):
        if not call.op.same_as(squeeze) or call.attrs.axis is None:
            return None
        axes = [int(a) for a in call.attrs.axis]
        rank = getattr(call.args[0].ty, "ndim", -1)
        if rank < 0 or all(a >= 0 for a in axes):
            return None
        return relax.op.squeeze(call.args[0], [a % rank for a in axes])

    return rewrite_calls(mod, replacement)


# binary operators whose layout inference (TVM 0.27's InferLayoutBinaryEwise) fails on an
# operand with one channel against a blocked one
_BROADCASTING = _BINARY | {"relax.power", "relax.floor_divide"}


def channel_broadcasts_widened(mod):
    """A 4-D operand with one channel (N, 1, H, W) against one with C of them, broadcast to C
    channels first: TVM 0.27's layout conversion stops the whole model ("Cannot broadcast
    from 5 to 4") at such a pair once the other is blocked, leaving every convolution in NCHW.
    A mean over channels kept for a broadcast is one (ConvNeXt's channels-first LayerNorm,
    CBAM's spatial attention), so is a per-sample scale (N, 1, 1, 1). The broadcast is an
    index computation that fusion folds into the operator. Returns (module, calls rewritten)."""
    tvm = load_tvm()
    from tvm import relax, tirx

    ops = {tvm.ir.Op.get(name) for name in _BROADCASTING}

    def channels(expr):
        shape = getattr(expr.ty, "shape", None)
        if getattr(expr.ty, "ndim", -1) != 4 or not isinstance(shape, relax.ShapeExpr):
            return None, None
        dim = shape.values[1]
        return (int(dim.value) if isinstance(dim, tirx.IntImm) else None), shape.values

    def replacement(call):
        if not any(call.op.same_as(op) for op in ops) or len(call.args) != 2:
            return None
        (c0, shape0), (c1, shape1) = (channels(a) for a in call.args)
        if c0 is None or c1 is None or (c0 == 1) == (c1 == 1):
            return None
        args = list(call.args)
        narrow, wide = (0, c1) if c0 == 1 else (1, c0)
        shape = list(shape0 if narrow == 0 else shape1)
        shape[1] = wide
        args[narrow] = relax.op.broadcast_to(args[narrow], relax.ShapeExpr(shape))
        return relax.Call(call.op, args, call.attrs)

    return rewrite_calls(mod, replacement)


_REDUCTIONS = ("relax.mean", "relax.max", "relax.min", "relax.sum", "relax.prod",
               "relax.variance", "relax.std")


def channel_reductions_reshaped(mod):
    """A reduction over the channels of a 4-D tensor that keeps its axes, as one that drops
    them and a reshape: kept, the layout conversion gives the result the blocked layout of its
    input with a block of one channel (N, 1, H, W, 1), which a concatenation refuses ("Invalid
    layout axis": CBAM's mean and max of the channels) and whose conversion back TVM cannot
    legalize. Dropped, the reduction still reads the blocked tensor; its result is plain.
    Returns (module, calls rewritten)."""
    tvm = load_tvm()
    from tvm import relax

    ops = {tvm.ir.Op.get(name): name for name in _REDUCTIONS}

    def replacement(call):
        op = next((o for o in ops if call.op.same_as(o)), None)
        attrs = call.attrs
        if op is None or not attrs.keepdims or getattr(call.args[0].ty, "ndim", -1) != 4 or \
                not isinstance(getattr(call.ty, "shape", None), relax.ShapeExpr):
            return None
        axes = [0, 1, 2, 3] if attrs.axis is None else sorted(int(a) % 4 for a in attrs.axis)
        if 1 not in axes:
            return None
        reduced = relax.Call(op, [call.args[0]], tvm.ir.make_node(
            "relax.attrs.StatisticalAttrs", axis=axes, keepdims=False))
        return relax.op.reshape(reduced, call.ty.shape)

    return rewrite_calls(mod, replacement)


def prelus_as_relu_and_min(mod):
    """`prelu(x, alpha)` over the channels of a 4-D tensor as relu(x) + alpha * min(x, 0)
    (exact: one of the two terms is 0): TVM's layout conversion does not carry `prelu` through
    the blocked layout, so every PReLU (a face-recognition ResNet's, one per block) was a
    conversion to NCHW and one back, each a pass over the tensor; the rewritten operators it
    carries (the per-channel slope with the weights). Returns (module, calls rewritten)."""
    tvm = load_tvm()
    from tvm import relax

    prelu = tvm.ir.Op.get("relax.nn.prelu")

    def replacement(call):
        if not call.op.same_as(prelu) or getattr(call.args[0].ty, "ndim", -1) != 4 or \
                int(call.attrs.axis) % 4 != 1 or getattr(call.args[1].ty, "ndim", -1) != 1:
            return None
        x, alpha = call.args
        dtype = x.ty.dtype
        slope = relax.op.reshape(alpha, relax.ShapeExpr([1, alpha.ty.shape[0], 1, 1]))
        negative = relax.op.minimum(x, relax.const(0, dtype))
        return relax.op.add(relax.op.nn.relu(x), relax.op.multiply(negative, slope))

    return rewrite_calls(mod, replacement)


# ONNX's Pad modes as relax.nn.pad's
_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate",
              "wrap": "circular"}


@contextlib.contextmanager
def pads_as_operators():
    """While TVM imports a model: a Pad of a 4-D tensor as `relax.nn.pad` (the same kernels
    once legalized) rather than the TIR kernel call the importer emits, which nothing after it
    can see into. `keep_blocked` then pads the blocked tensor along its spatial axes: a
    generator's reflect pads before each convolution (style transfer, CycleGAN) were a
    conversion to NCHW and one back each. Negative pads (a crop) are imported as before."""
    load_tvm()
    from tvm import relax
    from tvm.relax.frontend.onnx import onnx_frontend

    converter = getattr(onnx_frontend, "Pad", None)
    original = getattr(converter, "__dict__", {}).get("_lower_pad")
    if original is None:  # another TVM's importer: its own kernels
        yield
        return
    lowered = original.__get__(None, converter)

    def lower_pad(cls, bb, inputs, attr, params, allowed_modes):
        mode = attr.get("mode", b"constant").decode("utf-8")
        before, after, value = cls._parse_pads_and_axes(inputs, params)
        if mode not in allowed_modes or mode not in _PAD_MODES or \
                getattr(inputs[0].ty, "ndim", -1) != 4 or min(before + after) < 0:
            return lowered(bb, inputs, attr, params, allowed_modes)
        widths = [int(w) for pair in zip(before, after) for w in pair]
        return bb.emit(relax.op.nn.pad(inputs[0], widths, _PAD_MODES[mode], float(value)))

    converter._lower_pad = classmethod(lower_pad)
    try:
        yield
    finally:
        converter._lower_pad = original


def keep_blocked(mod):
    """After ConvertLayout: conversions to NCHW moved past the operators that can take the
    blocked tensor, and conversions that undo one dropped. Returns (module, moves made)."""
    tvm = load_tvm()
    from tvm import relax

    total = 0
    for _ in range(MAX_PASSES):
        func = mod["main"]
        if not isinstance(func.body, relax.SeqExpr):
            break
        mover = _Mover(func)
        blocks = [mover.block(b) if isinstance(b, relax.DataflowBlock) else b
                  for b in func.body.blocks]
        if not mover.moves:
            break
        total += mover.moves
        functions = dict(mod.functions.items())
        functions[mod.get_global_var("main")] = relax.Function(
            func.params, relax.SeqExpr(blocks, func.body.body), func.ret_ty, func.is_pure,
            func.attrs)
        mod = tvm.IRModule(functions, attrs=mod.attrs)  # a new module: the caller keeps its own
        mod = relax.transform.DeadCodeElimination(["main"])(relax.transform.Normalize()(mod))
    return mod, total


class _Mover:
    """One pass over a function's dataflow blocks, in binding order: each binding's value is
    known when later ones read it, and how many times each variable is read."""

    def __init__(self, func):
        load_tvm()
        from tvm import relax

        self.values: dict = {}
        self.uses: dict = {}
        self.moves = 0
        self._builder = relax.BlockBuilder()
        self._names = 0
        uses = self.uses

        @relax.expr_functor.visitor
        class Uses(relax.PyExprVisitor):
            def visit_var_(self, var):
                uses[var] = uses.get(var, 0) + 1

            def visit_dataflow_var_(self, var):
                uses[var] = uses.get(var, 0) + 1

        Uses().visit_expr(func)

    def value(self, expr):
        """What `expr` stands for: the value bound to it, through aliases."""
        from tvm import relax

        while isinstance(expr, relax.Var) and expr in self.values:
            bound = self.values[expr]
            if not isinstance(bound, relax.Var):
                return bound
            expr = bound
        return expr

    def only_use(self, var) -> bool:
        """Whether `var` is a dataflow variable read exactly once (by the binding at hand)."""
        from tvm import relax

        return isinstance(var, relax.DataflowVar) and self.uses.get(var, 0) == 1

    def emit(self, expr, bindings: list):
        """`expr` (a call of variables and constants) bound to a new dataflow variable,
        appended to `bindings`."""
        from tvm import relax

        expr = self._builder.normalize(expr)
        self._names += 1
        var = relax.DataflowVar(f"blocked{self._names}", expr.ty)
        bindings.append(relax.VarBinding(var, expr))
        self.uses[var] = 1
        return var

    def block(self, block):
        from tvm import relax

        bindings = []
        for binding in block.bindings:
            value = binding.value
            if isinstance(binding, relax.VarBinding) and isinstance(value, relax.Call):
                moved = _move(self, value, bindings)
                if moved is not None:
                    self.moves += 1
                    value = moved if isinstance(moved, relax.Var) else \
                        self._builder.normalize(moved)
                    binding = relax.VarBinding(binding.var, value)
            if isinstance(binding, relax.VarBinding):
                self.values[binding.var] = value
            bindings.append(binding)
        return relax.DataflowBlock(bindings)


def _move(mover: _Mover, call, bindings: list):
    """`call` computed on blocked operands (the new bindings appended to `bindings`), as the
    value to bind in its place; or None."""
    from tvm import relax

    op = getattr(call.op, "name", "")
    if op == "relax.layout_transform":
        inner = mover.value(call.args[0])
        if _is_layout_transform(inner) and _inverse(call, inner, inner.args[0]):
            return inner.args[0]
        return None
    if op == "relax.image.resize2d":
        source = _movable(mover, call.args[0])
        attrs = call.attrs
        if source is None or attrs.layout != "NCHW":
            return None
        block = _unblocking(source)
        resized = mover.emit(relax.op.image.resize2d(
            source.args[0], call.args[1], roi=list(attrs.roi), layout=f"NCHW{block}c",
            method=attrs.method,
            coordinate_transformation_mode=attrs.coordinate_transformation_mode,
            rounding_method=attrs.rounding_method, cubic_alpha=attrs.cubic_alpha,
            cubic_exclude=attrs.cubic_exclude, extrapolation_value=attrs.extrapolation_value,
            out_dtype=attrs.out_dtype), bindings)
        return relax.op.layout_transform(resized, source.attrs.index_map)
    if op == "relax.reshape":
        return _depth_to_space(mover, call, bindings)
    if op == "relax.nn.pad":  # along H and W only: each channel's plane padded alike
        source = _movable(mover, call.args[0])
        widths = [int(w) for w in call.attrs.pad_width]
        if source is None or len(widths) != 8 or any(widths[:4]):
            return None
        padded = mover.emit(relax.op.nn.pad(source.args[0], widths + [0, 0],
                                            call.attrs.pad_mode, call.attrs.pad_value), bindings)
        return relax.op.layout_transform(padded, source.attrs.index_map)
    if op in _UNARY:
        source = _movable(mover, call.args[0])
        if source is None:
            return None
        inner = mover.emit(relax.Call(call.op, [source.args[0]], call.attrs), bindings)
        return relax.op.layout_transform(inner, source.attrs.index_map)
    if op in _BINARY or op == "relax.where":  # (where: a select, value by value)
        return _binary(mover, call, bindings)
    if op == "relax.concat":
        parts = call.args[0]
        if not isinstance(parts, relax.Tuple) or int(call.attrs.axis) % 4 != 1:
            return None
        sources = [_movable(mover, p) for p in parts.fields]
        if None in sources or len({_unblocking(s) for s in sources}) != 1:
            return None
        joined = mover.emit(relax.op.concat([s.args[0] for s in sources], axis=1), bindings)
        return relax.op.layout_transform(joined, sources[0].attrs.index_map)
    return None


def _movable(mover: _Mover, arg):
    """The conversion from NCHWc that `arg` is bound to, where nothing else reads it; else
    None."""
    value = mover.value(arg)
    if not mover.only_use(arg) or _unblocking(value) is None:
        return None
    return value


def _binary(mover: _Mover, call, bindings: list):
    """`op(a, b)` (or `where(c, a, b)`) with one operand converted from NCHWc and the others
    converted from the same block, or of a fixed shape that broadcasts against NCHW without
    the batch: the op on the blocked operands, then the conversion to NCHW. A fixed operand
    with C channels is converted to the block (a value per channel, (1, C, 1, 1) or
    PyTorch's (C, 1, 1) `weight[:, None, None]`; a learned map (C, H, W)), one with a single
    channel ([W], [H, 1], [1, 1, H, W]) gets a block of one; math on weights only, lifted."""
    from tvm import relax, tirx

    sources = [_movable(mover, a) for a in call.args]
    blocks = {_unblocking(s) for s in sources if s is not None}
    if len(blocks) != 1:
        return None
    block = blocks.pop()
    unpack = next(s for s in sources if s is not None).attrs.index_map
    operands = []
    for arg, source in zip(call.args, sources):
        if source is not None:
            operands.append(source.args[0])
            continue
        if _unblocking(mover.value(arg)) is not None:
            return None  # converted, but read elsewhere too: it stays
        shape = getattr(arg.ty, "shape", None)
        if shape is None or not all(isinstance(d, tirx.IntImm) for d in shape) or \
                len(shape) > 4:
            return None
        dims = [int(d) for d in shape]
        n, c, h, w = [1] * (4 - len(dims)) + dims
        if all(d == 1 for d in dims):  # one value: broadcasts in any layout
            operands.append(arg)
        elif n != 1:
            return None
        elif c == 1:
            operands.append(mover.emit(relax.op.reshape(arg, [1, 1, h, w, 1]), bindings))
        elif c % block == 0:
            nchw = arg if len(dims) == 4 else mover.emit(
                relax.op.reshape(arg, [1, c, h, w]), bindings)
            operands.append(mover.emit(relax.op.layout_transform(
                nchw, lambda n, c, h, w: (n, c // block, h, w, c % block)), bindings))
        else:
            return None
    inner = mover.emit(relax.Call(call.op, operands, call.attrs), bindings)
    return relax.op.layout_transform(inner, unpack)


def _depth_to_space(mover: _Mover, call, bindings: list):
    """ONNX's DepthToSpace in DCR order, as TVM imports it and as transposed_convs_as_convs
    writes it: reshape to [n, s_h, s_w, C, H, W], permute to [n, C, H, s_h, W, s_w], reshape to
    [n, C, H * s_h, W * s_w]. On a tensor converted from NCHWc with C in whole blocks, each
    phase's channels are whole blocks: the same moves on the blocked tensor, then the
    conversion to NCHW."""
    from tvm import relax, sym

    permute = mover.value(call.args[0])
    if not mover.only_use(call.args[0]) or not isinstance(permute, relax.Call) or \
            getattr(permute.op, "name", "") != "relax.permute_dims" or \
            [int(a) for a in (permute.attrs.axes or [])] != [0, 3, 4, 1, 5, 2]:
        return None
    split = mover.value(permute.args[0])
    if not mover.only_use(permute.args[0]) or not isinstance(split, relax.Call) or \
            getattr(split.op, "name", "") != "relax.reshape":
        return None
    source = _movable(mover, split.args[0])
    phases = getattr(split.ty, "shape", None)
    if source is None or phases is None or len(phases) != 6:
        return None
    block = _unblocking(source)
    n, sh, sw, channels, h, w = phases
    joined = getattr(call.args[1], "values", None)
    analyzer = sym.Analyzer()
    if int(channels) % block or joined is None or len(joined) != 4 or not all(
            analyzer.can_prove_equal(a, b) for a, b in zip(joined, [n, channels, h * sh,
                                                                     w * sw])):
        return None
    chunks = int(channels) // block
    split = mover.emit(relax.op.reshape(source.args[0], [n, sh, sw, chunks, h, w, block]),
                       bindings)
    permuted = mover.emit(relax.op.permute_dims(split, [0, 3, 4, 1, 5, 2, 6]), bindings)
    moved = mover.emit(relax.op.reshape(permuted, [n, chunks, h * sh, w * sw, block]), bindings)
    return relax.op.layout_transform(moved, source.attrs.index_map)


def _is_layout_transform(value) -> bool:
    tvm = load_tvm()
    from tvm import relax

    return isinstance(value, relax.Call) and \
        value.op.same_as(tvm.ir.Op.get("relax.layout_transform"))


def _unblocking(value) -> int | None:
    """The block c where `value` is `layout_transform(x)` from NCHWc to NCHW (channel
    i1 * c + i4), else None."""
    tvm = load_tvm()
    from tvm import sym, tirx

    if not _is_layout_transform(value):
        return None
    shape = getattr(value.args[0].ty, "shape", None)
    if shape is None or len(shape) != 5 or getattr(value.ty, "ndim", None) != 4:
        return None
    block = shape[4]
    if not isinstance(block, tirx.IntImm):
        return None
    v = [tirx.Var(f"i{d}", "int64") for d in range(5)]
    mapped = value.attrs.index_map.map_indices(v)
    analyzer = sym.Analyzer()
    expected = [v[0], v[1] * block + v[4], v[2], v[3]]
    if len(mapped) != 4 or not all(analyzer.can_prove_equal(tvm.tirx.Cast("int64", m), e)
                                   for m, e in zip(mapped, expected)):
        return None
    return int(block)


def _inverse(outer, inner, inner_source) -> bool:
    """Whether `outer`, a layout_transform of `inner` (one of `inner_source`), gives back
    `inner_source` exactly: the two index maps compose to the identity over its shape."""
    tvm = load_tvm()
    from tvm import ir, sym, tirx

    shape = getattr(inner_source.ty, "shape", None)
    between = getattr(inner.ty, "shape", None)
    if shape is None or between is None:
        return False
    analyzer = sym.Analyzer()
    # (the batch may be symbolic)
    after = outer.attrs.index_map.map_shape(list(between))
    if len(after) != len(shape) or not all(analyzer.can_prove_equal(a, d)
                                           for a, d in zip(after, shape)):
        return False
    v = [tirx.Var(f"i{d}", "int64") for d in range(len(shape))]
    for var, extent in zip(v, shape):
        analyzer.bind(var, ir.Range.from_min_extent(0, extent))
    composed = outer.attrs.index_map.map_indices(inner.attrs.index_map.map_indices(v))
    return len(composed) == len(v) and all(
        analyzer.can_prove_equal(tvm.tirx.Cast("int64", c), var) for c, var in zip(composed, v))
