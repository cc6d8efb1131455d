"""`cw compile --conv-algo cutlass` (cw/compile/cutlass_conv.py, cutlass_conv2d.cu).

The CUTLASS kernels themselves run only on a GPU (tests/gpu). Everything around them is checked
here: the same graph, compiled for the CPU and linked with the reference build of the same
function (same argument checks and calling convention, plain loops instead of CUTLASS),
computes what onnxruntime computes; and for sm_90 the bundle links the nvcc-built kernels."""

import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cw.compile import compiler, cutlass_build, cutlass_conv, cutlass_plans, targets
from cw.compile.compiler import CompileConfig, bind_batch, compile_model, import_graph
from cw.compile.libcheck import check_device_binary
from cw.errors import UsageError
from cw.tvm_env import cuda_codegen_problem, load_tvm
from cw.verify import max_relative_error, onnx_reference, verify_tolerance


def _conv(name, x, cin, cout, kernel, rng, inits, nodes, **attrs):
    w = rng.standard_normal((cout, cin // attrs.get("group", 1), *kernel)).astype(np.float32)
    inits += [numpy_helper.from_array(w * 0.2, f"{name}_w"),
              numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), f"{name}_b")]
    nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [name],
                                  kernel_shape=list(kernel), **attrs))
    return name


def _save(path, name, nodes, inits, x_shape, y_shape):
    """A graph from x (N, *x_shape) to y (N, *y_shape), checked and saved at `path`."""
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *x_shape])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", *y_shape])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return path


def conv_mix_model(path):
    """Convolutions of every shape the offload must get right, and two it must leave to TVM:
    one on 3 channels (padded to 4), strided with asymmetric padding, dilated, 1x1, a 5x3
    window, a concat between convs; a grouped one, one whose output channels are not a multiple
    of 4."""
    rng = np.random.default_rng(7)
    inits, nodes = [], []
    x = _conv("c0", "x", 3, 8, (3, 3), rng, inits, nodes, pads=[1, 1, 1, 1])  # padded to 4
    a = _conv("c1", x, 8, 16, (3, 3), rng, inits, nodes, strides=[2, 2], pads=[0, 1, 1, 0])
    nodes.append(helper.make_node("Relu", [a], ["a"]))
    b = _conv("c2", "a", 16, 16, (3, 3), rng, inits, nodes, dilations=[2, 2], pads=[2, 2, 2, 2])
    nodes.append(helper.make_node("Add", [b, "a"], ["ab"]))
    c = _conv("c3", "ab", 16, 12, (1, 1), rng, inits, nodes)
    d = _conv("c4", c, 12, 8, (5, 3), rng, inits, nodes, pads=[2, 1, 2, 1])
    nodes.append(helper.make_node("Concat", [d, c], ["cat"], axis=1))
    e = _conv("c5", "cat", 20, 6, (3, 3), rng, inits, nodes, pads=[1, 1, 1, 1])  # TVM: 6 out
    f = _conv("c6", "cat", 20, 8, (3, 3), rng, inits, nodes, pads=[1, 1, 1, 1], group=2)  # TVM
    nodes.append(helper.make_node("Concat", [e, f], ["y"], axis=1))
    return _save(path, "conv_mix", nodes, inits, [3, 13, 11], [14, 6, 5])


