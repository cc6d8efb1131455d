"""A float16 model's sums in float32 (cw/compile/fp16_sums.py)."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from cw.compile.compiler import CompileConfig, compile_model
from cw.engine import LocalModel
from cw.tvm_env import load_tvm
from cw.verify import onnx_reference


def _float16_model(path, dtype=TensorProto.FLOAT16):
    """A mean over 4096 values far from 0, a product of 4096 terms (MatMul, Einsum) and a 3x3
    convolution over 64 channels, in `dtype`: the float32 twin, of the same float16 weights,
    is the reference."""
    rng = np.random.default_rng(5)
    np_type = np.float16 if dtype == TensorProto.FLOAT16 else np.float32

    def weights(name, *shape):
        values = (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]) or shape[0]))
        return numpy_helper.from_array(values.astype(np.float16).astype(np_type), name)

    inits = [numpy_helper.from_array(np.array([1, 2, 3], np.int64), "axes"),
             weights("m", 4096, 16), weights("k", 16, 64, 3, 3)]
    node = helper.make_node
    nodes = [node("ReduceMean", ["x", "axes"], ["mean"], keepdims=0),
             node("Flatten", ["x"], ["flat"]), node("MatMul", ["flat", "m"], ["product"]),
             node("Conv", ["x", "k"], ["conv"], pads=[1, 1, 1, 1]),
             node("Einsum", ["flat", "m"], ["einsum"], equation="bk,kj->bj")]
    graph = helper.make_graph(
        nodes, "sums", [helper.make_tensor_value_info("x", dtype, ["N", 64, 8, 8])],
        [helper.make_tensor_value_info(n, dtype, None)
         for n in ("mean", "product", "conv", "einsum")],
        inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                                ir_version=8), path)
    return path


def test_a_float16_models_sums_are_float32(tmp_path):
    """Summed in float16, the mean was 18 % off, the product 2.3 % and the convolution 0.6 %
    (TVM adds up in the output's type; an Einsum, the importer's own kernel, 1 %). In float32
    and rounded once, each is within the float16 rounding of its exact value, as onnxruntime
    is."""
    half = _float16_model(tmp_path / "half.onnx")
    exact = _float16_model(tmp_path / "single.onnx", TensorProto.FLOAT)
    m = compile_model(half, tmp_path / "b", CompileConfig(batch_sizes=(1,)))
    assert any(n.startswith("float16: 3 operators that add up terms") for n in m.notes), m.notes
    x = (np.random.default_rng(6).standard_normal((1, 64, 8, 8)) + 3).astype(np.float16)
    outs = LocalModel(tmp_path / "b").run([x])
    truths = onnx_reference(exact, [x.astype(np.float32)])
    theirs = onnx_reference(half, [x])
    for name, out, truth, ort in zip(("mean", "product", "conv", "einsum"), outs, truths,
                                     theirs):
        assert out.dtype == np.float16
        scale = float(np.abs(truth).max())
        error = float(np.abs(out.astype(np.float64) - truth).max()) / scale
        rounding = float(np.abs(truth.astype(np.float16).astype(np.float64) - truth).max())
        assert error <= 1.01 * rounding / scale + 1e-7, (name, error, rounding / scale)
        # onnxruntime too sums in float32 and rounds once, in its own order: where the two
        # float32 sums fall either side of a float16 rounding boundary the results are one
        # float16 step apart (the conv: 2 of 1,024 values on AVX2, none on AVX-512)
        apart = out != ort
        steps = np.abs(out.astype(np.float32) - ort) / np.spacing(np.abs(ort))
        assert apart.mean() <= 0.01 and (steps[apart] <= 1).all(), (name, int(apart.sum()))


def test_cuda_keeps_float16_operands_with_float32_sums():
    """On CUDA a product keeps its float16 operands (tensor cores take them) and sums in
    float32, the form ToMixedPrecision writes for --precision fp16; a mean is computed on
    float32 operands. On the CPU both take float32 operands."""
    tvm = load_tvm()
    from tvm import relax

    from cw.compile import fp16_sums

    def module():
        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType((1, 8, 4, 4), "float16"))
        k = relax.Var("k", relax.TensorType((16, 8, 3, 3), "float16"))
        with bb.function("main", [x, k]):
            with bb.dataflow():
                conv = bb.emit(relax.op.nn.conv2d(x, k, padding=1))
                mean = bb.emit_output(relax.op.mean(conv, axis=[1, 2, 3]))
            bb.emit_func_output(mean)
        return bb.get()

    def calls(mod):
        found = {}

        @relax.expr_functor.visitor
        class Calls(relax.PyExprVisitor):
            def visit_call_(self, call):
                if isinstance(call.op, tvm.ir.Op):
                    found.setdefault(call.op.name, []).append(call)
                super().visit_call_(call)

        Calls().visit_expr(mod["main"])
        return found

    for cpu in (False, True):
        mod, count = fp16_sums.float32_sums(module(), cpu=cpu)
        assert count == 2
        found = calls(mod)
        (conv,), (mean,) = found["relax.nn.conv2d"], found["relax.mean"]
        assert conv.ty.dtype == "float32" and mean.args[0].ty.dtype == "float32"
        assert [a.ty.dtype for a in conv.args] == ["float32"] * 2 if cpu else ["float16"] * 2
        assert mod["main"].ret_ty.dtype == "float16"
