"""Tuning with the compiler on one machine and the device on another: `cw tune-stage` and
`cw tune-ingest` (the middle step, `cw tune-measure`, is cw/profile/candidates.py).

`cw tune` needs the TVM compiler and the GPU in one place; the GPU machine here has no compiler
and lends 30 minutes at a time, while the build machine has the compiler, hours, and no GPU. A
tuning kit splits the work where it is cheap:

1. `cw tune-stage` (build machine): for each kernel of the model, heaviest first, draw schedule
   candidates from MetaSchedule's design space (random samples until a kernel has enough
   measured records, then evolutionary search with a cost model trained on them) and compile
   them into one library per kernel, with the kernel's default schedule as the reference.
2. `cw tune-measure` (device): checks every candidate's answer against the reference and times
   it; only TVM's runtime is needed.
3. `cw tune-ingest` (build machine): the measured candidates become records of the tuning
   database, exactly as `cw tune` would have written them; `cw compile --tune-db` and
   `cw tune-compact` take it from there. Stage again for another round.

The kit is a directory: kit.json (what the device reads), lib/ (the kernel libraries) and
records/ (each candidate's schedule trace, needed only on this side).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from cw.compile import targets, tuning
from cw.compile.libcheck import check_device_binary
from cw.compile.tuner import (Progress, TuneConfig, _default_schedule, _flops, extract_work,
                              open_database, tuning_target)
from cw.errors import UsageError, creating
from cw.profile.candidates import KIT_FILE, KIT_FORMAT, read_kit, read_results
from cw.tvm_env import load_tvm

EVOLVE_AFTER = 16          # measured records a kernel needs before the cost model guides search
SAMPLES_PER_CANDIDATE = 40  # random draws allowed per candidate wanted (most fail GPU checks)
LEDGER = "cw-ingested.json"


@dataclass
class StageReport:
    kit: str
    staged: list[dict] = field(default_factory=list)  # kit tasks added by this run
    complete: int = 0       # kernels whose records already reach --trials
    in_kit: int = 0         # kernels the kit already held
    not_started: int = 0    # the time budget ran out first
    uncovered: int = 0      # kernels none of the chosen --sources has a candidate for
    not_chosen: int = 0     # kernels whose names --kernels leaves out
    failed: list[str] = field(default_factory=list)  # kernels TVM could not search or build
    seconds: float = 0.0


@dataclass
class IngestReport:
    committed: int = 0
    failed: int = 0
    wrong: int = 0
    already: int = 0
    kernels: list[dict] = field(default_factory=list)  # name, batch, default_us, best_us,
    #                                                    best_origin


def _write_json(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def _new_kit(config: TuneConfig, tolerance: float) -> dict:
    arch = config.compile_config().resolved_arch
    return {"format": KIT_FORMAT, "kit_id": uuid.uuid4().hex,
            "target_key": targets.target_key(config.target, arch), "device": config.target,
            "precision": config.precision, "tolerance": tolerance, "tasks": []}


def _random_candidates(ms, s_tir, task, target, count: int, seed: int, avoid: set) -> list:
    """Up to `count` distinct schedules drawn at random from the kernel's design space that
    pass MetaSchedule's postprocessors (on CUDA: shared memory, threads, vector width)."""

    context = ms.TuneContext(mod=task.dispatched[0], target=target,
                             space_generator="post-order-apply", task_name=task.task_name,
                             num_threads=1)
    spaces = context.generate_design_space()
    postprocs = context.space_generator.postprocs
    found, seen = [], set(avoid)
    for draw in range(count * SAMPLES_PER_CANDIDATE):
        if len(found) >= count:
            break
        sch = s_tir.Schedule(task.dispatched[0], seed=seed + draw + 1)
        try:
            s_tir.schedule.Trace(spaces[draw % len(spaces)].trace.insts, {}).apply_to_schedule(
                sch, remove_postproc=True)
            if not all(p.apply(sch) for p in postprocs):
                continue
        except Exception:  # noqa: BLE001  (a draw TVM cannot lower is just not a candidate)
            continue
        _keep_if_new(sch, seen, found)
    return found


def _keep_if_new(sch, seen: set, found: list) -> None:
    """Appends the schedule unless one of the same structure was seen (hashes kept in seen)."""
    import tvm_ffi

    key = tvm_ffi.structural_hash(sch.mod)
    if key not in seen:
        seen.add(key)
        found.append(sch)