def run_offloaded_on_cpu(onnx_path, x, tmp_path, precision="fp32"):
    """(output, (convolutions offloaded, of them with a fused bias, of those with a fused
    residual), notes): the graph `cw
    compile --target cuda --conv-algo cutlass` (or `--precision tf32`) builds, compiled for the
    CPU and linked with the reference functions."""
    tvm = load_tvm()
    from tvm import relax

    batch = x.shape[0]
    config = CompileConfig(target="cuda", precision=precision, batch_sizes=(batch,),
                           conv_algo="cutlass" if precision == "fp32" else "direct")
    onnx_model, imported, _ = import_graph(onnx_path, config)
    mod = bind_batch(imported.mod, onnx_model, batch)
    target = targets.tvm_target("cpu", targets.GENERIC_CPU)
    offloaded = cutlass_conv.offload(mod, 132)[0]
    fused = cutlass_conv.count_fused(offloaded), cutlass_conv.count_residual(offloaded)
    lowered, _, scheduled, _ = compiler._lower(mod, target, cutlass=True,
                                               tf32=precision == "tf32")
    library = tmp_path / f"{onnx_path.stem}-{precision}-b{batch}.so"
    tvm.compile(lowered, target=target, relax_pipeline=None).export_library(
        str(library), addons=[str(cutlass_build.build_reference_object())])
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(library)), tvm.cpu())
    args = [tvm.runtime.tensor(x)] + [tvm.runtime.tensor(w) for w in imported.weights]
    return vm["main"](*args).numpy(), (scheduled[3], *fused), onnx_model.notes


def test_offloaded_convolutions_compute_what_onnxruntime_does(tmp_path):
    src = conv_mix_model(tmp_path / "conv_mix.onnx")
    x = np.random.default_rng(1).standard_normal((2, 3, 13, 11)).astype(np.float32)
    y, offloaded, notes = run_offloaded_on_cpu(src, x, tmp_path)
    # every one with its bias in the epilogue; c1 with its ReLU too, c2 with the residual
    assert offloaded == (5, 5, 1)
    assert any("cutlass: 5 convolutions" in n and "1 of them with zero input channels" in n
               and "2 left to TVM" in n for n in notes), notes
    assert max_relative_error(y, onnx_reference(src, [x])[0]) < 1e-5


def test_a_transposed_convolution_between_offloaded_ones_keeps_nchw(tmp_path):
    """A decoder's upsampling (an OCR detector's, a U-Net's) after a CUTLASS convolution: TVM's
    layout conversion gave it NHWC from the conv before, which TVM cannot lower ("CodeGenVM
    cannot emit this Relax operator"), so the CUDA compile failed (stop 76's sweep)."""
    rng = np.random.default_rng(5)
    inits, nodes = [], []
    a = _conv("c1", "x", 8, 16, (3, 3), rng, inits, nodes, pads=[1, 1, 1, 1])
    nodes.append(helper.make_node("Relu", [a], ["a"]))
    inits.append(numpy_helper.from_array(
        0.2 * rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "up_w"))
    nodes.append(helper.make_node("ConvTranspose", ["a", "up_w"], ["up"], strides=[2, 2],
                                  pads=[1, 1, 1, 1], output_padding=[1, 1]))
    _conv("y", "up", 8, 8, (3, 3), rng, inits, nodes, pads=[1, 1, 1, 1])
    src = _save(tmp_path / "decoder.onnx", "decoder", nodes, inits, [8, 5, 6], [8, 10, 12])
    x = rng.standard_normal((2, 8, 5, 6)).astype(np.float32)
    y, offloaded, _ = run_offloaded_on_cpu(src, x, tmp_path)
    assert offloaded[0] == 2
    assert max_relative_error(y, onnx_reference(src, [x])[0]) < 1e-5


def test_a_classifier_squeezing_its_last_axes_keeps_cutlass(tmp_path):
    """PyTorch's `x.squeeze(-1).squeeze(-1)` after a global pool: TVM's conversion to NHWC
    aborted on the negative axis ("std::bad_alloc", as on the CPU before its own fix), and
    every convolution of the model was left to TVM (Silero VAD's squeeze said so too)."""
    rng = np.random.default_rng(11)
    inits, nodes = [], []
    _conv("c", "x", 4, 8, (3, 3), rng, inits, nodes, pads=[1, 1, 1, 1])
    inits.append(numpy_helper.from_array(np.array([-1], np.int64), "last"))
    nodes += [helper.make_node("GlobalAveragePool", ["c"], ["g"]),
              helper.make_node("Squeeze", ["g", "last"], ["s"]),
              helper.make_node("Squeeze", ["s", "last"], ["y"])]
    src = _save(tmp_path / "squeezed.onnx", "squeezed", nodes, inits, [4, 6, 6], [8])
    x = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    y, offloaded, notes = run_offloaded_on_cpu(src, x, tmp_path)
    assert offloaded[0] == 1
    assert any(n.startswith("cutlass: 1 convolution as CUTLASS") for n in notes), notes
    assert max_relative_error(y, onnx_reference(src, [x])[0]) < 1e-5


