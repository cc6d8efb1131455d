"""Float16 models computed with float32 sums.

TVM computes an operator in its output's type: a float16 model's convolutions, matrix
products, means and normalizations added up their terms in float16, each partial sum
rounded to 11 bits. On the build machine that put a float16 mean over 4096 values 18 % off,
a product of 4096 terms 2.3 % off and a 3x3 convolution over 256 channels 1.1 % off, where
onnxruntime (which sums in float32) is within the output's own rounding, ~3e-4
(docs/benchmarks.md, stop 78). Here each such operator gets float32 sums and is rounded to
float16 once, after it, as onnxruntime and cuDNN do:

- convolutions and matrix products: on CUDA with float16 operands and float32 sums
  (`out_dtype`, the form TVM's own ToMixedPrecision writes for `--precision fp16`); on the
  CPU, which has no float16 arithmetic to keep, with float32 operands (the weights' cast is
  lifted: the bundle stores them in float32, and cw's CPU convolutions take them as ever);
- reductions, softmax, normalizations and average pools: on float32 operands.

Elementwise operators stay in float16: one rounding each, as in onnxruntime. An `Einsum`,
which TVM's importer writes as a kernel of its own that this cannot see, is given float32
operands in the ONNX graph (decompose.py).
"""

from __future__ import annotations

from cw.compile.relax_rewrite import rewrite_calls
from cw.tvm_env import load_tvm

# operators with an `out_dtype`: the type they sum in
_PRODUCTS = ("relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv3d", "relax.nn.conv1d_transpose",
             "relax.nn.conv2d_transpose", "relax.nn.conv3d_transpose", "relax.matmul")
# operators that sum (or average) in their input's type
_SUMMING = ("relax.sum", "relax.mean", "relax.variance", "relax.std", "relax.prod",
            "relax.cumsum",
            "relax.nn.softmax", "relax.nn.log_softmax", "relax.nn.layer_norm",
            "relax.nn.group_norm", "relax.nn.rms_norm", "relax.nn.instance_norm",
            "relax.nn.avg_pool1d", "relax.nn.avg_pool2d", "relax.nn.avg_pool3d",
            "relax.nn.adaptive_avg_pool1d", "relax.nn.adaptive_avg_pool2d",
            "relax.nn.adaptive_avg_pool3d")


def float32_sums(mod, cpu: bool):
    """Each float16 product, reduction and normalization of `mod` summed in float32 and
    rounded to float16 after it (`cpu`: products on float32 operands, else float16 ones with
    float32 sums). Returns (module, calls rewritten)."""
    tvm = load_tvm()
    from tvm import relax

    products = {tvm.ir.Op.get(name) for name in _PRODUCTS}
    summing = set()
    for name in _SUMMING:
        try:
            summing.add(tvm.ir.Op.get(name))
        except Exception:  # (an operator another TVM lacks)
            continue

    def half(expr) -> bool:
        return getattr(expr.ty, "dtype", None) == "float16"

    def widened(args):
        return [relax.op.astype(a, "float32") if half(a) else a for a in args]

    def replacement(call):
        op = call.op
        if not isinstance(op, tvm.ir.Op) or not half(call):
            return None
        if op in products:
            if str(call.attrs.out_dtype or "") not in ("", "float16") or \
                    not all(half(a) for a in call.args):
                return None
            attrs = call.attrs
            if not cpu or call.attrs.out_dtype:  # (an empty out_dtype follows the operands)
                attrs = _with_out_dtype(tvm, attrs, "float32")
            summed = relax.Call(op, widened(call.args) if cpu else list(call.args), attrs)
        elif op in summing:
            summed = relax.Call(op, widened(call.args), call.attrs)
        else:
            return None
        return relax.op.astype(summed, "float16")

    return rewrite_calls(mod, replacement)


def _with_out_dtype(tvm, attrs, dtype: str):
    """A copy of an operator's attributes with `out_dtype` set."""
    info = type(attrs).__tvm_ffi_type_info__
    fields = {f.name: getattr(attrs, f.name) for f in info.fields}
    fields["out_dtype"] = dtype
    return tvm.ir.make_node(info.type_key, **fields)