# dlight's GEMM schedule (the default for convolutions and matmuls on CUDA: 8x16 threads, 4x4
# outputs each, a 32-pixel x 64-channel tile, k steps of 16) with other tile shapes, as
# (block_size_x, block_size_y, micro_size_x, micro_size_y, micro_size_k, vector_size). x runs
# over output pixels (rows of the implicit GEMM), y over output channels. Larger tiles and more
# outputs per thread raise arithmetic intensity for big GEMMs (batch 16); narrower pixel tiles
# waste less on a 7x7 map at batch 1. Ordered by how likely each is to help, so that a small
# --candidates takes the likeliest.
DLIGHT_TILES = [
    (16, 16, 8, 8, 8, 4),    # 128 x 128, 256 threads: the classic SGEMM register block
    (8, 16, 8, 4, 16, 2),    # 64 x 64, 128 threads
    (16, 16, 4, 4, 16, 2),   # 64 x 64, 256 threads
    (8, 16, 8, 8, 8, 4),     # 64 x 128
    (4, 32, 4, 4, 16, 2),    # 16 x 128: few pixels, many channels (late layers, batch 1)
    (8, 16, 2, 4, 16, 2),    # 16 x 64
    (16, 8, 4, 8, 16, 4),    # 64 x 64, channels-major
    (8, 8, 4, 4, 32, 2),     # 32 x 32, deep k steps
    (8, 16, 4, 4, 32, 2),    # the default tile, deeper k steps
    (16, 16, 4, 8, 8, 4),    # 64 x 128, 256 threads
]


def _dlight_variants(task, target, count: int, avoid: set) -> list:
    """Up to `count` schedules from dlight's GEMM rule with the tiles of DLIGHT_TILES, for a
    kernel that rule schedules by default ([] for others, and for fp16 kernels it tensorizes:
    their schedule ignores the tile)."""
    import dataclasses

    from tvm.s_tir import dlight

    default = dlight.gpu.Matmul()
    if target.kind.name != "cuda" or default.apply(task.dispatched[0]["main"], target,
                                                   False) is None:
        return []
    base = default.get_configs(target)
    found, seen = [], set(avoid)
    for bx, by, mx, my, mk, vec in DLIGHT_TILES:
        if len(found) >= count:
            break
        config = dataclasses.replace(base, block_size_x=bx, block_size_y=by, micro_size_x=mx,
                                     micro_size_y=my, micro_size_k=mk, vector_size=vec)
        rule = type("MatmulTile", (dlight.gpu.Matmul,), {"get_configs": lambda self, t: config})
        try:
            sch = rule().apply(task.dispatched[0]["main"], target, False)
        except Exception:  # noqa: BLE001  (a tile this kernel's shape cannot take)
            continue
        if sch is not None:
            _keep_if_new(sch, seen, found)
    return found


def _evolved_candidates(ms, task, target, count: int, seed: int, database, workload) -> list:
    """`count` candidates from MetaSchedule's evolutionary search, its cost model trained on the
    kernel's measured records (as `cw tune` would between rounds)."""
    records = database.get_top_k(workload, 1 << 16)
    context = ms.TuneContext(mod=task.dispatched[0], target=target,
                             space_generator="post-order-apply",
                             search_strategy=ms.search_strategy.EvolutionarySearch(
                                 population_size=256, genetic_num_iters=3),
                             task_name=task.task_name, num_threads=1, rand_state=seed)
    model = ms.cost_model.XGBModel(extractor=ms.feature_extractor.PerStoreFeature(),
                                   adaptive_training=False)
    model.update(context, [r.as_measure_candidate() for r in records],
                 [ms.runner.RunnerResult(r.run_secs, None) for r in records])
    context.pre_tuning(count, count, context.generate_design_space(), database, model)
    try:
        return [c.sch for c in (context.generate_measure_candidates() or [])]
    finally:
        context.post_tuning()


def _build(tvm, schedules: list, target, path: Path) -> list[int]:
    """Compile the schedules into one library at `path`, functions c0, c1, ... in order; a
    schedule TVM fails to compile is left out. Returns the indices that made it."""
    def module(indices):
        return tvm.IRModule({tvm.ir.GlobalVar(f"c{i}"): schedules[i].mod["main"].with_attr(
            "global_symbol", f"c{i}") for i in indices})

    keep = list(range(len(schedules)))
    try:
        with target:
            lib = tvm.compile(module(keep), target=target)
    except Exception:  # noqa: BLE001  (find the culprits one by one)
        good = []
        for i in keep:
            try:
                with target:
                    tvm.compile(module([i]), target=target)
                good.append(i)
            except Exception:  # noqa: BLE001
                pass
        keep = good
        if not keep:
            return []
        with target:
            lib = tvm.compile(module(keep), target=target)
    tmp = path.with_name(path.name + ".tmp.so")
    lib.export_library(str(tmp))
    if target.kind.name == "cuda":
        check_device_binary(tmp, path.name)  # the device's runtime-only TVM loads nothing else
    os.replace(tmp, path)
    return keep


