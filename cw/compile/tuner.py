"""`cw tune`: MetaSchedule search for the kernels `cw compile` would build, into a database that
`cw compile --tune-db` applies.

Tuning is resumable and incremental: kernels are tuned one at a time and every measured candidate
is appended to the database as it comes, so an interrupted run (Ctrl-C, a time budget, the end of
a GPU session) loses at most one round of candidates, and running the same command again skips
the kernels that already have their trials and tops up the rest.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from cw.compile import (cpu_conv, cpu_kernels, default_schedules, fast_math, targets,
                        tune_builder, tuning)
from cw.compile.compiler import (DEFAULT_BATCH_SIZES, DEFAULT_CONV_ALGO, CompileConfig,
                                 bind_batch, import_graph, legalized)
from cw.errors import DeviceError, UsageError, creating
from cw.tvm_env import cpu_threads, cuda_codegen_problem, load_tvm

Progress = Callable[[str, dict], None]


@dataclass(frozen=True)
class TuneConfig:
    db: str                                    # database directory (created, or resumed)
    target: str = "cpu"
    arch: str | None = None
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    trials: int = 64                           # measured candidates per kernel
    trials_per_round: int = 16
    time_budget_s: float | None = None         # start no kernel after this much time
    num_cores: int | None = None               # CPU: threads the kernels may use (default: all)
    seed: int = 0
    input_shapes: dict[str, list] = field(default_factory=dict)
    input_values: dict[str, list] = field(default_factory=dict)
    precision: str = "fp32"                    # the kernels of `cw compile --precision`
    conv_split: str = "auto"                   # ... and of `cw compile --conv-split`
    conv_algo: str = DEFAULT_CONV_ALGO         # ... and of `cw compile --conv-algo`

    def __post_init__(self):
        if self.trials < 1:
            raise UsageError("--trials must be at least 1", "e.g. --trials 64")
        if self.trials_per_round < 1:
            raise UsageError("trials per round must be at least 1", "e.g. 16")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise UsageError("--time-budget must be positive", "e.g. --time-budget 25m")
        if self.num_cores is not None and self.num_cores < 1:
            raise UsageError(f"--num-cores {self.num_cores} must be at least 1",
                             "omit it to use every CPU")
        self.compile_config()  # the same checks as cw compile's

    def compile_config(self) -> CompileConfig:
        # fp16 kernels are other workloads than fp32's: a database tuned for one precision
        # leaves the other's kernels untuned (cw compile counts them as such)
        return CompileConfig(target=self.target, arch=self.arch, batch_sizes=self.batch_sizes,
                             input_shapes=self.input_shapes,
                             input_values=self.input_values, precision=self.precision,
                             conv_split=self.conv_split, conv_algo=self.conv_algo)


@dataclass
class KernelResult:
    name: str
    batch_size: int
    weight: int             # how many times the graph calls it
    trials_before: int
    trials_now: int
    best_us: float | None   # best measured mean latency, microseconds
    flops: float = 0.0      # floating-point operations per call (TVM's estimate; 0: unknown)

    @property
    def gflops_per_s(self) -> float | None:
        return self.flops / self.best_us / 1e3 if self.best_us and self.flops else None


@dataclass
class TuneReport:
    db: str
    target_key: str
    kernels: list[KernelResult]
    seconds: float
    trials_goal: int
    not_started: int        # kernels the time budget left untouched: run again to continue
    # kernels whose default schedule failed to build or be measured, twice: their records may
    # all be slower than no tuning at all
    default_unmeasured: int = 0

    @property
    def short(self) -> int:
        """Kernels that were tuned but have fewer valid candidates than asked: their design
        space is exhausted (a reshape has two schedules) or candidates failed to build or run."""
        return sum(1 for k in self.kernels if k.trials_now < self.trials_goal) - self.not_started


def _check_device(config: TuneConfig) -> None:
    if config.target != "cuda":
        return
    problem = cuda_codegen_problem()
    if problem:
        raise DeviceError(f"cannot compile CUDA kernels on this machine: {problem}",
                          "tune where the CUDA toolkit and the GPU are both present")
    targets.check_cuda_arch(targets.resolve_arch("cuda", config.arch))
    tvm = load_tvm()
    if not tvm.cuda(0).exist:
        raise DeviceError("tuning for cuda measures kernels on a GPU, and this machine has none",
                          "run `cw tune --target cuda` on the GPU machine, or compile "
                          "candidates here with `cw tune-stage` and time them there with `cw "
                          "tune-measure` (docs/tuning.md); `cw compile` applies the database "
                          "anywhere")


def _best_us(records) -> float | None:
    means = [sum(float(s) for s in r.run_secs) / len(r.run_secs) for r in records if r.run_secs]
    return min(means) * 1e6 if means else None


def _default_schedule(task, rules):
    """The schedule `cw compile` gives this kernel when no record covers it, as an
    s_tir.Schedule whose trace can be stored as a record: on the CPU cw's NCHWc convolution
    schedule or cw/compile/cpu_kernels.py's (None for other kernels: they keep plain loops),
    on CUDA the first of the target's default (dlight) rules that applies, as the pipeline's
    ApplyDefaultSchedule would pick it."""
    from tvm import s_tir

    mod = task.dispatched[0]
    if task.target.kind.name == "llvm":
        try:
            with task.target:  # (the NCHW schedule's vectors follow the target's width)
                sch = cpu_conv.conv_schedule(mod)
            return sch if sch is not None else cpu_kernels.default_schedule(mod)
        except s_tir.ScheduleError:
            return None
    with task.target:
        return default_schedules.first_schedule(mod["main"], task.target, rules)


def _default_rules(rest_passes) -> list:
    """The schedule rules of the pipeline's ApplyDefaultSchedule pass (dlight's, on CUDA)."""
    for p in rest_passes:
        if hasattr(p, "rules"):
            return list(p.rules)
    return []


def _seed_default_schedule(ms, task, workload, database, builder, runner, rules,
                           tries: int = 2) -> bool | None:
    """Measure the kernel's default schedule (`_default_schedule`) and store it as its first
    record: a database record replaces the default schedule at compile time, so the database
    must hold the default too for its best record never to be worse than no tuning. Returns
    whether a record was added; None where the kernel has no default schedule of its own. A
    failed build or measurement is tried again: on a loaded machine one failed once in four
    test runs (two busy processes on 2 cores), and the search then stored only a sampled
    schedule."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    sch = _default_schedule(task, rules)
    if sch is None:
        return None
    args_info = ArgInfo.from_prim_func(sch.mod["main"])
    device = "cpu" if task.target.kind.name == "llvm" else task.target.kind.name
    for _ in range(tries):
        (built,) = builder.build([BuilderInput(sch.mod, task.target)])
        if built.error_msg:
            continue
        (future,) = runner.run([RunnerInput(built.artifact_path, device, args_info)])
        result = future.result()
        if result.error_msg or not result.run_secs:
            continue
        database.commit_tuning_record(ms.database.TuningRecord(
            sch.trace, workload, result.run_secs, task.target, args_info))
        return True
    return False