def epilogue_model(path):
    """Convolutions whose epilogue CUTLASS may or may not take: c1 (bias, ReLU: both), c2 (no
    bias, then a residual add: nothing), c3 (a bias added by hand, but the conv's own output is
    also used elsewhere: nothing), c4 (a bias, then ReLU, whose input is also used elsewhere:
    the bias alone), c5 (bias, residual, ReLU: all three), c6 (bias, then a residual added on
    the left, whose sum is also used elsewhere: bias and residual), c7 (bias, then a residual,
    but the biased output is also used elsewhere: the bias alone)."""
    rng = np.random.default_rng(3)
    inits, nodes = [], []
    a = _conv("c1", "x", 4, 8, (3, 3), rng, inits, nodes, pads=[1, 1, 1, 1])
    nodes.append(helper.make_node("Relu", [a], ["a"]))
    w2 = rng.standard_normal((8, 8, 1, 1)).astype(np.float32) * 0.2
    inits.append(numpy_helper.from_array(w2, "c2_w"))
    nodes.append(helper.make_node("Conv", ["a", "c2_w"], ["c2"], kernel_shape=[1, 1]))
    nodes.append(helper.make_node("Add", ["c2", "a"], ["b"]))
    inits.append(numpy_helper.from_array(w2 * 0.5, "c3_w"))
    inits.append(numpy_helper.from_array(rng.standard_normal((1, 8, 1, 1)).astype(np.float32),
                                         "c3_b"))
    nodes.append(helper.make_node("Conv", ["b", "c3_w"], ["c3"], kernel_shape=[1, 1]))
    nodes.append(helper.make_node("Add", ["c3", "c3_b"], ["c3b"]))
    nodes.append(helper.make_node("Mul", ["c3", "c3b"], ["c"]))
    d = _conv("c4", "c", 8, 8, (3, 3), rng, inits, nodes, pads=[1, 1, 1, 1])
    nodes.append(helper.make_node("Relu", [d], ["dr"]))
    nodes.append(helper.make_node("Add", ["dr", d], ["y4"]))
    e = _conv("c5", "y4", 8, 8, (3, 3), rng, inits, nodes, pads=[1, 1, 1, 1])
    nodes.append(helper.make_node("Add", [e, "y4"], ["e"]))
    nodes.append(helper.make_node("Relu", ["e"], ["er"]))
    f = _conv("c6", "er", 8, 8, (1, 1), rng, inits, nodes)
    nodes.append(helper.make_node("Add", ["er", f], ["f"]))
    nodes.append(helper.make_node("Relu", ["f"], ["fr"]))
    nodes.append(helper.make_node("Add", ["fr", "f"], ["g"]))
    h = _conv("c7", "g", 8, 8, (1, 1), rng, inits, nodes)
    nodes.append(helper.make_node("Add", [h, "g"], ["h"]))
    nodes.append(helper.make_node("Mul", [h, "h"], ["y"]))
    return _save(path, "epilogues", nodes, inits, [4, 6, 5], [8, 6, 5])


def test_epilogues_take_what_nothing_else_reads_bias_residual_relu(tmp_path):
    src = epilogue_model(tmp_path / "epilogues.onnx")
    config = CompileConfig(target="cuda", conv_algo="cutlass", batch_sizes=(2,))
    onnx_model, imported, _ = import_graph(src, config)
    mod = bind_batch(imported.mod, onnx_model, 2)
    groups = cutlass_conv.epilogues(mod["main"])
    # (residual?, relu?, bindings absorbed) of c1, c4, c5, c6, c7
    taken = sorted((g.residual is not None, g.relu, len(g.absorbed)) for g in groups.values())
    assert taken == [(False, False, 1), (False, False, 1), (False, True, 2), (True, False, 2),
                     (True, True, 3)]
    offloaded, n = cutlass_conv.offload(mod, 132)
    assert (n, cutlass_conv.count_fused(offloaded), cutlass_conv.count_residual(offloaded)) == \
        (7, 5, 2)
    # and it computes what onnxruntime does, with the reference functions
    x = np.random.default_rng(4).standard_normal((2, 4, 6, 5)).astype(np.float32)
    for precision, bound in (("fp32", 1e-5), ("tf32", verify_tolerance("tf32"))):
        y, counts, _ = run_offloaded_on_cpu(src, x, tmp_path, precision)
        assert counts == (7, 5, 2)
        assert max_relative_error(y, onnx_reference(src, [x])[0]) < bound, precision


