"""Rewriting calls in a Relax graph, and the rewrites every target gets.

Out-of-range indices: TVM lowers ONNX Gather to `take` in its "fast" mode, which reads
`table[index]` unchecked. A token id past a BERT's vocabulary made `cw run` read beyond the
embedding table and die of a segmentation fault (id 10^12) or answer garbage (id = vocabulary
size); in a worker that is every model's requests lost, and on a GPU a dead CUDA context. So
takes clamp their indices (mode "clip": a min and a max per index, nothing measurable), and
the bundle's manifest carries each index input's range so that cw run, the client and the
controller refuse such a request in one line before it reaches a kernel (onnx_load.index_limits).
"""

from __future__ import annotations

from cw.tvm_env import load_tvm


def rewrite_calls(mod, replacement, with_builder: bool = False):
    """`mod` with each call in its main function that `replacement` gives an expression for
    replaced by it (None: kept); and how many were. `with_builder`: `replacement(call,
    builder)`, for replacements that add kernels (builder.call_te)."""
    load_tvm()
    from tvm import relax

    replaced = []

    @relax.expr_functor.mutator
    class Rewriter(relax.PyExprMutator):
        def visit_call_(self, call):
            call = self.visit_expr_post_order(call)
            new = replacement(call, self.builder_) if with_builder else replacement(call)
            if new is None:
                return call
            replaced.append(call)
            return new

    return _rewritten(mod, Rewriter(mod), replaced)


def _rewritten(mod, rewriter, replaced: list, prune: bool = False):
    """(module, calls replaced) after `rewriter` visits `mod`'s main function: the builder's
    module, mod's functions and any kernel a replacement added; with `prune`, bindings left
    unread removed."""
    tvm = load_tvm()
    from tvm import relax

    new_main = rewriter.visit_expr(mod["main"])
    if not replaced:
        return mod, 0
    if prune:
        new_main = relax.analysis.remove_all_unused(new_main)
    rewriter.builder_.update_func(mod.get_global_var("main"), new_main)
    return tvm.IRModule(dict(rewriter.builder_.get().functions), attrs=mod.attrs), len(replaced)


def bounded_takes(mod):
    """Every unchecked `take` (ONNX Gather) clamping its indices instead; and how many."""
    tvm = load_tvm()
    from tvm import relax

    take = tvm.ir.Op.get("relax.take")

    def replacement(call):
        if not isinstance(call, relax.Call) or not call.op.same_as(take) or \
                str(call.attrs.mode) != "fast":
            return None
        return relax.op.take(call.args[0], call.args[1], axis=call.attrs.axis, mode="clip")

    return rewrite_calls(mod, replacement)


def scalar_stacks_as_concats(mod):
    """`stack` of 0-d tensors (TVM's import of ONNX's Min, Max, Sum and Mean of several
    scalars: a dynamic quantization's range) as a concatenation of one-element vectors: TVM
    0.27's layout conversion divides by the rank of a stack's operands and stops the whole
    process with SIGFPE on a 0-d one, convolution or not. Returns (module, calls rewritten)."""
    tvm = load_tvm()
    from tvm import relax

    stack = tvm.ir.Op.get("relax.stack")

    def replacement(call):
        if call.op != stack or not isinstance(call.args[0], relax.Tuple):
            return None
        parts = list(call.args[0].fields)
        if not parts or any(getattr(p.ty, "ndim", None) != 0 for p in parts):
            return None
        return relax.op.concat([relax.op.reshape(p, [1]) for p in parts], axis=0)

    return rewrite_calls(mod, replacement)


