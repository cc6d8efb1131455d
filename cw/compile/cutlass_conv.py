"""Convolutions as CUTLASS implicit GEMMs on tensor cores: `cw compile --conv-algo cutlass`.

TVM's CUDA schedules compute fp32 convolutions with plain fp32 multiply-adds, which on an H100
leaves the tensor cores idle; PyTorch's cuDNN was 1.6-2.5x faster (docs/benchmarks.md). The
apache-tvm wheel ships CUTLASS's headers but not TVM's CUTLASS code generator, so cw calls
CUTLASS itself:

- At import (frontend.import_model, before weight-only math is lifted), a convolution on 3
  channels (a network's first) gets a zero fourth channel in its input and filter
  (`pad_channels`), then each eligible convolution is converted to NHWC activations and OHWI
  (KRSC) filters with TVM's ConvertLayout,
  which carries the layout through the elementwise operators, pooling and concatenations between
  convolutions and transposes only where an operator needs NCHW. The filters' relayout is lifted
  with the rest, so bundles store OHWI filters.
- Per batch size (`offload`, before legalization), each NHWC convolution becomes a
  `call_dps_packed` of `cw_cutlass_conv2d_v1` (cutlass_conv2d.cu) with the tile shape and
  split-K count chosen here (`plan`), and a small int32 workspace for CUTLASS's split-K
  semaphores that the static memory plan holds, so nothing is allocated per inference. A bias
  added to the convolution's output alone (a conv's own, or BatchNorm's shift once folded),
  and a ReLU right after it, go into CUTLASS's epilogue (`cw_cutlass_conv2d_bias_v1`): one pass
  over the output less, one kernel less. So does a residual added after the bias, and the ReLU
  after that (`cw_cutlass_conv2d_residual_v1`): a residual block's ending, which otherwise is one
  more TVM elementwise kernel reading two tensors.
- The kernels (3xTF32: fp32 accuracy from three TF32 tensor-core products, fp32 sums; or, for
  `--precision tf32`, one TF32 product: 10-bit mantissas, fp32 sums) are compiled by nvcc once
  per source, math, arch and toolkit into an object file cached under cw's cache directory, and
  linked into every batch size's kernel library (cutlass_build.py). The library then needs
  libcudart.so.13, which TVM's own CUDA runtime already loads.

Opt-in until timed on a GPU (docs/tuning.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from cw.compile.shapes import static_shape
from cw.tvm_env import load_tvm

SYMBOL = "cw_cutlass_conv2d_v1"            # 3xTF32: fp32 accuracy
SYMBOL_TF32 = "cw_cutlass_conv2d_tf32_v1"  # one TF32 product (--precision tf32)
# the same with a per-channel bias, and ReLU if asked, in the epilogue
SYMBOL_BIAS = "cw_cutlass_conv2d_bias_v1"
SYMBOL_BIAS_TF32 = "cw_cutlass_conv2d_bias_tf32_v1"
# ... and a residual (a tensor shaped like the output) added before the ReLU
SYMBOL_RESIDUAL = "cw_cutlass_conv2d_residual_v1"
SYMBOL_RESIDUAL_TF32 = "cw_cutlass_conv2d_residual_tf32_v1"
SYMBOLS = (SYMBOL, SYMBOL_TF32, SYMBOL_BIAS, SYMBOL_BIAS_TF32, SYMBOL_RESIDUAL,
           SYMBOL_RESIDUAL_TF32)
# (output pixels, output channels) per thread block, in the order of the .cu's `run` switch
TILES = ((128, 128), (128, 64), (64, 64))
ALIGNMENT = 4       # fp32 elements per 16-byte access: channels must be multiples of it
MAX_SPLIT = 16
MIN_SLICE = 256     # reduction length (C*R*S) each split-K slice keeps at least: 16 steps of 16


def _fp32(call) -> bool:
    data, weight = call.args[0].ty, call.args[1].ty
    out_dtype = call.attrs.out_dtype  # None or "" when it follows the input's
    return (data.dtype == "float32" and weight.dtype == "float32"
            and (not out_dtype or str(out_dtype) == "float32"))


def _plain_filter(call, data_layout: str, kernel_layout: str) -> list[int] | None:
    """The static filter shape of a plain (ungrouped) fp32 2-D convolution in these layouts;
    None for anything else."""
    if getattr(call.op, "name", "") != "relax.nn.conv2d":
        return None
    attrs = call.attrs
    if (attrs.groups != 1 or attrs.data_layout != data_layout
            or attrs.kernel_layout != kernel_layout
            or attrs.out_layout not in ("", data_layout) or not _fp32(call)):
        return None
    weight = static_shape(call.args[1].ty.shape)
    return weight if weight is not None and len(weight) == 4 else None


def conv_layout(call) -> dict[str, list[str]]:
    """ConvertLayout callback: NHWC / OHWI for a convolution CUTLASS takes (plain, fp32, 2-D,
    static channels that are multiples of 4: a network's first conv on RGB input is, once
    `pad_channels` has padded it), nothing for the rest. A transposed convolution keeps its
    own: with none, TVM infers NHWC from a CUTLASS conv before it, and has no lowering of
    conv2d_transpose in NHWC ("CodeGenVM cannot emit this Relax operator")."""
    op = getattr(call.op, "name", "")
    if op == "relax.nn.conv2d_transpose":
        attrs = call.attrs
        return {op: [attrs.data_layout, attrs.kernel_layout,
                     attrs.out_layout or attrs.data_layout]}
    weight = _plain_filter(call, "NCHW", "OIHW")
    if weight is None or weight[0] % ALIGNMENT or weight[1] % ALIGNMENT:
        return {}
    return {"relax.nn.conv2d": ["NHWC", "OHWI"]}


def _paddable(call) -> bool:
    """A convolution CUTLASS would take but for input channels that are not a multiple of
    ALIGNMENT: a network's first, on RGB."""
    weight = _plain_filter(call, "NCHW", "OIHW")
    return weight is not None and weight[0] % ALIGNMENT == 0 and weight[1] % ALIGNMENT != 0