SOURCES = ("dlight-tile", "sampled", "evolved")  # kinds of new candidates, as origins say


def stage_kit(onnx_path, config: TuneConfig, kit_dir: str | os.PathLike,
              candidates: int = 32, progress: Progress = lambda event, info: None,
              sources: tuple[str, ...] = SOURCES,
              kernels: tuple[str, ...] = ()) -> StageReport:
    """Add the model's kernels that still lack --trials records to the kit at `kit_dir`
    (created if absent; several models may share one kit). `sources`: the kinds of new
    candidates to draw; a kernel none of them has a candidate for is left out (so a kit of
    dlight tiles alone holds only the kernels dlight's GEMM rule schedules). `kernels`: if
    given, only kernels whose names contain one of these strings (e.g. "matmul": a Winograd
    bundle's products, whose other kernels other kits already cover)."""
    tvm = load_tvm()
    from cw.compile import fast_tvmscript
    from cw.tvm_env import cuda_codegen_problem

    if candidates < 1:
        raise UsageError("--candidates must be at least 1", "e.g. --candidates 32")
    unknown = sorted(set(sources) - set(SOURCES))
    if unknown or not sources:
        raise UsageError(f"unknown candidate source(s): {', '.join(unknown) or '(none given)'}",
                         f"choose among {', '.join(SOURCES)}, e.g. --sources dlight-tile")
    if config.target == "cuda" and cuda_codegen_problem():
        raise UsageError(f"cannot compile CUDA kernels here: {cuda_codegen_problem()}",
                         "stage the kit on the machine with the TVM compiler and CUDA toolkit")
    if config.target == "cuda":
        targets.check_cuda_arch(targets.resolve_arch("cuda", config.arch))
    with fast_tvmscript.fast_inspect_stack():
        from tvm import s_tir
        from tvm.s_tir import meta_schedule as ms
        import tvm.s_tir.tensor_intrin  # noqa: F401

    kit_dir = Path(kit_dir)
    tolerance = 1e-2 if config.precision == "fp16" else 1e-3
    if (kit_dir / KIT_FILE).exists():
        kit = read_kit(kit_dir)
        wanted = targets.target_key(config.target, config.compile_config().resolved_arch)
        if kit["target_key"] != wanted or kit["precision"] != config.precision:
            raise UsageError(f"kit {kit_dir} is for {kit['target_key']} {kit['precision']}, "
                             f"not {wanted} {config.precision}", "stage into a new directory")
    elif kit_dir.exists() and (not kit_dir.is_dir() or any(kit_dir.iterdir())):
        raise UsageError(f"{kit_dir} exists and is not a tuning kit",
                         "give a new directory, or a kit from `cw tune-stage`")
    else:
        kit = _new_kit(config, tolerance)
    with creating(kit_dir, "--kit"):
        (kit_dir / "lib").mkdir(parents=True, exist_ok=True)
        (kit_dir / "records").mkdir(exist_ok=True)
    database = open_database(Path(config.db))
    work, rules = extract_work(onnx_path, config, database, progress)
    target = tuning_target(config)
    in_kit = {t["workload_hash"] for t in kit["tasks"]}
    report = StageReport(str(kit_dir))
    start = time.monotonic()
    progress("tasks", {"total": len(work)})
    for n, w in enumerate(work):
        key = str(w.workload.as_json()[0])
        if kernels and not any(k in w.task.task_name for k in kernels):
            report.not_chosen += 1
            progress("kernel_done", {"index": n, "skipped": True})
            continue
        records = database.get_top_k(w.workload, config.trials)
        if key in in_kit or len(records) >= config.trials:
            report.in_kit += key in in_kit
            report.complete += key not in in_kit
            progress("kernel_done", {"index": n, "skipped": True})
            continue
        if config.time_budget_s is not None and time.monotonic() - start > config.time_budget_s:
            report.not_started += 1
            progress("kernel_done", {"index": n, "skipped": True})
            continue
        progress("kernel_start", {"index": n, "name": w.task.task_name,
                                  "batch_size": w.batch_size})
        task_id = f"t{len(kit['tasks']):04d}"
        try:
            with fast_tvmscript.fast_inspect_stack(), target:
                schedules, origins = _draw(ms, s_tir, w, target, records, rules, database,
                                           min(candidates, config.trials - len(records)),
                                           config.seed + len(kit["tasks"]) * 7919, sources)
                # a kit of some kinds only: a kernel none of them covers stays out (with every
                # kind, a lone default is still staged: its record covers the kernel)
                uncovered = set(sources) != set(SOURCES) and all(
                    o in ("default", "reference") for o in origins)
                kept = [] if uncovered else _build(tvm, schedules, target,
                                                   kit_dir / "lib" / f"{task_id}.so")
                report.uncovered += uncovered
        except Exception as e:  # noqa: BLE001  (one kernel TVM cannot search stops no other)
            kept = []
            report.failed.append(f"{w.task.task_name} (batch {w.batch_size}): "
                                 + ((str(e).strip().splitlines() or [type(e).__name__])[-1])[:200])
        if not kept:
            progress("kernel_done", {"index": n, "skipped": False, "candidates": 0})
            continue
        args = ms.arg_info.ArgInfo.from_prim_func(w.task.dispatched[0]["main"])
        _save_records(ms, kit_dir / "records" / task_id, w.task.dispatched[0],
                      [(f"c{i}", origins[i], schedules[i]) for i in kept], target, args)
        reference = "c0" if 0 in kept and origins[0] in ("default", "reference") else None
        entry = {"id": task_id, "name": w.task.task_name, "batch_size": w.batch_size,
                 "calls": int(w.task.weight), "flops": _flops(w.task), "workload_hash": key,
                 "library": f"lib/{task_id}.so", "candidates": [f"c{i}" for i in kept],
                 "reference": reference, "tolerance": tolerance,
                 "args": [{"shape": [int(d) for d in a.shape], "dtype": str(a.dtype)}
                          for a in args]}
        kit["tasks"].append(entry)
        in_kit.add(key)
        _write_json(kit_dir / KIT_FILE, kit)
        report.staged.append(entry)
        progress("kernel_done", {"index": n, "skipped": False, "candidates": len(kept)})
    if not (kit_dir / KIT_FILE).exists():
        _write_json(kit_dir / KIT_FILE, kit)
    report.seconds = time.monotonic() - start
    return report


