"""`cw tune` and tuning databases: a real MetaSchedule search (a few measured candidates per
kernel of the tiny MLP on this CPU), resumption, and `cw compile` applying both a user's
database and the records committed with cw."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cw.compile import cuda_conv, targets, tuning
from cw.compile.compiler import CompileConfig, compile_model
from cw.compile.tuner import TuneConfig, compact, tune_model
from cw.engine import LocalModel
from cw.errors import DeviceError, UsageError
from cw.verify import max_relative_error, onnx_reference

TRIALS = 2


def _lines(path: Path) -> int:
    return sum(1 for line in open(path) if line.strip())


@pytest.fixture(scope="module")
def mlp_db(zoo_onnx, tmp_path_factory):
    db = tmp_path_factory.mktemp("tune") / "mlp-db"
    report = tune_model(zoo_onnx("mlp"), TuneConfig(db=str(db), batch_sizes=(1,), trials=TRIALS))
    return db, report


def test_tune_measures_every_kernel(mlp_db):
    db, report = mlp_db
    assert tuning.is_database(db)
    assert len(report.kernels) == 3  # three fused matmul(+add, +relu) kernels
    for k in report.kernels:
        assert k.trials_before == 0
        assert k.trials_now >= 1 and k.best_us is not None and k.best_us > 0
    assert report.target_key == targets.target_key("cpu", targets.default_cpu_arch())


def test_tune_resumes_without_redoing_work(mlp_db, zoo_onnx):
    db, first = mlp_db
    records = _lines(db / tuning.RECORD_FILE)
    again = tune_model(zoo_onnx("mlp"), TuneConfig(db=str(db), batch_sizes=(1,), trials=TRIALS))
    done = [k for k in first.kernels if k.trials_now >= TRIALS]
    assert done, "no kernel reached its trials in the first run"
    for k in again.kernels:
        if any(d.name == k.name for d in done):
            assert k.trials_before == k.trials_now  # skipped
    if len(done) == len(first.kernels):
        assert _lines(db / tuning.RECORD_FILE) == records


def test_time_budget_stops_before_the_next_kernel(zoo_onnx, tmp_path):
    report = tune_model(zoo_onnx("mlp"), TuneConfig(db=str(tmp_path / "db"), batch_sizes=(4,),
                                                    trials=TRIALS, time_budget_s=1e-9))
    assert report.not_started == len(report.kernels) == 3 and report.short == 0
    assert all(k.trials_now == 0 for k in report.kernels)


def test_compile_applies_a_tuning_database(mlp_db, zoo_onnx, tmp_path, cli):
    db, _ = mlp_db
    onnx_path = zoo_onnx("mlp")
    r = cli("compile", onnx_path, "-o", tmp_path / "b", "--batch-sizes", "1,4", "--tune-db", db)
    assert r.code == 0, r.err
    assert "3/3" in r.out and "0/3" in r.out  # batch 1 tuned, batch 4 never was
    model = LocalModel(tmp_path / "b")
    kernels = {k.batch_size: k for k in model.manifest.kernels}
    assert (kernels[1].kernels_tuned, kernels[1].kernels_total) == (3, 3)
    assert kernels[4].kernels_tuned == 0
    assert str(db.resolve()) in model.manifest.target.tuning
    # half the kernels have records: AVX2 code (the host's level), not plain x86-64
    assert model.manifest.target.arch == targets.default_cpu_arch()
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    assert max_relative_error(model.run([x])[0], onnx_reference(onnx_path, [x])[0]) < 1e-5


def test_untuned_and_generic_targets_ignore_records(mlp_db, zoo_onnx, tmp_path):
    db, _ = mlp_db
    # the database is applied by workload, whatever the target: the user asked for it. Another
    # target of the host's vector width has the same workloads (one of another width packs its
    # weight panels otherwise: x86-64's 8 lanes against AVX-512's 16)
    other = "skylake-avx512" if targets.default_cpu_arch() == "x86-64-v4" else "x86-64"
    m = compile_model(zoo_onnx("mlp"), tmp_path / "g",
                      CompileConfig(batch_sizes=(1,), arch=other, tune_dbs=(str(db),)))
    assert m.target.arch == other
    assert m.kernels[0].kernels_tuned == 3
    m = compile_model(zoo_onnx("mlp"), tmp_path / "u",
                      CompileConfig(batch_sizes=(1,), use_committed_records=False))
    assert m.kernels[0].kernels_tuned == 0 and m.target.tuning == ""
    # cw's schedule of its matrix products runs faster as AVX2 code
    assert m.target.arch == targets.default_cpu_arch()
    m = compile_model(_softmax_only(tmp_path / "s.onnx"), tmp_path / "s",
                      CompileConfig(batch_sizes=(1,), use_committed_records=False))
    if targets.default_cpu_arch() not in (None, targets.GENERIC_CPU):
        # TVM's untuned loops (nothing cw schedules) run faster as plain x86-64 code, and the
        # manifest says why
        assert m.target.arch == targets.GENERIC_CPU
        assert any("cover 0 of" in n and "--arch" in n for n in m.notes), m.notes
    # the same graph large enough for cw's row schedule: vectors of 16, so AVX-512 code (was
    # plain x86-64 until stop 80: a softmax over 12 x 128 rows of 128 took 0.63-0.95 ms, 0.28-0.46)
    m = compile_model(_softmax_only(tmp_path / "r.onnx", (12, 128, 128)), tmp_path / "r",
                      CompileConfig(batch_sizes=(1,), use_committed_records=False))
    assert m.target.arch == targets.default_cpu_arch()
    assert not any("CPU code for" in n for n in m.notes), m.notes
    m = compile_model(zoo_onnx("small_cnn"), tmp_path / "c", CompileConfig(batch_sizes=(1,)))
    # cw's own convolution schedule needs AVX2, whatever the other kernels
    assert m.kernels[0].kernels_conv_scheduled == 2
    assert m.target.arch == targets.default_cpu_arch()


def test_the_cpu_level_is_chosen_on_the_first_batch_size_with_a_product(zoo_onnx, monkeypatch):
    """A model with a matrix product cw schedules (or a convolution) gets the host's level:
    the first batch size with one decides, the others are not legalized for the choice
    (BERT-base at batch sizes 1, 2, 4, 8, 16: the choice took 5.4 s, now 1.0)."""
    from cw.compile import compiler

    config = CompileConfig(batch_sizes=(1, 2, 4, 8), use_committed_records=False)
    onnx_model, imported, batches = compiler.import_graph(zoo_onnx("mlp"), config)
    legalized = []

    def counted(mod, target, **kwargs):
        legalized.append(mod)
        return real(mod, target, **kwargs)

    real = compiler.legalized
    monkeypatch.setattr(compiler, "legalized", counted)
    arch, _, _ = compiler.choose_target(config, onnx_model, imported, batches)
    assert arch == targets.default_cpu_arch()
    assert len(legalized) == (1 if arch not in (None, targets.GENERIC_CPU) else 0)


def _softmax_only(path, shape=(8, 16)):
    """A graph with neither a convolution nor a matrix product: softmax, then tanh."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *shape])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", *shape])
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["s"], axis=-1),
                               helper.make_node("Tanh", ["s"], ["y"])], "softmax", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_compact_keeps_the_best_record_per_kernel(mlp_db, tmp_path, cli):
    db, _ = mlp_db
    assert compact(db, tmp_path / "c") == 3
    assert _lines(tmp_path / "c" / tuning.RECORD_FILE) == 3
    r = cli("tune-compact", db, "-o", tmp_path / "c")  # merging the same records adds nothing
    assert r.code == 0 and "wrote 3 records" in r.out, r.err
    assert _lines(tmp_path / "c" / tuning.RECORD_FILE) == 3