def test_offloaded_resnet18_computes_what_onnxruntime_does(zoo_onnx, tmp_path):
    src = zoo_onnx("resnet18")
    x = np.random.default_rng(2).standard_normal((1, 3, 224, 224)).astype(np.float32)
    ref = onnx_reference(src, [x])[0]
    y, offloaded, _ = run_offloaded_on_cpu(src, x, tmp_path)
    # all 20, the stem's on its 3 channels padded to 4, each with its bias; each of the 8
    # blocks' last (or, where it downsamples, the first of the two summed) with the residual
    # and the ReLU
    assert offloaded == (20, 20, 8)
    fp32_error = max_relative_error(y, ref)
    assert fp32_error < 1e-5
    # --precision tf32: the same convolutions with operands rounded as the tensor cores round
    # them; within the reduced-precision tolerance, and really rounded (far from fp32's error)
    y32, offloaded, notes = run_offloaded_on_cpu(src, x, tmp_path, precision="tf32")
    assert offloaded == (20, 20, 8) and any("precision tf32" in n for n in notes), notes
    assert any("20 convolutions as CUTLASS implicit GEMMs (TF32 tensor-core" in n
               for n in notes), notes
    tf32_error = max_relative_error(y32, ref)
    assert 30 * fp32_error < tf32_error < verify_tolerance("tf32"), (fp32_error, tf32_error)


def test_the_tf32_function_rounds_operands_to_ten_bits_of_mantissa(tmp_path):
    """The reference TF32 function rounds as sm_90's cvt.rn.tf32.f32 does: to nearest, ties to
    even; the 3xTF32 one keeps fp32."""
    tvm = load_tvm()
    lib = tmp_path / "ref.so"
    subprocess.run(["g++", "-shared", "-o", str(lib), str(cutlass_build.build_reference_object())],
                   check=True)
    module = tvm.runtime.load_module(str(lib))
    ulp = 2.0 ** -10  # TF32's, at 1.0
    values = [1 + ulp / 4,        # under half an ulp: down to 1
              1 + ulp * 3 / 4,    # over half: up to 1 + ulp
              1 + ulp / 2,        # a tie, 1 even: stays 1
              1 + ulp * 3 / 2]    # a tie, 1 + ulp odd: up to 1 + 2 ulp
    rounded = [1.0, 1 + ulp, 1.0, 1 + 2 * ulp]
    x = np.array(values, np.float32).reshape(1, 1, 1, 4)
    params = tvm.runtime.ShapeTuple([0, 1, 0, 0, 1, 1, 1, 1])
    for k in range(4):  # output channel k reads input channel k alone, times 1
        w = np.zeros((4, 1, 1, 4), np.float32)
        w[:, 0, 0, :] = np.eye(4)
        outputs = {}
        for symbol in (cutlass_conv.SYMBOL, cutlass_conv.SYMBOL_TF32):
            y = tvm.runtime.tensor(np.zeros((1, 1, 1, 4), np.float32))
            module[symbol](tvm.runtime.tensor(x), tvm.runtime.tensor(w), params, y,
                           tvm.runtime.tensor(np.zeros(1, np.int32)))
            outputs[symbol] = y.numpy().ravel()
        assert outputs[cutlass_conv.SYMBOL][k] == np.float32(values[k])
        assert outputs[cutlass_conv.SYMBOL_TF32][k] == np.float32(rounded[k])