def _save_records(ms, where: Path, mod, candidates, target, args) -> None:
    """The candidates' schedule traces, as MetaSchedule writes them (its JSON database format:
    traces hold objects only its own writer serializes), one line per candidate in the order of
    candidates.json."""
    if where.exists():
        shutil.rmtree(where)  # a stage cut short before this kernel reached kit.json
    where.mkdir(parents=True)
    database = ms.database.JSONDatabase(str(where / tuning.WORKLOAD_FILE),
                                        str(where / tuning.RECORD_FILE), allow_missing=True)
    workload = database.commit_workload(mod)
    for _, _, sch in candidates:
        database.commit_tuning_record(ms.database.TuningRecord(sch.trace, workload, None, target,
                                                               args))
    _write_json(where / "candidates.json", [{"name": name, "origin": origin}
                                            for name, origin, _ in candidates])


def _load_records(ms, where: Path, database) -> tuple[object, dict]:
    """(the workload, committed to `database`; {candidate: (origin, record)}) of a kit task."""
    if not (where / "candidates.json").is_file():
        raise UsageError(f"{where}: the kit's schedule records are missing",
                         "ingest from the kit directory `cw tune-stage` wrote (its records/ "
                         "stay on the build machine)")
    lines = (where / tuning.WORKLOAD_FILE).read_text().splitlines()
    workload = database.commit_workload(ms.database.Workload.from_json(json.loads(lines[0])).mod)
    names = json.loads((where / "candidates.json").read_text())
    records = (where / tuning.RECORD_FILE).read_text().splitlines()
    out = {}
    for entry, line in zip(names, records):
        record = ms.database.TuningRecord.from_json(json.loads(line)[1], workload)
        out[entry["name"]] = (entry["origin"], record)
    return workload, out