def test_fp16_tuning_serves_fp16_bundles_only(mlp_db, zoo_onnx, tmp_path, cli):
    """fp16 kernels are workloads of their own: `cw tune --precision fp16` tunes them, `cw
    compile --precision fp16` applies the records, and an fp32 database leaves them untuned."""
    fp32_db, _ = mlp_db
    db = tmp_path / "fp16-db"
    r = cli("tune", zoo_onnx("mlp"), "--db", db, "--batch-sizes", "1", "--trials", "1",
            "--precision", "fp16")
    assert r.code == 0, r.err
    assert "--precision fp16" in r.out  # the hint says how to apply it
    for tune_db, tuned in ((db, True), (fp32_db, False)):
        m = compile_model(zoo_onnx("mlp"), tmp_path / f"b-{tuned}",
                          CompileConfig(batch_sizes=(1,), precision="fp16",
                                        use_committed_records=False,
                                        tune_dbs=(str(tune_db),)))
        k = m.kernels[0]
        assert (k.kernels_tuned == k.kernels_total) if tuned else k.kernels_tuned == 0
    fp32 = compile_model(zoo_onnx("mlp"), tmp_path / "b32",
                         CompileConfig(batch_sizes=(1,), use_committed_records=False,
                                       tune_dbs=(str(db),)))
    assert fp32.kernels[0].kernels_tuned == 0
    # tf32 is CUDA's (CUTLASS convolutions): refused for the CPU as cw compile refuses it
    with pytest.raises(UsageError, match="tf32 applies to CUDA bundles"):
        TuneConfig(db=str(tmp_path / "x"), precision="tf32")
    assert TuneConfig(db=str(tmp_path / "x"), precision="tf32",
                      target="cuda").compile_config().conv_algo == "cutlass"