def _let_free(task):
    """`task` with the Lets of cw's fast-math formulas expanded (fast_math.without_lets): its
    kernel as MetaSchedule can estimate and `cw compile` looks up (tuning.apply_database)."""
    from tvm import IRModule, tirx
    from tvm.s_tir import meta_schedule as ms

    mod = task.dispatched[0]
    if not any(isinstance(f, tirx.PrimFunc) and fast_math.has_lets(f)
               for f in mod.functions.values()):
        return task
    expanded = IRModule({gv: fast_math.without_lets(f) if isinstance(f, tirx.PrimFunc) else f
                         for gv, f in mod.functions.items()})
    return ms.ExtractedTask(task.task_name, expanded, task.target, [expanded], task.weight)


def _flops(task) -> float:
    """Floating-point operations of one call of the kernel (0 where TVM cannot count them)."""
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        return float(estimate_tir_flops(task.dispatched[0]))
    except Exception:  # noqa: BLE001  (an estimate only orders the work)
        return 0.0


@dataclass
class TaskWork:
    """One kernel to tune: the batch size it was first seen at, MetaSchedule's task and its
    workload in the database, and TVM's FLOP estimate for one call."""
    batch_size: int
    task: object
    workload: object
    flops: float


def tuning_target(config: TuneConfig):
    arch = config.compile_config().resolved_arch
    num_cores = config.num_cores or cpu_threads()
    return targets.tuning_target(config.target, arch,
                                 num_cores=num_cores if config.target == "cpu" else None)