def _draw(ms, s_tir, w, target, records, rules, database, count, seed, sources=SOURCES):
    """The kernel's candidates: first its reference (the default schedule while the database
    has no record of the kernel, else its best record, re-measured only to check answers),
    then `count` minus one new ones. Returns (schedules, their origins)."""
    schedules, origins = [], []
    if records:
        schedules.append(records[0].as_measure_candidate().sch)
        origins.append("reference")
    else:
        default = _default_schedule(w.task, rules)
        if default is None and target.kind.name == "llvm":
            default = s_tir.Schedule(w.task.dispatched[0])  # plain loops, as compiled untuned
        if default is not None:
            schedules.append(default)
            origins.append("default")
    import tvm_ffi

    avoid = {tvm_ffi.structural_hash(s.mod) for s in schedules}
    new = count - (origins == ["default"])
    if new > 0 and not records and "dlight-tile" in sources:  # first round: other tiles
        for sch in _dlight_variants(w.task, target, new, avoid):
            schedules.append(sch)
            origins.append("dlight-tile")
            avoid.add(tvm_ffi.structural_hash(sch.mod))
            new -= 1
    if new > 0 and {"sampled", "evolved"} & set(sources):
        drawn, origin = [], "evolved"
        if ("evolved" in sources
                and len(database.get_top_k(w.workload, EVOLVE_AFTER)) >= EVOLVE_AFTER):
            try:
                drawn = _evolved_candidates(ms, w.task, target, new, seed, database,
                                            w.workload)
            except Exception:  # noqa: BLE001  (TVM's search fails on some kernels' records)
                drawn = []
        if not drawn and "sampled" in sources:
            drawn = _random_candidates(ms, s_tir, w.task, target, new, seed, avoid)
            origin = "sampled"
        for sch in drawn:
            if tvm_ffi.structural_hash(sch.mod) not in avoid:
                schedules.append(sch)
                origins.append(origin)
    return schedules, origins


def ingest_results(kit_dir: str | os.PathLike, results: list[str | os.PathLike],
                   db_dir: str | os.PathLike) -> IngestReport:
    """Commit the kit's measured, correct candidates to the database at `db_dir` as tuning
    records. Ingesting the same results again adds nothing (a ledger in the database directory
    remembers them)."""
    load_tvm()
    from tvm.s_tir import meta_schedule as ms

    kit_dir, db_dir = Path(kit_dir), Path(db_dir)
    kit = read_kit(kit_dir)
    rows = []
    for path in results:
        if not Path(path).is_file():
            raise UsageError(f"{path}: no such results file", "give the file `cw tune-measure "
                             "--out` wrote")
        rows += [r for r in read_results(Path(path)) if r.get("kit_id") == kit["kit_id"]]
    if not rows:
        raise UsageError(f"no results for kit {kit_dir} in {', '.join(map(str, results))}",
                         "measure this kit with `cw tune-measure` first")
    database = open_database(db_dir)
    ledger_path = db_dir / LEDGER
    ledger = json.loads(ledger_path.read_text()) if ledger_path.exists() else {}
    done = set(ledger.get(kit["kit_id"], []))
    tasks = {t["id"]: t for t in kit["tasks"]}
    report = IngestReport()
    cache: dict[str, tuple] = {}
    timings: dict[str, dict[str, float]] = {}
    for r in rows:
        task = tasks.get(r["task"])
        if task is None:
            continue
        if "error" in r:
            report.failed += 1
            report.wrong += bool(r.get("wrong"))
            continue
        if task["id"] not in cache:
            cache[task["id"]] = _load_records(ms, kit_dir / "records" / task["id"], database)
        workload, candidates = cache[task["id"]]
        origin, saved = candidates[r["candidate"]]
        mean_s = sum(r["run_secs"]) / len(r["run_secs"])
        timings.setdefault(task["id"], {})[origin] = min(
            timings.get(task["id"], {}).get(origin, float("inf")), mean_s)
        tag = f"{r['task']}/{r['candidate']}"
        if tag in done:
            report.already += 1
            continue
        done.add(tag)
        if origin == "reference":
            continue  # measured to check the others' answers; the database has it already
        database.commit_tuning_record(ms.database.TuningRecord(
            saved.trace, workload, r["run_secs"], saved.target, saved.args_info))
        report.committed += 1
    ledger[kit["kit_id"]] = sorted(done)
    _write_json(ledger_path, ledger)
    for task_id, by_origin in timings.items():
        task = tasks[task_id]
        base = by_origin.get("default", by_origin.get("reference"))
        best_origin = min(by_origin, key=by_origin.get)
        report.kernels.append({"name": task["name"], "batch_size": task["batch_size"],
                               "calls": task["calls"],
                               "default_us": base * 1e6 if base is not None else None,
                               "best_us": by_origin[best_origin] * 1e6,
                               "best_origin": best_origin})
    return report