def test_bad_tune_db_is_one_clear_error(zoo_onnx, tmp_path, cli):
    r = cli("compile", zoo_onnx("mlp"), "-o", tmp_path / "b", "--tune-db", tmp_path)
    assert r.code != 0
    assert "not a tuning database" in r.err and "cw tune" in r.err
    assert not (tmp_path / "b").exists()
    with pytest.raises(UsageError):
        TuneConfig(db=str(tmp_path), trials=0)


def test_tuning_for_cuda_needs_a_gpu_here(zoo_onnx, tmp_path):
    from cw.tvm_env import cuda_codegen_problem, load_tvm

    if not cuda_codegen_problem() and load_tvm().cuda(0).exist:
        pytest.skip("this machine has a GPU: cw tune --target cuda would really tune")
    with pytest.raises(DeviceError):
        tune_model(zoo_onnx("mlp"), TuneConfig(db=str(tmp_path / "db"), target="cuda"))


def _committed():
    for index in sorted(tuning.COMMITTED_DIR.glob("*/index.json")):
        yield pytest.param(index, id=index.parent.name)


@pytest.mark.slow
@pytest.mark.parametrize("index", list(_committed()))
def test_compile_picks_up_committed_records(index, zoo_onnx, tmp_path):
    """Every model the committed records were tuned for compiles with all its kernels tuned,
    without any flag, whenever this machine can compile for that target."""
    from cw.tvm_env import cuda_codegen_problem

    meta = json.loads(index.read_text())
    kind, arch = meta["target"], meta["arch"]
    if kind == "cuda" and cuda_codegen_problem():
        pytest.skip(f"cannot compile CUDA here: {cuda_codegen_problem()}")
    if kind == "cpu" and arch != targets.default_cpu_arch():
        pytest.skip(f"records for {arch}; this host compiles for {targets.default_cpu_arch()}")
    for name, batch_sizes in meta["models"].items():
        m = compile_model(zoo_onnx(name), tmp_path / name,
                          CompileConfig(target=kind, arch=arch, batch_sizes=tuple(batch_sizes)))
        assert m.target.tuning == f"cw/tuning/{index.parent.name}"
        for k in m.kernels:
            assert k.kernels_tuned == k.kernels_total > 0, (name, k.batch_size)