def open_database(db_dir: Path):
    """The JSON database at `db_dir`, created if absent; a directory holding anything else is
    refused rather than written into."""
    from tvm.s_tir import meta_schedule as ms

    if db_dir.exists() and not db_dir.is_dir():
        raise UsageError(f"--db {db_dir} is a file, not a directory",
                         "give a new directory, or one written by `cw tune`")
    if db_dir.exists() and not tuning.is_database(db_dir) and any(db_dir.iterdir()):
        raise UsageError(f"--db {db_dir}: exists and is not a tuning database",
                         "give a new directory, or one written by `cw tune`")
    with creating(db_dir, "--db"):
        db_dir.mkdir(parents=True, exist_ok=True)
    return ms.database.JSONDatabase(str(db_dir / tuning.WORKLOAD_FILE),
                                    str(db_dir / tuning.RECORD_FILE), allow_missing=True)


def extract_work(onnx_path, config: TuneConfig, database, progress: Progress):
    """The distinct kernels `cw compile` would build for the model at every batch size asked,
    committed as workloads to `database`, heaviest first. Returns (work, the default schedule
    rules of the target)."""
    from tvm.s_tir import meta_schedule as ms

    compile_config = config.compile_config()
    arch = compile_config.resolved_arch
    target = tuning_target(config)
    onnx_model, imported, batch_sizes = import_graph(onnx_path, compile_config, progress)
    progress("stage", {"text": "extracting kernels"})
    work: list[TaskWork] = []
    seen = set()
    rules: list = []
    for batch in batch_sizes:
        fused, rest = legalized(bind_batch(imported.mod, onnx_model, batch),
                                targets.tvm_target(config.target, arch),
                                conv_split=compile_config.conv_split == "auto",
                                cutlass=compile_config.conv_algo == "cutlass",
                                tf32=compile_config.precision == "tf32")
        rules = rules or _default_rules(rest)
        for task in ms.relax_integration.extract_tasks(fused, target):
            task = _let_free(task)
            workload = database.commit_workload(task.dispatched[0])
            key = str(workload.as_json()[0])  # the structural hash
            if key in seen:
                continue
            seen.add(key)
            work.append(TaskWork(batch, task, workload, _flops(task)))
    # Heaviest first, by share of its batch size's operations per inference (each batch size
    # counts alike): a time budget that runs out, as a GPU session does, leaves the kernels that
    # matter least untuned. Stable, so ties keep graph order.
    per_batch: dict[int, float] = {}
    for w in work:
        per_batch[w.batch_size] = per_batch.get(w.batch_size, 0.0) + w.flops * float(w.task.weight)
    work.sort(key=lambda w: -w.flops * float(w.task.weight) / (per_batch[w.batch_size] or 1.0))
    return work, rules


