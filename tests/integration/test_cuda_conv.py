"""Split-K convolutions for CUDA (cw/compile/cuda_conv.py): the split computes what TVM's own
convolution computes (run on the CPU: the rewrite is target-independent math), and on an sm_90
target the parts get TVM's tiled GEMM schedule with enough thread blocks, the epilogue stays
fused, and `cw compile --conv-split` reports and controls it."""

import numpy as np
import pytest

from cw.bundle import open_bundle
from cw.compile import cuda_conv, targets
from cw.compile.compiler import legalized
from cw.tvm_env import cuda_codegen_problem, load_tvm


def _conv_graph(n, c, h, w, oc, kernel, stride, pad, dilation=1, residual=False,
                dtype="float32"):
    tvm = load_tvm()
    from tvm import relax

    kh, kw = kernel
    top, left, bottom, right = pad
    out_h = (h + top + bottom - (kh - 1) * dilation - 1) // stride + 1
    out_w = (w + left + right - (kw - 1) * dilation - 1) // stride + 1
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((n, c, h, w), dtype))
    wt = relax.Var("w", relax.TensorType((oc, c, kh, kw), dtype))
    b = relax.Var("b", relax.TensorType((1, oc, 1, 1), "float32"))
    r = relax.Var("r", relax.TensorType((n, oc, out_h, out_w), "float32"))
    with bb.function("main", [x, wt, b] + ([r] if residual else [])):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, wt, strides=stride, padding=pad,
                                           dilation=dilation, out_dtype="float32"))
            y = bb.emit(relax.op.add(y, b))
            if residual:
                y = bb.emit(relax.op.add(y, r))
            y = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(y)
    return tvm, bb.get(), (out_h, out_w)


def _split_shapes(mod) -> list[int]:
    """The number of parts of every split convolution in a legalized module."""
    from tvm import relax

    parts = []

    def visit(expr):
        if (isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.call_tir"
                and "conv2d_nchw_split" in expr.args[0].name_hint):
            parts.append(int(expr.ty.shape[0]))  # the output: (parts, N, O, H, W)

    relax.analysis.post_order_visit(mod["main"], visit)
    return parts


@pytest.mark.parametrize("n,c,h,w,oc,kernel,stride,pad,dilation,residual,dtype,parts", [
    (1, 64, 7, 7, 32, (3, 3), 1, (1, 1, 1, 1), 1, True, "float32", 4),
    (2, 64, 13, 11, 16, (3, 3), 2, (1, 0, 2, 1), 1, False, "float32", 4),  # asymmetric pad
    (1, 32, 12, 12, 8, (3, 3), 1, (2, 2, 2, 2), 2, True, "float32", 2),    # dilation 2
    (1, 256, 5, 5, 24, (1, 1), 1, (0, 0, 0, 0), 1, True, "float32", 2),    # 1x1
    (1, 64, 9, 9, 16, (1, 5), 1, (0, 2, 0, 2), 1, False, "float32", 2),    # 1x5
    (1, 64, 7, 7, 32, (3, 3), 1, (1, 1, 1, 1), 1, True, "float16", 4),     # fp16, fp32 sums
])
def test_split_convolution_computes_what_tvms_convolution_computes(
        n, c, h, w, oc, kernel, stride, pad, dilation, residual, dtype, parts):
    from tvm import relax

    tvm, mod, (out_h, out_w) = _conv_graph(n, c, h, w, oc, kernel, stride, pad, dilation,
                                           residual, dtype)
    cuda = targets.tvm_target("cuda", "sm_90")
    # as many multiprocessors as it takes: these small convs split as far as their channels let
    split = relax.transform.LegalizeOps(
        {"relax.nn.conv2d": cuda_conv.legalizer(cuda, sms=10**6)})(mod)
    assert _split_shapes(split) == [parts]
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((n, c, h, w)).astype(dtype),
            (rng.standard_normal((oc, c) + kernel) / np.sqrt(c)).astype(dtype),
            rng.standard_normal((1, oc, 1, 1)).astype(np.float32)]
    if residual:
        args.append(rng.standard_normal((n, oc, out_h, out_w)).astype(np.float32))
    outputs = []
    for module in (split, mod):
        ex = tvm.compile(module, target=targets.tvm_target("cpu", targets.GENERIC_CPU))
        vm = relax.VirtualMachine(ex, tvm.cpu())
        outputs.append(vm["main"](*[tvm.runtime.tensor(a) for a in args]).numpy())
    assert outputs[0].shape == (n, oc, out_h, out_w)
    assert (outputs[0] > 0).any()
    np.testing.assert_allclose(outputs[0], outputs[1], rtol=1e-5, atol=1e-5)