def test_the_function_checks_its_arguments(tmp_path):
    """The checks shared by the CUDA and the reference build: one clear error, not a crash."""
    tvm = load_tvm()
    lib = tmp_path / "ref.so"
    subprocess.run(["g++", "-shared", "-o", str(lib), str(cutlass_build.build_reference_object())],
                   check=True)
    conv = tvm.runtime.load_module(str(lib))[cutlass_conv.SYMBOL]

    def tensor(shape, dtype="float32"):
        return tvm.runtime.tensor(np.zeros(shape, dtype))

    params = tvm.runtime.ShapeTuple([0, 1, 1, 1, 1, 1, 1, 1])
    ok = (tensor((1, 5, 5, 8)), tensor((4, 3, 3, 8)), params, tensor((1, 5, 5, 4)),
          tensor((1,), "int32"))
    conv(*ok)
    with pytest.raises(Exception, match="multiples of 4"):
        conv(tensor((1, 5, 5, 6)), tensor((4, 3, 3, 6)), params, tensor((1, 5, 5, 4)),
             tensor((1,), "int32"))
    with pytest.raises(Exception, match="shapes disagree"):
        conv(ok[0], ok[1], params, tensor((1, 5, 5, 8)), ok[4])
    with pytest.raises(Exception, match="expected 8 parameters"):
        conv(ok[0], ok[1], tvm.runtime.ShapeTuple([0, 1]), ok[3], ok[4])
    with pytest.raises(Exception, match="float32"):
        conv(tensor((1, 5, 5, 8), "float16"), ok[1], params, ok[3], ok[4])
    biased = tvm.runtime.load_module(str(lib))[cutlass_conv.SYMBOL_BIAS]
    relu = tvm.runtime.ShapeTuple([0, 1, 1, 1, 1, 1, 1, 1, 1])
    biased(ok[0], ok[1], tensor((1, 1, 1, 4)), relu, ok[3], ok[4])
    with pytest.raises(Exception, match="bias has 8 values for 4 output channels"):
        biased(ok[0], ok[1], tensor((8,)), relu, ok[3], ok[4])
    with pytest.raises(Exception, match="expected 9 parameters"):
        biased(ok[0], ok[1], tensor((4,)), params, ok[3], ok[4])
    residual = tvm.runtime.load_module(str(lib))[cutlass_conv.SYMBOL_RESIDUAL]
    residual(ok[0], ok[1], tensor((4,)), tensor((1, 5, 5, 4)), relu, ok[3], ok[4])
    with pytest.raises(Exception, match=r"residual \(1, 5, 4, 4\) is not shaped like y"):
        residual(ok[0], ok[1], tensor((4,)), tensor((1, 5, 4, 4)), relu, ok[3], ok[4])


def test_bad_combinations_are_refused_with_a_hint(cli, zoo_onnx, tmp_path):
    cuda = {"target": "cuda"}
    # --precision tf32 means CUTLASS's convolutions: CUDA, sm_80+, no other algorithm
    for fields, match in [({"conv_algo": "cutlass"}, "CUDA bundles"),
                          ({**cuda, "conv_algo": "cutlass", "precision": "fp16"}, "not fp16"),
                          ({**cuda, "conv_algo": "cutlass", "arch": "sm_75"}, "sm_80 or newer"),
                          ({"precision": "tf32"}, "tf32 applies to CUDA bundles"),
                          ({**cuda, "precision": "tf32", "arch": "sm_75"},
                           "--precision tf32 needs sm_80 or newer"),
                          ({**cuda, "precision": "tf32", "conv_algo": "winograd2"},
                           "not winograd2")]:
        with pytest.raises(UsageError, match=match):
            CompileConfig(**fields)
    assert CompileConfig(**cuda, precision="tf32").conv_algo == "cutlass"
    r = cli("compile", zoo_onnx("small_cnn"), "-o", tmp_path / "x", "--conv-algo", "cutlass")
    assert r.code == 2 and "--target cuda" in r.err and not (tmp_path / "x").exists()
    r = cli("compile", zoo_onnx("small_cnn"), "-o", tmp_path / "x", "--precision", "tf32")
    assert r.code == 2 and "--target cuda" in r.err and not (tmp_path / "x").exists()


