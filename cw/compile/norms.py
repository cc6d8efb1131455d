"""GroupNormalization as its arithmetic, with the variance taken about the mean; LayerNorm
on the CPU given rows about their mean.

TVM 0.27's group_norm kernel sums x and x² in one pass and takes E[x²] - E[x]², which cancels
where a group's mean is large against its spread: on the build machine, float32 GroupNorm
of values with mean / spread 10 was 5.2e-4 off the exact result (onnxruntime 5.5e-5), at 100
6.0e-2 (7.0e-3), at 1000 NaN (a negative variance). A convolution's output with its bias is
such a tensor. Here it is the mean, the mean of the squared deviations from it, and the
normalization (as TVM's importer writes InstanceNormalization): three passes over the tensor
where the kernel made two; 4.2e-5 at 10, 3.7e-3 at 100, what float32 sums of the group allow
(docs/benchmarks.md, stop 78).

On the CPU the arithmetic also keeps a model in the blocked layout: TVM's layout inference for
`group_norm` blocks the data but leaves gamma and beta per channel, and the check that follows
("the size of input 1 must be equal to the size of channel_axis") stopped the conversion of
the whole model (ConvNeXt-style and diffusion networks).
"""

from __future__ import annotations

from cw.compile.relax_rewrite import rewrite_calls
from cw.tvm_env import load_tvm


def group_norms_decomposed(mod):
    """Every `group_norm` over (N, C, spatial...) with the channels at axis 1 as the mean,
    the variance about it, and the normalization. Returns (module, calls rewritten)."""
    tvm = load_tvm()
    from tvm import relax, tirx

    group_norm = tvm.ir.Op.get("relax.nn.group_norm")

    def replacement(call):
        if not call.op.same_as(group_norm):
            return None
        attrs = call.attrs
        x, gamma, beta = call.args
        shape = getattr(x.ty, "shape", None)
        rank = getattr(x.ty, "ndim", -1)
        if rank < 3 or int(attrs.channel_axis) != 1 or not isinstance(shape, relax.ShapeExpr) \
                or sorted(int(a) % rank for a in attrs.axes) != list(range(2, rank)):
            return None
        c = shape.values[1]
        groups = int(attrs.num_groups)
        if not isinstance(c, tirx.IntImm) or int(c.value) % groups:
            return None
        dtype = x.ty.dtype
        split = [shape.values[0], groups, int(c.value) // groups, *shape.values[2:]]
        data, axes = relax.op.reshape(x, relax.ShapeExpr(split)), list(range(2, rank + 1))
        deviation = relax.op.subtract(data, relax.op.mean(data, axis=axes, keepdims=True))
        variance = relax.op.mean(relax.op.multiply(deviation, deviation), axis=axes,
                                 keepdims=True)
        eps = relax.const(float(attrs.epsilon), dtype)
        y = relax.op.reshape(
            relax.op.divide(deviation, relax.op.sqrt(relax.op.add(variance, eps))), shape)
        per_channel = relax.ShapeExpr([c] + [1] * (rank - 2))
        if attrs.scale:
            y = relax.op.multiply(y, relax.op.reshape(gamma, per_channel))
        if attrs.center:
            y = relax.op.add(y, relax.op.reshape(beta, per_channel))
        return y

    return rewrite_calls(mod, replacement)


def layer_norms_about_the_mean(mod):
    """Every float32 `layer_norm` given its input less the mean of what it normalizes (the
    same result in exact arithmetic). Returns (module, calls rewritten).

    TVM's kernel takes the mean, then the variance about it, but its mean is a float32 sum
    of the row: rows of 768 with a mean 1000 times their spread came out 2.4e-3 off on the
    CPU (3.3e-4 with cpu_rows' lane sums; onnxruntime 6.5e-5). On the row less its mean
    the kernel's own mean is ~0 and what it rounds is the spread's: 1.3e-6 at any mean.
    The subtraction is one more kernel per LayerNorm (BERT-base on the CPU: +0.7 ms in ~140;
    docs/benchmarks.md, stop 79), and is written for the CPU only: a GPU's sums are trees of
    short sums, and a launch there weighs more."""
    tvm = load_tvm()
    from tvm import relax

    layer_norm = tvm.ir.Op.get("relax.nn.layer_norm")

    def replacement(call):
        if not call.op.same_as(layer_norm):
            return None
        x = call.args[0]
        rank = getattr(x.ty, "ndim", -1)
        if rank < 1 or x.ty.dtype != "float32":
            return None
        attrs = call.attrs
        centered = relax.op.subtract(
            x, relax.op.mean(x, axis=[int(a) % rank for a in attrs.axes], keepdims=True))
        return relax.op.nn.layer_norm(centered, call.args[1], call.args[2], attrs.axes,
                                      float(attrs.epsilon), attrs.center, attrs.scale)

    return rewrite_calls(mod, replacement)