def test_cpu_level_check_refuses_what_the_host_cannot_run(monkeypatch):
    monkeypatch.setattr(targets, "host_cpu_flags", lambda: frozenset({"sse2", "cx16"}))
    with pytest.raises(DeviceError, match="x86-64-v3"):
        targets.check_host_runs("x86-64-v3", "b")
    targets.check_host_runs("x86-64", "b")
    targets.check_host_runs("znver1", "b")  # named CPUs are the user's call
    assert targets.default_cpu_arch() in (None, "x86-64")


def test_tune_cli_reports_and_refuses_foreign_directories(zoo_onnx, tmp_path, cli):
    r = cli("tune", zoo_onnx("mlp"), "--db", tmp_path / "db", "--batch-sizes", "2",
            "--time-budget", "1ns", "--json")
    assert r.code == 0, r.err
    report = json.loads(r.out)
    assert report["not_started"] == len(report["kernels"]) == 3
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    r = cli("tune", zoo_onnx("mlp"), "--db", tmp_path / "other")
    assert r.code != 0 and "not a tuning database" in r.err
    assert sorted(p.name for p in (tmp_path / "other").iterdir()) == ["notes.txt"]


@pytest.mark.slow
def test_mobilenet_v2_fuses_once_its_kernels_have_the_batch_bound(zoo_onnx, tmp_path):
    """The importer emits MobileNetV2's Clip (ReLU6) as TIR kernels with a symbolic batch; until
    bind_batch specialized them to the bound batch, TVM's FuseTIR rejected the graph
    ("Inconsistent buffers") and every kernel ran unfused."""
    m = compile_model(zoo_onnx("mobilenet_v2"), tmp_path / "m",
                      CompileConfig(batch_sizes=(1,), conv_layout="nchw"))
    assert not any("operator fusion failed" in n for n in m.notes), m.notes
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    y = LocalModel(tmp_path / "m").run([x])[0]
    assert max_relative_error(y, onnx_reference(zoo_onnx("mobilenet_v2"), [x])[0]) < 1e-4


def test_record_lookup_survives_graphs_tvm_cannot_fuse(zoo_onnx, tmp_path, mlp_db,
                                                       monkeypatch):
    """Where TVM's FuseTIR fails on a graph, looking up records falls back to unfused kernels as
    the compile itself does, and says so, instead of crashing. (No zoo graph fails any more, so
    the failure is made here.)"""
    from cw.compile import compiler

    real = compiler.legalized

    def fusion_fails(mod, target, fuse=True, *args):
        if fuse:
            raise RuntimeError("Inconsistent buffers (made by the test)")
        return real(mod, target, fuse, *args)

    monkeypatch.setattr(compiler, "legalized", fusion_fails)
    db, _ = mlp_db
    m = compile_model(zoo_onnx("mlp"), tmp_path / "m",
                      CompileConfig(batch_sizes=(2,), tune_dbs=(str(db),)))
    assert any("operator fusion failed" in n and "made by the test" in n for n in m.notes)
    assert m.kernels[0].kernels_total > 0
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    y = LocalModel(tmp_path / "m").run([x])[0]
    assert max_relative_error(y, onnx_reference(zoo_onnx("mlp"), [x])[0]) < 1e-4