def stacked_reductions_as_chains(mod):
    """ONNX's Max, Min, Sum and Mean as TVM imports them where shapes are static (each input
    broadcast, stacked along a new axis 0, reduced along it) as a chain of `maximum`,
    `minimum` or `add` (a Mean's sum then divided). The stack is 5-D after a 2-D convolution,
    and TVM's layout conversion cannot infer its layout ("Invalid SLayout"): every convolution
    of the model then stayed in plain NCHW on the CPU, and none went to CUTLASS on CUDA.
    Returns (module, calls rewritten)."""
    tvm = load_tvm()
    from tvm import relax

    ops = {tvm.ir.Op.get(f"relax.{name}"): name for name in ("max", "min", "sum", "mean")}
    binary = {"max": relax.op.maximum, "min": relax.op.minimum, "sum": relax.op.add,
              "mean": relax.op.add}
    stack = tvm.ir.Op.get("relax.stack")
    broadcast = tvm.ir.Op.get("relax.broadcast_to")
    replaced = []

    @relax.expr_functor.mutator
    class Rewriter(relax.PyExprMutator):
        def _bound(self, expr, op):
            value = self.lookup_binding(expr) if isinstance(expr, relax.Var) else expr
            return value if isinstance(value, relax.Call) and value.op.same_as(op) else None

        def visit_call_(self, call):
            call = self.visit_expr_post_order(call)
            name = next((n for op, n in ops.items() if call.op.same_as(op)), None)
            axes = None if name is None or call.attrs.axis is None else \
                [int(a) for a in call.attrs.axis]
            stacked = self._bound(call.args[0], stack) if axes == [0] and \
                not call.attrs.keepdims else None
            if stacked is None or int(stacked.attrs.axis) != 0 or \
                    not isinstance(stacked.args[0], relax.Tuple):
                return call
            parts = []
            for part in stacked.args[0].fields:
                widened = self._bound(part, broadcast)
                parts.append(widened.args[0] if widened is not None else part)
            chain = parts[0]
            for part in parts[1:]:
                chain = self.builder_.normalize(binary[name](chain, part))
            if name == "mean":
                chain = relax.op.divide(chain, relax.const(len(parts), call.ty.dtype))
            if len(parts) == 1 or \
                    str(self.builder_.normalize(chain).ty.shape) != str(call.ty.shape):
                return call  # (a broadcast to more than the inputs give: kept as it was)
            replaced.append(call)
            return chain

    return _rewritten(mod, Rewriter(mod), replaced, prune=True)  # (the stacks, unread)


def legalize_layout_transform(bb, call, gather: bool = False):
    """A layout transform of a bool tensor as one of uint8s: TVM 0.27 legalizes it with a
    float padding value, which its schedule then refuses for bool ("elements of type bool,
    but the transformation fills padding with float32"). ONNX's Cast of floats to an integer
    type imports as `where(logical_not(isfinite(x)), 0, x)`, and the layout conversion carries
    that bool into the blocked layout of the convolution before it (a quantized model's uint8
    output). Anything else: with `gather` (CPU targets), `_gathered_layout_transform` where it
    applies, else TVM's own legalization."""
    tvm = load_tvm()
    from tvm import relax

    default = tvm.ir.Op.get("relax.layout_transform").get_attr("FLegalize")
    if getattr(call.args[0].ty, "dtype", None) != "bool":
        gathered = _gathered_layout_transform(bb, call) if gather else None
        return default(bb, call) if gathered is None else gathered
    as_bytes = bb.normalize(relax.op.astype(call.args[0], "uint8"))
    moved = bb.normalize(relax.op.layout_transform(as_bytes, call.attrs.index_map))
    return relax.op.astype(default(bb, moved), "bool")


def _gathered_layout_transform(bb, call):
    """A layout transform without padding as a kernel that computes each output element from
    the input element it comes from (the map's inverse). TVM's writes each input element where
    the map sends it: a kernel FuseOps cannot fuse (its output is not indexed by its loops), so
    every conversion between layouts was a pass of its own. Gathered, it fuses with the
    elementwise and injective kernels beside it (YOLOX's slicing before its first convolution,
    a depth-to-space after the last). None where the map is not a bijection of the shape."""
    load_tvm()
    from tvm import te, topi

    shape = getattr(call.args[0].ty, "shape", None)
    if shape is None or call.attrs.pad_value is not None or \
            getattr(call.attrs, "axis_separators", None):
        return None
    index_map = call.attrs.index_map
    try:
        inverse = index_map.inverse(list(shape))
    except Exception:  # noqa: BLE001  (not a bijection: TVM's own, with its padding)
        return None
    out_shape = index_map.map_shape(list(shape))

    def gather(data):
        return te.compute(out_shape, lambda *index: data(*inverse.map_indices(index)),
                          name="te_layout_transform", tag=topi.tag.INJECTIVE)

    return bb.call_te(gather, call.args[0], primfunc_name_hint="te_layout_transform")
