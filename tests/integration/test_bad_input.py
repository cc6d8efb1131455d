"""Every bad input gets one clear error line, a non-zero exit code, and nothing written."""

import json
import shutil
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import random_input


def _model(path, nodes, inputs, initializers=(), outputs=None):
    outputs = outputs or [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _one_error_line(result):
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert result.code != 0
    assert len(lines) == 1, result.err
    assert lines[0].startswith("error:")
    assert "Traceback" not in result.err
    return lines[0]


def _nothing_written(parent, name="out"):
    assert not (parent / name).exists()
    assert not [p for p in parent.iterdir() if p.name.startswith(f".{name}.")]


def test_not_an_onnx_file(cli, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not a protobuf \x00\xff" * 10)
    line = _one_error_line(cli("compile", bad, "-o", tmp_path / "out"))
    assert "is not an ONNX model" in line
    _nothing_written(tmp_path)


def test_unsupported_operator_names_op_and_node(cli, tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    path = _model(tmp_path / "m.onnx", [helper.make_node("FrobnicateFast", ["x"], ["y"],
                                                          name="frob_1")], [x])
    line = _one_error_line(cli("compile", path, "-o", tmp_path / "out"))
    assert "FrobnicateFast" in line and "frob_1" in line
    _nothing_written(tmp_path)


def test_control_flow_on_values_is_refused(cli, tmp_path):
    """(An If whose condition is a constant or a shape compiles to its branch since stop 69:
    tests/integration/test_normalize.py.)"""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["z"])], "b", [],
                               [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
             helper.make_node("Greater", ["m", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], name="if_1", then_branch=branch,
                              else_branch=branch)]
    path = _model(tmp_path / "m.onnx", nodes, [x], [zero])
    line = _one_error_line(cli("compile", path, "-o", tmp_path / "out"))
    assert "If 'if_1'" in line and "it reads the values of input 'x'" in line, line
    assert "data-dependent execution time" in line and "cw schedules only static DNNs" in line


def test_dynamic_non_batch_dimension_names_it_and_shows_option(cli, tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "height", 8])
    path = _model(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"])], [x])
    line = _one_error_line(cli("compile", path, "-o", tmp_path / "out"))
    assert "'height'" in line and "--input-shape x=N,SIZE,8" in line
    _nothing_written(tmp_path)
    # and the option does fix it
    r = cli("compile", path, "-o", tmp_path / "out", "--input-shape", "x=N,5,8",
            "--batch-sizes", "1,2")
    assert r.code == 0, r.err


def test_tensor_larger_than_a_page(cli, tmp_path):
    """A large weight added to the input (not a table cw splits into blocks: an embedding's
    or a matrix product's)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1024, 600])
    w = numpy_helper.from_array(np.ones((1024, 600), np.float32), "big.weight")
    path = _model(tmp_path / "m.onnx", [helper.make_node("Add", ["x", "big.weight"], ["y"])],
                  [x], [w])
    line = _one_error_line(cli("compile", path, "-o", tmp_path / "out", "--page-size", "1MiB"))
    assert "big.weight" in line and "--page-size 4MiB" in line
    _nothing_written(tmp_path)


def test_an_output_without_a_batch_axis(cli, tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])
    path = _model(tmp_path / "m.onnx", [helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)],
                  [x])
    line = _one_error_line(cli("compile", path, "-o", tmp_path / "out", "--batch-sizes", "1"))
    assert "output 0 ('y') has no dimension (a scalar) at batch size 1" in line
    _nothing_written(tmp_path)


def test_an_output_that_does_not_follow_the_batch(cli, tmp_path):
    """A second output computed from constants only ([3] whatever the batch)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [3])
    one = numpy_helper.from_array(np.ones(3, np.float32), "one")
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Add", ["one", "one"],
                                                                       ["z"])]
    graph = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, ["N", 8]), z], [one])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "m.onnx")
    line = _one_error_line(cli("compile", tmp_path / "m.onnx", "-o", tmp_path / "out"))
    assert "output 1 ('z') has shape [3] at batch size 1: it does not follow the batch" in line
    _nothing_written(tmp_path)