def pad_channels(mod):
    """Zero input channels appended to both the input and the filter of each `_paddable`
    convolution, up to a multiple of ALIGNMENT, so that CUTLASS takes it too (same result: the
    added products are 0). Before the layout conversion and the lifting: the filter's padding
    is lifted, so the bundle stores the padded filter. Returns (module, convolutions padded)."""
    load_tvm()
    from tvm import relax

    count = 0

    @relax.expr_functor.mutator
    class Padder(relax.PyExprMutator):
        def visit_call_(self, call):
            nonlocal count
            call = self.visit_expr_post_order(call)
            if not _paddable(call):
                return call
            count += 1
            width = [0, 0, 0, -static_shape(call.args[1].ty.shape)[1] % ALIGNMENT, 0, 0, 0, 0]
            x = self.builder_.emit(relax.op.nn.pad(call.args[0], width))
            w = self.builder_.emit(relax.op.nn.pad(call.args[1], width))
            return relax.Call(call.op, [x, w], call.attrs)

    padded = _rewrite_main(mod, Padder(mod), lambda: count > 0)
    return padded, count


def _rewrite_main(mod, mutator, changed):
    """`mod` with its `main` as `mutator` rewrites it, or `mod` itself where `changed()` says
    (after the rewrite) that nothing was."""
    tvm = load_tvm()
    new_main = mutator.visit_expr(mod["main"])
    if not changed():
        return mod
    mutator.builder_.update_func(mod.get_global_var("main"), new_main)
    return tvm.IRModule(dict(mutator.builder_.get().functions), attrs=mod.attrs)