def _scheduled_kernels(mod, target):
    """name -> (thread blocks per launch, uses shared memory) of every TIR kernel once TVM's
    default CUDA schedules are applied."""
    import re

    from tvm import tirx, transform

    fused, rest = mod
    with target:
        scheduled = transform.Sequential(rest)(fused)
    kernels = {}
    for gv, func in scheduled.functions.items():
        if isinstance(func, tirx.PrimFunc):
            text = func.script()
            blocks = 1
            for extent in re.findall(r'thread_binding\(T\.int64\((\d+)\), thread="blockIdx',
                                     text):
                blocks *= int(extent)
            kernels[gv.name_hint] = (blocks, 'scope="shared"' in text)
    return kernels


def test_small_convs_fill_the_gpu_and_keep_their_epilogue_fused():
    # resnet18's last 3x3 conv with its residual add at batch 1: 2 x 8 tiles of TVM's schedule
    _, mod, _ = _conv_graph(1, 512, 7, 7, 512, (3, 3), 1, (1, 1, 1, 1), residual=True)
    target = targets.tvm_target("cuda", "sm_90")
    with target:
        split, plain = legalized(mod, target), legalized(mod, target, conv_split=False)
    assert cuda_conv.count_split(split[0]) == 1 and cuda_conv.count_split(plain[0]) == 0
    assert _split_shapes(split[0]) == [8]
    kernels = _scheduled_kernels(split, target)
    (partial,) = [k for k in kernels if "conv2d_nchw_split" in k]
    assert kernels[partial] == (128, True)  # 8 parts x 16 tiles, the tiled GEMM schedule
    # the parts' sum, bias, residual add and ReLU: one elementwise kernel, nothing else
    (rest,) = [k for k in kernels if k != partial]
    assert "conv2d_split_add" in rest and rest.endswith("relu")
    (plain_conv,) = _scheduled_kernels(plain, target).values()
    assert plain_conv == (16, True)


def test_convs_that_fill_the_gpu_are_left_alone():
    _, mod, _ = _conv_graph(16, 512, 7, 7, 512, (3, 3), 1, (1, 1, 1, 1))
    target = targets.tvm_target("cuda", "sm_90")
    with target:
        fused, _ = legalized(mod, target)
    assert cuda_conv.count_split(fused) == 0


def _conv_onnx(path, channels=256, hw=7):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = (np.random.default_rng(0).standard_normal((channels, channels, 3, 3)) * 0.02)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", channels, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", channels, hw, hw])],
        [numpy_helper.from_array(w.astype(np.float32), "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_cw_compile_reports_split_convs_and_turns_them_off(cli, tmp_path):
    problem = cuda_codegen_problem()
    if problem:
        pytest.skip(f"no CUDA compile here: {problem}")
    onnx_path = tmp_path / "conv.onnx"
    _conv_onnx(onnx_path)
    r = cli("compile", onnx_path, "-o", tmp_path / "split", "--target", "cuda",
            "--batch-sizes", "1,16", "--conv-algo", "direct")
    assert r.code == 0, r.err
    assert "1 split-K conv" in r.out
    kernels = open_bundle(tmp_path / "split").manifest.kernels
    assert [k.kernels_conv_split for k in kernels] == [1, 0]  # batch 16 fills the GPU
    r = cli("inspect", tmp_path / "split")
    assert r.code == 0 and "1 split-K" in r.out and "convs" in r.out, r.err
    r = cli("compile", onnx_path, "-o", tmp_path / "plain", "--target", "cuda",
            "--batch-sizes", "1", "--conv-split", "off", "--conv-algo", "direct")
    assert r.code == 0, r.err
    assert open_bundle(tmp_path / "plain").manifest.kernels[0].kernels_conv_split == 0
    assert kernels[0].workspace_bytes > open_bundle(tmp_path / "plain").manifest.kernels[
        0].workspace_bytes  # the parts live in the static memory plan
    r = cli("compile", onnx_path, "-o", tmp_path / "bad", "--target", "cuda",
            "--conv-split", "sometimes")
    assert r.code != 0 and "--conv-split auto" in r.err


@pytest.mark.parametrize("batch", [1, 4])
def test_late_cnn_splits_both_convs(zoo_onnx, batch):
    """The premise of tests/gpu's split-K accuracy test on the GPU."""
    from cw.compile.compiler import CompileConfig, bind_batch, import_graph

    config = CompileConfig(target="cuda", batch_sizes=(batch,), conv_algo="direct")
    onnx_model, imported, _ = import_graph(zoo_onnx("late_cnn"), config)
    target = targets.tvm_target("cuda", config.resolved_arch)
    fused, _ = legalized(bind_batch(imported.mod, onnx_model, batch), target)
    assert cuda_conv.count_split(fused) == 2