def test_cutlass_is_the_default_where_it_runs():
    """--conv-algo auto: CUTLASS for CUDA fp32 (and tf32) on sm_80+, cw's own kernels for
    fp16, older GPUs and the CPU; an explicit choice stays as given."""
    def algo(**fields):
        return CompileConfig(**fields).conv_algo

    assert compiler.DEFAULT_CONV_ALGO == "auto"
    assert algo(target="cuda") == "cutlass"  # sm_90, cw's default arch
    assert algo(target="cuda", arch="sm_80") == algo(target="cuda", arch="sm_120a") == "cutlass"
    assert algo(target="cuda", arch="sm_75") == "direct"
    assert algo(target="cuda", arch="sm_86", precision="fp16") == "direct"
    assert algo(target="cuda", precision="tf32") == "cutlass"
    assert algo() == algo(target="cpu") == "direct"
    assert algo(target="cuda", conv_algo="direct") == "direct"
    assert algo(target="cuda", conv_algo="winograd2") == "winograd2"
    with pytest.raises(UsageError, match="unknown CUDA --arch"):  # auto or not
        CompileConfig(target="cuda", arch="90")


def test_a_model_without_convolutions_links_no_cutlass(zoo_onnx, tmp_path):
    problem = cuda_codegen_problem()
    if problem:
        pytest.skip(f"no CUDA compile here: {problem}")
    m = compile_model(zoo_onnx("mlp"), tmp_path / "mlp", CompileConfig(target="cuda",
                                                                       batch_sizes=(1,)))
    assert not any("cutlass" in n for n in m.notes), m.notes
    linked = subprocess.run(["readelf", "-dW", "--dyn-syms",
                             str(tmp_path / "mlp" / m.kernels[0].kernel_file)],
                            capture_output=True, text=True, check=True).stdout
    assert cutlass_conv.SYMBOL not in linked and "libcudart" not in linked


def test_plan_fills_the_gpu_with_the_largest_tile_or_splits_the_reduction():
    sms = 132
    # batch 16 at 56x56, 64 channels: 392 x 1 blocks of 128 x 128 already fill it
    assert cutlass_conv.plan(16 * 56 * 56, 64, 64 * 9, sms) == (0, 1)
    # batch 1 at 28x28, 128 channels: 7 x 1 / 7 x 2 / 13 x 2 blocks; the 64 x 64 tile split 4
    assert cutlass_conv.plan(28 * 28, 128, 128 * 9, sms) == (2, 4)
    # batch 1 at 7x7, 512 channels: 8 blocks, split 16 (4,608 products: 288 per slice)
    assert cutlass_conv.plan(49, 512, 512 * 9, sms) == (2, 16)
    # a short reduction is not split below MIN_SLICE products per slice
    assert cutlass_conv.plan(49, 512, 256, sms) == (2, 1)
    assert cutlass_conv.workspace_ints(49, 512, 2, 16) == 8
    assert cutlass_conv.workspace_ints(49, 512, 2, 1) == 1


def _cutlass_calls(mod):
    """[(conv_key, params, workspace ints)] of the CUTLASS calls in `main`, in order."""
    from tvm import relax

    calls = []

    def visit(expr):
        key = cutlass_conv._call_key(expr)
        if key is not None:
            calls.append((key, [int(v) for v in expr.args[1][-1].values],
                          int(expr.ty.fields[1].shape[0])))

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return calls