def tune_model(onnx_path: str | os.PathLike, config: TuneConfig,
               progress: Progress = lambda event, info: None) -> TuneReport:
    _check_device(config)
    load_tvm()
    from cw.compile import fast_tvmscript

    with fast_tvmscript.fast_inspect_stack():
        from tvm.s_tir import meta_schedule as ms
        import tvm.s_tir.tensor_intrin  # noqa: F401  (what makes MetaSchedule slow to start)

    num_cores = config.num_cores or cpu_threads()
    arch = config.compile_config().resolved_arch
    db_dir = Path(config.db)
    database = open_database(db_dir)
    work, rules = extract_work(onnx_path, config, database, progress)

    # one pool of builder and runner processes for every kernel: a worker's start took ~6 s here,
    # a build 0.1 s
    builder = tune_builder.pooled_builder(fast_tvmscript.install)
    runner = ms.runner.LocalRunner(initializer=fast_tvmscript.install)
    start = time.monotonic()
    results: list[KernelResult] = []
    not_started = default_unmeasured = 0
    progress("tasks", {"total": len(work)})
    try:
        for i, w in enumerate(work):
            batch, task, workload, flops = w.batch_size, w.task, w.workload, w.flops
            before = len(database.get_top_k(workload, config.trials))
            result = KernelResult(task.task_name, batch, int(task.weight), before, before,
                                  _best_us(database.get_top_k(workload, 1)), flops)
            results.append(result)
            missing = config.trials - before
            if missing <= 0:
                progress("kernel_done", {"index": i, "result": result, "skipped": True})
                continue
            if config.time_budget_s is not None and time.monotonic() - start > config.time_budget_s:
                not_started += 1
                progress("kernel_done", {"index": i, "result": result, "skipped": True})
                continue
            progress("kernel_start", {"index": i, "name": task.task_name, "batch_size": batch,
                                      "trials": missing})
            seeded = (_seed_default_schedule(ms, task, workload, database, builder, runner, rules)
                      if before == 0 else None)
            if seeded:
                missing -= 1
            elif seeded is False:
                default_unmeasured += 1
            if missing <= 0:
                result.trials_now = len(database.get_top_k(workload, config.trials))
                result.best_us = _best_us(database.get_top_k(workload, 1))
                progress("kernel_done", {"index": i, "result": result, "skipped": False})
                continue
            context = ms.TuneContext(mod=task.dispatched[0], target=task.target,
                                     space_generator="post-order-apply",
                                     search_strategy=_search_strategy(ms, missing),
                                     task_name=task.task_name,
                                     num_threads=num_cores, rand_state=config.seed + i)
            with fast_tvmscript.fast_inspect_stack():
                ms.tune_tasks(
                    tasks=[context], task_weights=[1.0], work_dir=str(db_dir),
                    max_trials_global=missing, max_trials_per_task=missing,
                    num_trials_per_iter=min(config.trials_per_round, missing), database=database,
                    builder=builder, runner=runner)
            result.trials_now = len(database.get_top_k(workload, config.trials))
            result.best_us = _best_us(database.get_top_k(workload, 1))
            progress("kernel_done", {"index": i, "result": result, "skipped": False})
    finally:
        builder.close()
    return TuneReport(str(db_dir), targets.target_key(config.target, arch), results,
                      time.monotonic() - start, config.trials, not_started,
                      default_unmeasured)


def _search_strategy(ms, trials: int):
    population = min(512, max(64, 8 * trials))
    return ms.search_strategy.EvolutionarySearch(
        population_size=population, init_min_unmeasured=min(50, population // 4))


def compact(source: str | os.PathLike, out: str | os.PathLike) -> int:
    """Merge the best record of every workload in `source` into the database at `out` (created
    if absent; what cw commits under cw/tuning/), keeping one record per workload: the best of
    both. Returns the number of workloads written."""
    load_tvm()
    from tvm.s_tir import meta_schedule as ms

    src, dst = Path(source), Path(out)
    if not tuning.is_database(src):
        raise UsageError(f"{src} is not a tuning database", "give a directory from `cw tune`")
    dst.mkdir(parents=True, exist_ok=True)
    tmp_w, tmp_r = dst / (tuning.WORKLOAD_FILE + ".tmp"), dst / (tuning.RECORD_FILE + ".tmp")
    for p in (tmp_w, tmp_r):
        p.unlink(missing_ok=True)
    merged = ms.database.MemoryDatabase()
    for path in ([dst] if tuning.is_database(dst) else []) + [src]:
        ms.database.JSONDatabase(str(path / tuning.WORKLOAD_FILE),
                                 str(path / tuning.RECORD_FILE),
                                 allow_missing=False).dump_pruned(merged)
    merged.dump_pruned(ms.database.JSONDatabase(str(tmp_w), str(tmp_r), allow_missing=True))
    os.replace(tmp_w, dst / tuning.WORKLOAD_FILE)
    os.replace(tmp_r, dst / tuning.RECORD_FILE)
    return sum(1 for line in open(dst / tuning.RECORD_FILE) if line.strip())