def plan(pixels: int, out_channels: int, reduction: int, sms: int) -> tuple[int, int]:
    """(tile index into TILES, split-K slices) for a convolution with `pixels` outputs per
    channel over the batch and a reduction of `reduction` = C*R*S products per output.
    The largest tile that still gives every multiprocessor a block; where even the smallest
    does not, its reduction is split (as cuda_conv does for TVM's kernels) while the blocks fit
    in one wave and each slice keeps MIN_SLICE products."""
    for index, (tm, tn) in enumerate(TILES):
        if -(-pixels // tm) * -(-out_channels // tn) >= sms:
            return index, 1
    index = len(TILES) - 1
    tm, tn = TILES[index]
    blocks = -(-pixels // tm) * -(-out_channels // tn)
    split = 1
    while (split < MAX_SPLIT and blocks * split * 2 <= sms
           and reduction // (split * 2) >= MIN_SLICE):
        split *= 2
    return index, split


def workspace_ints(pixels: int, out_channels: int, tile: int, split: int) -> int:
    """int32s of CUTLASS's serial split-K workspace: one semaphore per output tile (none, but a
    tensor of one, without split)."""
    if split == 1:
        return 1
    tm, tn = TILES[tile]
    return -(-pixels // tm) * -(-out_channels // tn)


def _prepared(call) -> bool:
    """A convolution conv_layout prepared: NHWC / OHWI. (ConvertLayout also moves convolutions
    it was given no layout for to NHWC when their input is, keeping OIHW filters: not these.)"""
    weight = _plain_filter(call, "NHWC", "OHWI")
    return weight is not None and weight[0] % ALIGNMENT == 0 and weight[3] % ALIGNMENT == 0


def offloadable(call) -> bool:
    """A prepared convolution with static shapes: the batch must be bound already."""
    if not _prepared(call):
        return False
    shapes = [static_shape(call.args[0].ty.shape), static_shape(call.ty.shape)]
    return all(s is not None and len(s) == 4 for s in shapes)


def _op(expr) -> str:
    return str(getattr(getattr(expr, "op", None), "name", ""))


def _channel_bias(expr, channels: int) -> bool:
    """A float32 tensor of one value per output channel that broadcasts over N, H and W: shape
    (K,) or (1, 1, 1, K)."""
    ty = getattr(expr, "ty", None)
    shape = static_shape(getattr(ty, "shape", None)) if ty is not None else None
    return (shape is not None and getattr(ty, "dtype", "") == "float32"
            and shape in ([channels], [1, 1, 1, channels]))


@dataclass(frozen=True)
class Fused:
    """A convolution and what CUTLASS's epilogue computes after it in the same kernel:
    relu?(conv + bias [+ residual])."""
    conv: object              # the relax.nn.conv2d call
    bias: object              # one value per output channel
    residual: object | None   # a tensor shaped like the output, added after the bias
    relu: bool
    absorbed: tuple           # the vars of the bindings the fused call replaces, in order
    # (the last keeps its name and place for its users: the fused call is emitted there)


def epilogues(func) -> dict:
    """{convolution's var: Fused} for each offloadable convolution whose output goes to one add
    of a per-channel bias and nowhere else; then, each step optionally and only where the step
    before has no other user, to one add of a tensor shaped like the output (a residual) and to
    one ReLU. A binding goes into one group at most: where a residual add sums two biased
    convolutions (a downsampling block), the first one's group takes the add, with the second's
    output as its residual. Found on the whole function first, since the rewrite must know at
    the convolution whether to emit it."""
    from tvm import relax

    bindings, users = {}, {}
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            bindings[binding.var] = value
            for var in relax.analysis.free_vars(value):
                users.setdefault(var, []).append(binding.var)
    for var in relax.analysis.free_vars(func.body.body):
        users.setdefault(var, []).append(None)  # the function's result: never absorbed

    def only_user(var, op):
        """The binding that alone reads `var`, if it is a call of `op`."""
        after = users.get(var, [])
        if len(after) == 1 and after[0] is not None and _op(bindings[after[0]]) == op:
            return after[0]
        return None

    groups, claimed = {}, set()
    for add_var, value in bindings.items():
        if _op(value) != "relax.add" or add_var in claimed:
            continue
        for conv_var, bias in (tuple(value.args), tuple(reversed(value.args))):
            conv = bindings.get(conv_var)
            if (conv is None or not offloadable(conv) or users.get(conv_var) != [add_var]
                    or static_shape(value.ty.shape) != static_shape(conv.ty.shape)):
                continue
            shape = static_shape(conv.ty.shape)
            if not _channel_bias(bias, shape[3]):
                continue
            absorbed, residual = [add_var], None
            second = only_user(add_var, "relax.add")
            if second is not None and second not in claimed:
                other = [a for a in bindings[second].args if not a.same_as(add_var)]
                if (len(other) == 1 and _full_tensor(other[0], shape)
                        and static_shape(bindings[second].ty.shape) == shape):
                    residual = other[0]
                    absorbed.append(second)
            relu = only_user(absorbed[-1], "relax.nn.relu")
            if relu is not None and relu not in claimed:
                absorbed.append(relu)
            claimed.update(absorbed)
            groups[conv_var] = Fused(conv, bias, residual, _op(bindings[absorbed[-1]])
                                     == "relax.nn.relu", tuple(absorbed))
            break
    return groups


def _full_tensor(expr, shape: list[int]) -> bool:
    """A float32 tensor of exactly `shape` (no broadcasting)."""
    ty = getattr(expr, "ty", None)
    return (ty is not None and getattr(ty, "dtype", "") == "float32"
            and static_shape(getattr(ty, "shape", None)) == shape)


def conv_key(x, w, pad, stride, dilation, tf32: bool) -> str:
    """One convolution, exactly, as measured plans name it (cutlass_plans.py): NHWC input,
    KRSC filter, (top, left) padding, strides, dilation and math."""
    def dims(values):
        return "x".join(str(int(v)) for v in values)

    return (f"x={dims(x)} w={dims(w)} pad={dims(pad)} stride={dims(stride)} "
            f"dilation={dims(dilation)} {'tf32' if tf32 else '3xtf32'}")


def _call_key(call) -> str | None:
    """conv_key of a CUTLASS call `offload` emitted; None for any other expression."""
    from tvm import relax

    if not (isinstance(call, relax.Call) and call.args
            and isinstance(call.args[0], relax.ExternFunc)
            and str(call.args[0].global_symbol) in SYMBOLS):
        return None
    x, w, *_, params = call.args[1]
    v = [int(p) for p in params.values]
    return conv_key(static_shape(x.ty.shape), static_shape(w.ty.shape), v[2:4], v[4:6], v[6:8],
                    "tf32" in str(call.args[0].global_symbol))


def offload(mod, sms: int, tf32: bool = False, plans=None):
    """Every offloadable convolution of `main` as a call of a CUTLASS function (the TF32 ones
    with `tf32`), with its bias, residual and ReLU where `epilogues` finds them, and the tile
    and split `plans` (cutlass_plans.Plans) measured for it, or else `plan`'s guess; returns
    (module, convolutions offloaded). After bind_batch: the plan depends on the batch."""
    load_tvm()
    from tvm import relax

    count = 0
    groups = epilogues(mod["main"])
    absorbed = set(groups)  # bindings the fused calls replace
    fused_at = {}           # the binding a fused call takes the place of -> its group
    for group in groups.values():
        absorbed.update(group.absorbed[:-1])
        fused_at[group.absorbed[-1]] = group

    def cutlass_call(builder, conv, x, w, bias=None, residual=None, relu=False):
        """Emit the CUTLASS call for `conv` (its arguments already rewritten: x, w, bias,
        residual) and return its output."""
        nonlocal count
        count += 1
        attrs = conv.attrs
        n, p, q, k = static_shape(conv.ty.shape)
        _, r, s, c = static_shape(conv.args[1].ty.shape)
        pixels = n * p * q
        top, left = int(attrs.padding[0]), int(attrs.padding[1])
        strides, dilation = [int(v) for v in attrs.strides], [int(v) for v in attrs.dilation]
        measured = plans.lookup(conv_key(static_shape(conv.args[0].ty.shape),
                                         [k, r, s, c], (top, left), strides, dilation, tf32)) \
            if plans is not None else None
        tile, split = measured or plan(pixels, k, c * r * s, sms)
        params = [tile, split, top, left, *strides, *dilation]
        out = relax.TensorType([n, p, q, k], "float32")
        workspace = relax.TensorType([workspace_ints(pixels, k, tile, split)], "int32")
        if bias is None:
            symbol, args = (SYMBOL_TF32 if tf32 else SYMBOL), [x, w]
        elif residual is None:
            symbol, args = (SYMBOL_BIAS_TF32 if tf32 else SYMBOL_BIAS), [x, w, bias]
            params.append(int(relu))
        else:
            symbol = SYMBOL_RESIDUAL_TF32 if tf32 else SYMBOL_RESIDUAL
            args = [x, w, bias, residual]
            params.append(int(relu))
        both = builder.emit(relax.call_dps_packed(symbol, [*args, relax.ShapeExpr(params)],
                                                  out_ty=[out, workspace]))
        return relax.TupleGetItem(both, 0)

    @relax.expr_functor.mutator
    class Offloader(relax.PyExprMutator):
        def visit_var_binding_(self, binding):
            if binding.var in absorbed:
                return  # computed inside the fused call emitted at its last binding
            group = fused_at.get(binding.var)
            if group is None:
                return super().visit_var_binding_(binding)
            conv = group.conv
            residual = None if group.residual is None else self.visit_expr(group.residual)
            out = cutlass_call(self.builder_, conv, self.visit_expr(conv.args[0]),
                               self.visit_expr(conv.args[1]), self.visit_expr(group.bias),
                               residual, group.relu)
            # the original var keeps its place (and DataflowVar or not) for its users
            self.builder_.emit_normalized(
                relax.VarBinding(binding.var, self.builder_.normalize(out)))

        def visit_call_(self, call):
            call = self.visit_expr_post_order(call)
            if not offloadable(call):
                return call
            return cutlass_call(self.builder_, call, call.args[0], call.args[1])

    offloaded = _rewrite_main(mod, Offloader(mod), lambda: count > 0)
    return offloaded, count


def count_fused(mod) -> int:
    """Calls of the CUTLASS functions with a bias in `main` (residual or ReLU or not)."""
    return _count_calls(mod, SYMBOLS[2:])


def count_residual(mod) -> int:
    """Calls of the CUTLASS functions that also add a residual in `main`."""
    return _count_calls(mod, (SYMBOL_RESIDUAL, SYMBOL_RESIDUAL_TF32))


def _count_calls(mod, symbols) -> int:
    from tvm import relax

    count = 0

    def visit(expr):
        nonlocal count
        if (isinstance(expr, relax.Call) and isinstance(expr.args[0] if expr.args else None,
                                                          relax.ExternFunc)
                and str(expr.args[0].global_symbol) in symbols):
            count += 1

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return count


def count_measured(mod, plans) -> int:
    """CUTLASS calls in `main` whose tile and split are what `plans` measured for them."""
    from tvm import relax

    if plans is None or not plans.choices:
        return 0  # nothing to look up: no walk over the graph
    count = 0

    def visit(expr):
        nonlocal count
        key = _call_key(expr)
        if key is not None:
            params = [int(p) for p in expr.args[1][-1].values]
            count += plans.lookup(key) == (params[0], params[1])

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return count


def count_offloaded(mod) -> int:
    """Calls of any CUTLASS function in `main`."""
    return _count_calls(mod, SYMBOLS)


def count_layouts(mod) -> tuple[int, int]:
    """(convolutions prepared for CUTLASS, other convolutions) in `main`."""
    from tvm import relax

    counts = [0, 0]

    def visit(expr):
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.nn.conv2d":
            counts[0 if _prepared(expr) else 1] += 1

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return counts[0], counts[1]