def test_measured_plans_replace_the_guess(zoo_onnx):
    config = CompileConfig(target="cuda", conv_algo="cutlass", batch_sizes=(1,))
    onnx_model, imported, _ = import_graph(zoo_onnx("late_cnn"), config)
    mod = bind_batch(imported.mod, onnx_model, 1)
    guessed = _cutlass_calls(cutlass_conv.offload(mod, 132)[0])
    # 7x7, 64x64 tiles: the reduction split in 2 (576 products) and 8 (2,304)
    assert [params[:2] for _, params, _ in guessed] == [[2, 2], [2, 8]]
    plans = cutlass_plans.Plans({guessed[1][0]: (1, 2)})  # measured: 128x64, split 2
    offloaded = cutlass_conv.offload(mod, 132, plans=plans)[0]
    calls = _cutlass_calls(offloaded)
    assert calls[0] == guessed[0]  # no plan: the guess
    assert calls[1][1] == [1, 2] + guessed[1][1][2:]
    # the split-K workspace follows: one semaphore per 128x64 tile of 49 pixels x 256 channels
    assert calls[1][2] == cutlass_conv.workspace_ints(49, 256, 1, 2) == 4
    assert cutlass_conv.count_measured(offloaded, plans) == 1
    assert cutlass_conv.count_measured(cutlass_conv.offload(mod, 132)[0], plans) == 0
    # a TF32 plan does not apply to the 3xTF32 kernels (nor the other way round)
    tf32_only = cutlass_plans.Plans({guessed[1][0].replace("3xtf32", "tf32"): (1, 2)})
    assert _cutlass_calls(cutlass_conv.offload(mod, 132, plans=tf32_only)[0]) == guessed


@pytest.mark.slow
def test_cuda_bundle_links_the_cutlass_kernels(zoo_onnx, tmp_path):
    problem = cuda_codegen_problem()
    if problem:
        pytest.skip(f"no CUDA compile here: {problem}")
    src = zoo_onnx("late_cnn")
    # measured plans in a --tune-db directory (late_cnn's first conv at batch 1): the compile
    # applies them and says so. CUTLASS is the default for CUDA on sm_80+ (--arch defaults to
    # sm_90)
    key = cutlass_conv.conv_key([1, 7, 7, 64], [256, 3, 3, 64], [1, 1], [1, 1], [1, 1], False)
    cutlass_plans.write(tmp_path / "plans" / cutlass_plans.FILE, {
        "schema": 1, "arch": "sm_90", "plans": [{"key": key, "tile": 1, "split": 2}]})
    m = compile_model(src, tmp_path / "cutlass", CompileConfig(
        target="cuda", batch_sizes=(1, 16), tune_dbs=(str(tmp_path / "plans"),)))
    # (batch 1 is enough to tell TVM's conv kernels from CUTLASS's)
    compile_model(src, tmp_path / "direct", CompileConfig(target="cuda", batch_sizes=(1,),
                                                          conv_algo="direct"))
    assert any("cutlass: 2 convolutions" in n for n in m.notes), m.notes
    assert any("cutlass: 1 of 4 convolution calls (over the batch sizes) take the tile and "
               f"split measured in {tmp_path / 'plans' / cutlass_plans.FILE}" in n
               for n in m.notes), m.notes

    def dynamic(bundle, kernel):
        return subprocess.run(["readelf", "-dW", "--dyn-syms", str(tmp_path / bundle / kernel)],
                              capture_output=True, text=True, check=True).stdout

    for k in m.kernels:
        check_device_binary(tmp_path / "cutlass" / k.kernel_file, "late_cnn")
        linked = dynamic("cutlass", k.kernel_file)
        assert "libcudart.so.13" in linked  # TVM's CUDA runtime has it loaded
        for symbol in cutlass_conv.SYMBOLS[::2]:  # the 3xTF32 object: plain, bias, residual
            assert f"__tvm_ffi_{symbol}" in linked
        # both convs are CUTLASS's: no TVM conv kernel is left (the direct bundle has them)
        names = linked
        for symbol in cutlass_conv.SYMBOLS:
            names = names.replace(symbol, "")
        assert "conv2d" not in names, k.kernel_file
    assert "conv2d" in dynamic("direct", m.kernels[0].kernel_file)
    # NHWC filters in the bundle: OHWI
    shapes = [tuple(t.shape) for t in m.weights.tensors]
    assert (256, 3, 3, 64) in shapes and (256, 3, 3, 256) in shapes
    # --precision tf32 links the TF32 function alone (--untuned: the committed plans cover the
    # zoo's CNNs, not late_cnn, and would only be named with none taken)
    t = compile_model(src, tmp_path / "tf32",
                      CompileConfig(target="cuda", batch_sizes=(1,), precision="tf32",
                                    use_committed_records=False))
    assert t.target.precision == "tf32" and any("precision tf32" in n for n in t.notes)
    linked = dynamic("tf32", t.kernels[0].kernel_file)
    assert f"__tvm_ffi_{cutlass_conv.SYMBOL_TF32}" in linked
    assert f"__tvm_ffi_{cutlass_conv.SYMBOL}" not in linked  # (not a prefix of the TF32 one)
    assert any("tiles and splits guessed from the GPU's SM count" in n for n in t.notes)