def test_unknown_zoo_name_lists_valid_ones(cli, tmp_path):
    line = _one_error_line(cli("zoo", "export", "alexnet", "-o", tmp_path / "a.onnx"))
    assert "alexnet" in line and "resnet50" in line and "mlp" in line
    assert not (tmp_path / "a.onnx").exists()


def test_output_exists_without_force(cli, zoo_onnx, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    line = _one_error_line(cli("compile", zoo_onnx("mlp"), "-o", out))
    assert "already exists" in line and "--force" in line
    assert (out / "precious.txt").read_text() == "keep me"
    line = _one_error_line(cli("zoo", "export", "mlp", "-o", out / "precious.txt"))
    assert "already exists" in line
    assert (out / "precious.txt").read_text() == "keep me"


def test_unwritable_output(cli, zoo_onnx, tmp_path):
    blocker = tmp_path / "file.txt"
    blocker.write_text("")
    line = _one_error_line(cli("compile", zoo_onnx("mlp"), "-o", blocker / "bundle"))
    assert line == f"error: cannot write to {blocker}: it is a file, not a folder (choose a " \
        "writable output directory with -o)"
    line = _one_error_line(cli("zoo", "export", "mlp", "-o", blocker / "m.onnx"))
    assert line == f"error: cannot write to {blocker / 'm.onnx'}: {blocker} is a file, not a " \
        "folder (choose a writable output file with -o)"
    assert [p.name for p in tmp_path.iterdir()] == ["file.txt"]  # no temporary left behind
    for serve in (["serve", "controller"], ["serve", "--runtime", "simulated"]):
        result = cli(*serve, "--workers-listen", "tcp://127.0.0.1:*", "--clients-listen",
                     "tcp://127.0.0.1:*", "--log-dir", blocker / "logs")
        assert _one_error_line(result) == f"error: cannot write to {blocker / 'logs'}: " \
            f"{blocker} is a file, not a folder (choose a writable output directory with " \
            "--log-dir)"
        assert result.code == 2


@pytest.fixture
def broken_bundle(cpu_bundle, tmp_path):
    def make(how: str):
        path = tmp_path / how
        shutil.copytree(cpu_bundle("mlp"), path)
        if how == "missing":
            (path / "kernels" / "batch4.so").unlink()
        elif how == "corrupted":
            data = bytearray((path / "weights.bin").read_bytes())
            data[100] ^= 0xFF
            (path / "weights.bin").write_bytes(bytes(data))
        elif how == "no-manifest":
            (path / "manifest.json").unlink()
        return path
    return make


@pytest.mark.parametrize("how,expected", [("missing", "batch4.so is missing"),
                                          ("corrupted", "checksum mismatch in weights.bin"),
                                          ("no-manifest", "manifest.json is missing")])
def test_broken_bundle_to_inspect_and_run(cli, broken_bundle, tmp_path, how, expected):
    path = broken_bundle(how)
    assert expected in _one_error_line(cli("inspect", path))
    np.save(tmp_path / "x.npy", random_input((1, 64)))
    assert expected in _one_error_line(cli("run", path, "--input", tmp_path / "x.npy"))


def test_a_manifest_whose_name_is_no_model_name_is_refused(cli, cpu_bundle, tmp_path):
    """A copy's id is `name#k` and names go unquoted into metrics labels: a hand-edited
    manifest must not smuggle in a name that `cw compile --name` refuses."""
    path = tmp_path / "renamed"
    shutil.copytree(cpu_bundle("mlp"), path)
    manifest = path / "manifest.json"
    raw = json.loads(manifest.read_text())
    raw["name"] = 'm"lp#2'
    manifest.write_text(json.dumps(raw))
    assert "is not a valid model name" in _one_error_line(cli("inspect", path))


def test_model_names_made_from_file_names_are_valid():
    from cw.bundle import check_model_name, model_name_from

    for stem, expected in [("resnet50-v1.7", "resnet50-v1.7"), ("my model (2)", "my-model--2-"),
                           ("_private", "private"), ("???", "model")]:
        assert check_model_name(model_name_from(stem), "test") == expected


def test_wrong_input_shape_or_dtype(cli, cpu_bundle, tmp_path):
    bundle = cpu_bundle("mlp")
    np.save(tmp_path / "shape.npy", random_input((2, 63)))
    line = _one_error_line(cli("run", bundle, "--input", tmp_path / "shape.npy"))
    assert "[2, 63]" in line and "[B, 64]" in line
    np.save(tmp_path / "dtype.npy", np.zeros((2, 64), np.float64))
    line = _one_error_line(cli("run", bundle, "--input", tmp_path / "dtype.npy",
                               "-o", tmp_path / "y.npy"))
    assert "float64" in line and "float32" in line
    assert not (tmp_path / "y.npy").exists()
    (tmp_path / "text.npy").write_text("hello")  # np.load would call it a pickle
    line = _one_error_line(cli("run", bundle, "--input", tmp_path / "text.npy"))
    assert "is not an .npy or .npz file" in line
    # an .npz: one array for the one input, whatever its name; several must be named
    np.savez(tmp_path / "one.npz", x=random_input((2, 64)))
    assert cli("run", bundle, "--input", tmp_path / "one.npz").code == 0
    np.savez(tmp_path / "two.npz", x=random_input((2, 64)), y=random_input((2, 64)))
    line = _one_error_line(cli("run", bundle, "--input", tmp_path / "two.npz"))
    assert line == ("error: two.npz lacks input 'input' of model 'mlp' (it holds 'x', 'y') "
                    "(name its arrays after the inputs: numpy.savez(FILE, input=...))"), line


def test_output_file_names_a_format_cw_writes(cli, cpu_bundle, tmp_path):
    bundle = cpu_bundle("mlp")
    np.save(tmp_path / "x.npy", random_input((1, 64)))
    for name, text in [("y.txt", "not '.txt'"), ("y", "not 'no suffix'")]:
        line = _one_error_line(cli("run", bundle, "--input", tmp_path / "x.npy",
                                   "-o", tmp_path / name))
        assert text in line and line.endswith(f"(name it {tmp_path / 'y.npy'})"), line
        assert not (tmp_path / name).exists()
    (tmp_path / "d.npy").mkdir()
    assert "is a directory" in _one_error_line(
        cli("run", bundle, "--input", tmp_path / "x.npy", "-o", tmp_path / "d.npy"))
    assert cli("run", bundle, "--input", tmp_path / "x.npy", "-o", tmp_path / "y.npz").code == 0
    assert np.load(tmp_path / "y.npz")["output"].shape == (1, 10)


def test_import_failure_after_input_shape_is_one_line_naming_the_change(zoo_onnx, tmp_path):
    # A subprocess: TVM's destructor warned on the native stderr after the error line, and the
    # importer printed the failing operator on stdout.
    r = subprocess.run([sys.executable, "-m", "cw", "compile", str(zoo_onnx("mlp")), "-o",
                        str(tmp_path / "out"), "--input-shape", "input=N,65"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 3
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: TVM could not import mlp.onnx (operator Gemm):")
    assert "(--input-shape changed the model's own sizes (input dim 1: 64 → 65)" in lines[0]
    _nothing_written(tmp_path)


def test_cuda_device_refused_for_cpu_bundle_or_without_gpu(cli, cpu_bundle, tmp_path):
    np.save(tmp_path / "x.npy", random_input((1, 64)))
    line = _one_error_line(cli("run", cpu_bundle("mlp"), "--input", tmp_path / "x.npy",
                               "--device", "cuda"))
    assert "compiled for cpu, not cuda" in line


def test_no_gpu_for_cuda_bundle(cli, tmp_path):
    from cw.engine import tvm_device
    from cw.errors import DeviceError
    from cw.tvm_env import load_tvm

    if load_tvm().cuda(0).exist:
        pytest.skip("this machine has a GPU")
    with pytest.raises(DeviceError, match="no CUDA GPU 0"):
        tvm_device("cuda", 0)


def test_bad_flag_values(cli, zoo_onnx, tmp_path):
    for args, text in [(("--batch-sizes", "0,2"), "batch sizes"),
                       (("--page-size", "lots"), "page size"),
                       (("--target", "tpu"), "unknown target"),
                       (("--input-shape", "nope"), "--input-shape"),
                       (("--precision", "tf32"), "tf32 applies to CUDA bundles"),
                       (("--precision", "int8"), "unknown precision"),
                       (("--target", "cuda", "--arch", "sm_5"), "unknown CUDA --arch 'sm_5'"),
                       (("--target", "cuda", "--conv-layout", "nchw"),
                        "--conv-layout nchw applies to CPU bundles"),
                       (("--conv-split", "off"), "--conv-split off applies to CUDA bundles"),
                       (("--name", "../x"), "'../x' is not a valid model name"),
                       (("--name", "a#1"), "'a#1' is not a valid model name")]:
        line = _one_error_line(cli("compile", zoo_onnx("mlp"), "-o", tmp_path / "out", *args))
        assert text in line
    _nothing_written(tmp_path)


def test_error_lines_keep_square_brackets(cli, tmp_path):
    """Paths and hints like `pip install 'cw[gpu]'` must not be eaten as console markup."""
    missing = tmp_path / "trace[2019].csv"
    line = _one_error_line(cli("replay", "--trace", f"azure:{missing}", "--simulate",
                               "--out", tmp_path / "out"))
    assert "trace[2019].csv" in line


def test_live_replay_on_a_gpu_this_machine_lacks_fails_fast(cli, cpu_bundle, tmp_path):
    import time

    from tests.conftest import has_cuda

    if has_cuda():
        pytest.skip("this machine has a GPU")
    models = tmp_path / "models"
    models.mkdir()
    shutil.copytree(cpu_bundle("mlp", (1, 2, 4, 8, 16)), models / "mlp")
    t0 = time.monotonic()
    result = cli("replay", "--trace", "azure", "--runtime", "cuda", "--models", models,
                 "--duration", "5s", "--out", tmp_path / "out")
    # before any process starts, as cw serve says it (a device error, exit 5)
    assert _one_error_line(result) == f"error: bundle {models / 'mlp'} was compiled for cpu, " \
        "not cuda (use --runtime cpu (or simulated), or recompile it with --target cuda)"
    assert result.code == 5
    assert time.monotonic() - t0 < 10
    _nothing_written(tmp_path)
    listen = ["--workers-listen", "tcp://127.0.0.1:*", "--clients-listen", "tcp://127.0.0.1:*"]
    result = cli("serve", "--runtime", "cuda", "--models", models, *listen)
    assert _one_error_line(result) == f"error: bundle {models / 'mlp'} was compiled for cpu, " \
        "not cuda (use --runtime cpu (or simulated), or recompile it with --target cuda)"
    assert result.code == 5
    result = cli("serve", "--runtime", "cuda", *listen)  # the demo set is the CPU's
    assert "--runtime cuda needs --models" in _one_error_line(result) and result.code == 2
    # CUDA bundles on this GPU-less machine: the devices are checked before a process starts
    from cw.errors import CwError
    from cw.serve.launch import local_devices
    with pytest.raises(CwError) as e:
        local_devices("cuda", 1)
    assert "cuda-bindings" in e.value.message or "no CUDA GPU 0" in e.value.message
    assert e.value.exit_code == 5


def test_infer_input_checked_before_reaching_a_controller(cli, tmp_path):
    """A missing or unreadable input is told at once, not after waiting on a controller (none
    listens at this address: the client would wait its 10 s and blame the controller)."""
    import time

    address = "tcp://127.0.0.1:9"
    t0 = time.monotonic()
    line = _one_error_line(cli("infer", "mlp", "--input", tmp_path / "x.npy",
                               "--controller", address))
    assert "no such file" in line and "x.npy" in line
    (tmp_path / "bad.npy").write_text("not numpy")
    line = _one_error_line(cli("infer", "mlp", "--input", tmp_path / "bad.npy",
                               "--controller", address))
    assert "is not an .npy or .npz file" in line
    line = _one_error_line(cli("infer", "mlp", "--input", tmp_path / "bad.npy", "--random",
                               "--controller", address))
    assert "--input and --random both give the input" in line
    line = _one_error_line(cli("infer", "mlp", "--random", "--slo", "soon",
                               "--controller", address))
    assert "--slo" in line
    line = _one_error_line(cli("infer", "mlp", "--random", "--slo", "0ms",
                               "--controller", address))
    assert "--slo 0ms must be positive" in line  # 0 would have meant the default SLO
    assert time.monotonic() - t0 < 8


def test_serve_flags_checked_before_anything_starts(cli, cpu_bundle, tmp_path):
    for args, text in [(("--workers", "0"), "--workers 0 and --copies 1 must each be ≥ 1"),
                       (("--copies", "0"), "--workers 1 and --copies 0 must each be ≥ 1"),
                       (("--metrics-port", "99999"), "--metrics-port 99999 is not a port"),
                       (("--scheduler", "batch-timeout:wait=1ms"),
                        "'batch-timeout' has no setting 'wait'"),
                       (("--scheduler", "clockwork:ahead=2ms", "--schedule-ahead", "3ms"),
                        "--schedule-ahead 3ms and --scheduler clockwork:ahead=2ms both set"),
                       (("--scheduler", "clipper", "--schedule-ahead", "3ms"),
                        "--schedule-ahead applies to the clockwork scheduler; clipper does not")]:
        line = _one_error_line(cli("serve", "--models", tmp_path, "--runtime", "simulated",
                                   "--workers-listen", "tcp://127.0.0.1:*",
                                   "--clients-listen", "tcp://127.0.0.1:*", *args))
        assert text in line, line
    import socket
    with socket.socket() as taken:  # a port another process holds
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        held = f"tcp://127.0.0.1:{taken.getsockname()[1]}"
        line = _one_error_line(cli("serve", "controller", "--workers-listen", "tcp://127.0.0.1:*",
                                   "--clients-listen", held))
    assert line == (f"error: cannot listen on {held}: Address already in use (give "
                    "--clients-listen another port, or stop what holds it: another cw serve, "
                    "perhaps)"), line
    line = _one_error_line(cli("serve", "controller", "--workers-listen", "bogus"))
    assert "cannot listen on bogus" in line and "give --workers-listen an address like" in line
    # ZeroMQ takes a port modulo 65536: 70000 listened on 4464 without a word
    line = _one_error_line(cli("serve", "controller", "--workers-listen", "tcp://127.0.0.1:*",
                               "--clients-listen", "tcp://127.0.0.1:70000"))
    assert "cannot listen on tcp://127.0.0.1:70000: port 70000 is out of range" in line, line
    line = _one_error_line(cli("infer", "--list", "--controller", "tcp://127.0.0.1:65536"))
    assert "cannot connect to tcp://127.0.0.1:65536: port 65536 is out of range" in line, line
    line = _one_error_line(cli("serve", "--models", tmp_path / "typo", "--runtime", "simulated"))
    assert "no such directory" in line and "typo" in line
    line = _one_error_line(cli("serve", "controller", "--scheduler", "fifo:x=1",
                               "--workers-listen", "tcp://127.0.0.1:*",
                               "--clients-listen", "tcp://127.0.0.1:*"))
    assert "'fifo' has no setting 'x'" in line
    line = _one_error_line(cli("serve", "worker", "--models", tmp_path, "--name", 'a"b'))
    assert "'a\"b' is not a valid worker name" in line
    for devices, text in (("cpu,cpu", "names the CPU twice"),
                          ("cuda,cuda:0", "names cuda:0 twice")):
        line = _one_error_line(cli("serve", "worker", "--models", tmp_path, "--device", devices))
        assert f"--device {devices} {text}" in line, line
    # a page cache too small for the largest model would refuse its every LOAD
    import shutil
    shutil.copytree(cpu_bundle("mlp", (1,)), tmp_path / "one" / "mlp")
    line = _one_error_line(cli("serve", "worker", "--models", tmp_path / "one",
                               "--runtime", "simulated", "--page-cache", "1KiB"))
    assert "a page cache of 1.0 KiB on cpu holds 0 page(s) of 16.0 MiB; model 'mlp' needs 1" \
        in line and "--page-cache 16MiB or more" in line, line
    # copies that cannot fit in memory: refused before any bundle is read or process started
    models = tmp_path / "two"
    for name in ("a", "b"):
        (models / name).mkdir(parents=True)
        (models / name / "manifest.json").write_text("not read")
    anywhere = ("--workers-listen", "tcp://127.0.0.1:*", "--clients-listen", "tcp://127.0.0.1:*")
    for args in (("serve", "--workers", "2", *anywhere), ("serve", "worker"),
                 ("replay", "--workers", "2", "--out", tmp_path / "replay-out")):
        line = _one_error_line(cli(*args, "--models", models, "--copies", str(10**12)))
        assert "--copies 1,000,000,000,000 of 2 bundle(s)" in line and "of memory" in line, line
        assert ("on 2 workers" in line) == ("--workers" in args)
    assert not (tmp_path / "replay-out").exists()


def test_a_metrics_port_in_use_is_one_error_and_frees_the_sockets():
    """The controller's sockets are bound before the metrics server: when that fails they are
    closed again (binding them anew succeeds) and the error names the port."""
    import socket

    from cw.errors import UsageError
    from cw.serve.controller import ControllerConfig
    from cw.serve.launch import ControllerThread

    taken = socket.socket()
    taken.bind(("0.0.0.0", 0))
    taken.listen()
    port = taken.getsockname()[1]
    workers, clients = socket.socket(), socket.socket()
    for s in (workers, clients):
        s.bind(("127.0.0.1", 0))
    addresses = [f"tcp://127.0.0.1:{s.getsockname()[1]}" for s in (workers, clients)]
    workers.close()
    clients.close()
    config = ControllerConfig(workers_listen=addresses[0], clients_listen=addresses[1],
                              metrics_port=port)
    try:
        with pytest.raises(UsageError, match=f"cannot serve metrics on port {port}"):
            ControllerThread(config)
        # ZeroMQ lets go of a closed socket's listener in its own thread, a moment later: the
        # ports are free again within a second (they stayed bound for good before the fix)
        deadline = time.monotonic() + 2
        while True:
            try:
                ControllerThread(ControllerConfig(workers_listen=addresses[0],
                                                  clients_listen=addresses[1])).close()
                break
            except UsageError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    finally:
        taken.close()


def test_two_bundles_of_one_name_are_refused_not_merged(cli, cpu_bundle, tmp_path):
    """A bundle folder copied beside the original: one model id, two bundles. It was served
    as one model without a word; now it is one error line, before anything starts."""
    import shutil

    models = tmp_path / "models"
    shutil.copytree(cpu_bundle("mlp", (1,)), models / "mlp")
    shutil.copytree(models / "mlp", models / "mlp-copy")
    for args in (("serve", "--workers-listen", "tcp://127.0.0.1:*",
                  "--clients-listen", "tcp://127.0.0.1:*"), ("serve", "worker")):
        line = _one_error_line(cli(*args, "--models", models, "--runtime", "simulated"))
        assert line.startswith(f"error: bundles {models / 'mlp'} and {models / 'mlp-copy'} are "
                               "both named 'mlp'"), line
        assert "cw compile --name OTHER" in line


def test_tuning_and_demo_flags_checked_before_work_starts(cli, zoo_onnx, tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("not a folder")
    line = _one_error_line(cli("tune", zoo_onnx("mlp"), "--db", a_file))
    assert line.startswith(f"error: --db {a_file} is a file, not a directory"), line
    line = _one_error_line(cli("tune", zoo_onnx("mlp"), "--db", tmp_path / "db",
                               "--num-cores", "0"))
    assert "--num-cores 0 must be at least 1" in line
    line = _one_error_line(cli("tune-stage", zoo_onnx("mlp"), "--kit", a_file,
                               "--db", tmp_path / "db", "--target", "cpu"))
    assert f"{a_file} exists and is not a tuning kit" in line
    assert not (tmp_path / "db").exists()
    line = _one_error_line(cli("demo", "--model", "mlp", "--batch", "5", "--dir",
                               tmp_path / "demo"))
    assert "--batch 5 must be within 1..4 (the largest of --batch-sizes 1,4)" in line
    assert not (tmp_path / "demo").exists()