@pytest.mark.parametrize("model,batch,split", [("small_cnn", 2, 0), ("resnet18", 1, 7)])
def test_cuda_seed_record_reproduces_the_default_schedule(zoo_onnx, model, batch, split):
    """On CUDA, `cw tune` stores each kernel's default (dlight) schedule as its first record, so
    that the best record is never slower than no tuning. Applied from a database, those records
    must give exactly the kernels the pipeline's default schedules give, split-K convolutions
    (cw/compile/cuda_conv.py) included. TIR only: no GPU and no CUDA toolkit needed."""
    from tvm import transform, tirx
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from cw.compile.compiler import bind_batch, import_graph, legalized
    from cw.compile.tuner import _default_rules, _default_schedule
    from cw.tvm_env import load_tvm

    tvm = load_tvm()
    config = CompileConfig(target="cuda", batch_sizes=(batch,), conv_algo="direct")
    onnx_model, imported, _ = import_graph(zoo_onnx(model), config)
    target = targets.tvm_target("cuda", config.resolved_arch)
    fused, rest = legalized(bind_batch(imported.mod, onnx_model, batch), target)
    assert cuda_conv.count_split(fused) == split
    rules = _default_rules(rest)
    assert rules, "the CUDA pipeline has no default-schedule rules"
    database = ms.database.MemoryDatabase()
    tasks = ms.relax_integration.extract_tasks(fused, target)
    for task in tasks:
        workload = database.commit_workload(task.dispatched[0])
        sch = _default_schedule(task, rules)
        assert sch is not None, task.task_name
        database.commit_tuning_record(ms.database.TuningRecord(
            sch.trace, workload, [1e-3], task.target, ArgInfo.from_prim_func(sch.mod["main"])))
    with target:
        from_records, tuned, total = tuning.apply_database(fused, database)
        by_default = transform.Sequential(rest[:1])(fused)
    assert tuned == total == len(tasks) >= 5
    for gv, func in from_records.functions.items():
        if isinstance(func, tirx.PrimFunc):
            tvm.ir.assert_structural_equal(func.body, by_default[gv.name_hint].body)


def test_heaviest_kernels_are_tuned_first(zoo_onnx, tmp_path):
    report = tune_model(zoo_onnx("small_cnn"), TuneConfig(db=str(tmp_path / "db"),
                                                          batch_sizes=(1, 4), trials=1,
                                                          time_budget_s=1e-9))
    shares = []
    for k in report.kernels:
        total = sum(j.flops * j.weight for j in report.kernels if j.batch_size == k.batch_size)
        shares.append(k.flops * k.weight / total)
    assert shares == sorted(shares, reverse=True)
    assert report.kernels[0].flops > 0 and "conv2d" in report.kernels[0].name
    assert {k.batch_size for k in report.kernels[:2]} == {1, 4}  # batch sizes count alike


def test_kernels_with_fast_math_formulas_tune_and_their_records_apply(tmp_path):
    """x * sigmoid(x): cw's sigmoid reads its input once, bound by a Let, which MetaSchedule's
    FLOP estimate does not know (`cw tune` failed on it: "Do not have a default for prim.Let").
    The kernel is tuned with the Let expanded, and that record applies at compile."""
    import onnx
    from onnx import TensorProto, helper

    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 4096]) for n in "xy"]
    graph = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["s"]),
                               helper.make_node("Mul", ["x", "s"], ["y"])], "silu", io[:1],
                              io[1:])
    src = tmp_path / "silu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), src)
    db = tmp_path / "db"
    # two trials: the default schedule's, then MetaSchedule's search (where the estimate is)
    report = tune_model(src, TuneConfig(db=str(db), batch_sizes=(1,), trials=2))
    (kernel,) = report.kernels
    assert "sigmoid" in kernel.name and kernel.trials_now == 2 and kernel.best_us > 0
    m = compile_model(src, tmp_path / "b", CompileConfig(batch_sizes=(1,), tune_dbs=(str(db),),
                                                         use_committed_records=False))
    assert (m.kernels[0].kernels_tuned, m.kernels[0].kernels_total) == (1, 1)
    x = np.linspace(-30, 30, 4096, dtype=np.float32).reshape(1, -1)
    got = LocalModel(tmp_path / "b").run([x])[0]
    assert max_relative_error(got, onnx_reference(src, [x])[0]) < 1e-5