def test_coverage_counts_the_calls_a_compile_would_give_measured_plans(zoo_onnx):
    """What `cw compile` would look up, without compiling: late_cnn's two convolutions, one of
    them with a measured plan (in 3xTF32 only)."""
    config = CompileConfig(target="cuda", conv_algo="cutlass", batch_sizes=(1,))
    onnx_model, imported, _ = import_graph(zoo_onnx("late_cnn"), config)
    guessed = _cutlass_calls(cutlass_conv.offload(bind_batch(imported.mod, onnx_model, 1),
                                                  cutlass_conv_sms())[0])
    plans = cutlass_plans.Plans({guessed[1][0]: (1, 2)})
    assert cutlass_plans.coverage(zoo_onnx("late_cnn"), [1, 4], "sm_90", plans=plans) == \
        {1: (1, 2), 4: (0, 2)}  # batch 4's convolutions are other shapes
    assert cutlass_plans.coverage(zoo_onnx("late_cnn"), [1], "sm_90", tf32=True,
                                  plans=plans) == {1: (0, 2)}


def cutlass_conv_sms() -> int:
    from cw.compile import cuda_conv

    return cuda_conv.sm_count("sm_90")


def _committed_plans():
    from cw.compile import tuning

    for path in sorted(tuning.COMMITTED_DIR.glob(f"cuda-*/{cutlass_plans.FILE}")):
        yield pytest.param(path, id=path.parent.name)


@pytest.mark.slow
@pytest.mark.parametrize("plan_file", list(_committed_plans()))
def test_compile_picks_up_the_committed_cutlass_plans(plan_file, zoo_onnx, tmp_path):
    """Issue 7: every zoo model and batch size the committed plans cover (their `covers`,
    written by `bench/cutlass_convs.py ingest`) compiles with every CUTLASS convolution on a
    measured tile and split, with no flag and no GPU: checked on the offload `cw compile` runs,
    in both maths, and, where this machine compiles CUDA, by a real compile's note."""
    doc = cutlass_plans.read(plan_file)
    arch = doc["arch"]
    assert plan_file.parent.name == f"cuda-{arch}"
    assert doc.get("covers"), f"{plan_file} covers no model: ingest a whole run's times"
    for name, sizes in doc["covers"].items():
        for tf32 in (False, True):
            found = cutlass_plans.coverage(zoo_onnx(name), sizes, arch, tf32)
            assert all(measured == calls > 0 for measured, calls in found.values()), \
                (name, "tf32" if tf32 else "3xtf32", found)
    if cuda_codegen_problem():
        return  # the offload above is what decides; no nvcc here to build the rest
    name, sizes = min(doc["covers"].items(), key=lambda item: item[0] != "resnet18")
    m = compile_model(zoo_onnx(name), tmp_path / name,
                      CompileConfig(target="cuda", arch=arch, batch_sizes=(sizes[0],)))
    calls = [n for n in m.notes if "convolution calls (over the batch sizes)" in n]
    assert len(calls) == 1 and calls[0].endswith(
        f"take the tile and split measured in cw/tuning/{plan_file.parent.name}/"
        f"{cutlass_plans.FILE}"), m.notes
    measured, total = (int(v) for v in calls[0].split()[1:4:2])
    assert measured == total > 0, calls[0]
