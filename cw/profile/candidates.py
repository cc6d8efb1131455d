"""`cw tune-measure`: time the schedule candidates of a tuning kit on this machine's device.

A tuning kit (`cw tune-stage`, cw/compile/tunekit.py) holds kernel candidates already compiled
on another machine, so this side needs only TVM's runtime: the GPU machine here has no TVM
compiler. Each candidate is run once on seeded random inputs and its outputs are compared with
the kit's reference candidate (the kernel's default schedule), then timed with TVM's time
evaluator. A wrong answer is a result too: such a candidate never becomes a record.

Candidates run in a child process, so that one that faults (an illegal address poisons the whole
CUDA context) or hangs costs only itself: the parent records it as failed and starts a new
child at the next candidate. Results are appended to a JSON-lines file as they come, so a run
cut short (a time budget, the end of a device call) resumes where it stopped.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from cw.errors import UsageError

KIT_FORMAT = 1
KIT_FILE = "kit.json"
BEGIN = "BEGIN "


@dataclass(frozen=True)
class MeasureConfig:
    device: str = "cpu"               # "cpu" | "cuda" | "cuda:N"
    repeat: int = 3                   # timed repetitions, each at least min_repeat_ms long
    min_repeat_ms: int = 20
    candidate_timeout_s: float = 60.0  # a candidate (load, check, time) taking longer has hung
    time_budget_s: float | None = None  # start no candidate after this long

    def __post_init__(self):
        if self.repeat < 1 or self.min_repeat_ms < 0:
            raise UsageError("--repeat must be at least 1 and --min-repeat-ms not negative",
                             "e.g. --repeat 3 --min-repeat-ms 20")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise UsageError("--time-budget must be positive", "e.g. --time-budget 8m")


@dataclass
class MeasureReport:
    measured: int = 0        # timed and correct, in this run
    failed: int = 0          # failed to load or run, hung, or gave a wrong answer
    wrong: int = 0           # of the failed: answers different from the reference's
    already: int = 0         # in the results file before this run
    left: int = 0            # not started: the time budget ran out
    seconds: float = 0.0


def read_kit(kit_dir: Path) -> dict:
    path = Path(kit_dir) / KIT_FILE
    try:
        kit = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"{kit_dir}: not a tuning kit (no {KIT_FILE})",
                         "give a directory written by `cw tune-stage`") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})",
                         "stage the kit again with `cw tune-stage`") from None
    if kit.get("format") != KIT_FORMAT:
        raise UsageError(f"{path}: kit format {kit.get('format')}, this cw reads {KIT_FORMAT}",
                         "stage the kit again with this version of cw")
    return kit


def read_results(path: Path) -> list[dict]:
    """The result lines of a results file; a last line cut off mid-write is ignored."""
    out = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def pending(kit: dict, done: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """(task, candidate) pairs still to measure, in the kit's order (heaviest kernels first)."""
    return [(t["id"], c) for t in kit["tasks"] for c in t["candidates"]
            if (t["id"], c) not in done]


def measure_kit(kit_dir: str | os.PathLike, results_path: str | os.PathLike,
                config: MeasureConfig = MeasureConfig(),
                progress: Callable[[str, dict], None] = lambda event, info: None
                ) -> MeasureReport:
    from cw.engine import parse_device, tvm_device

    kit_dir, results_path = Path(kit_dir), Path(results_path)
    kit = read_kit(kit_dir)
    kind, index = parse_device(config.device)
    if kind != kit["device"]:
        raise UsageError(f"kit {kit_dir} holds {kit['device']} kernels, not {kind} ones",
                         f"use --device {kit['device']}")
    tvm_device(kind, index)  # refuses a missing GPU here, with its hint, not in the child
    earlier = [r for r in read_results(results_path) if r.get("kit_id") == kit["kit_id"]]
    done = {(r["task"], r["candidate"]) for r in earlier}
    todo = pending(kit, done)
    report = MeasureReport(already=len(done))
    results_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    progress("candidates", {"total": len(todo) + len(done), "done": len(done)})
    with open(results_path, "a") as out:
        while todo:
            if config.time_budget_s is not None and time.monotonic() - start > config.time_budget_s:
                break
            todo = _run_child(kit_dir, kit, todo, config, out, report, progress, start)
    report.left = len(todo)
    report.seconds = time.monotonic() - start
    return report


def _run_child(kit_dir, kit, todo, config, out, report, progress, start):
    """One child process measuring `todo` in order until it ends, faults or hangs. Returns what
    it did not get to."""
    child = subprocess.Popen(
        [sys.executable, "-m", "cw.profile.candidates", str(kit_dir), config.device,
         str(config.repeat), str(config.min_repeat_ms)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in child.stdout] + [lines.put(None)],
                     daemon=True).start()
    rest = list(todo)
    try:
        while rest:
            if config.time_budget_s is not None and time.monotonic() - start > config.time_budget_s:
                return rest
            task, cand = rest[0]
            child.stdin.write(f"{task} {cand}\n")
            child.stdin.flush()
            result = _await_result(lines, config.candidate_timeout_s)
            if result is None or isinstance(result, str):
                why = result or f"the measuring process died (exit {child.poll()})"
                _write(out, {"kit_id": kit["kit_id"], "task": task, "candidate": cand,
                             "error": why}, report, progress)
                return rest[1:]
            _write(out, {"kit_id": kit["kit_id"], **result}, report, progress)
            rest.pop(0)
        return rest
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


def _await_result(lines: queue.Queue, timeout_s: float):
    """The child's next result (a dict); a string when it hung; None when it died."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return f"timed out after {timeout_s:.0f} s"
        if line is None:
            return None
        if line.startswith(BEGIN):
            continue
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            continue  # something the child's libraries printed


def _write(out, result: dict, report: MeasureReport, progress) -> None:
    out.write(json.dumps(result) + "\n")
    out.flush()
    if "error" in result:
        report.failed += 1
        report.wrong += bool(result.get("wrong"))
    else:
        report.measured += 1
    progress("result", result)


# -- the child: runs on the device, imports nothing but TVM's runtime -------------------------

def _args(task: dict, tvm, device, seed: int):
    rng = np.random.default_rng(seed)
    arrays = []
    for a in task["args"]:
        dtype = np.dtype(a["dtype"])
        if dtype.kind == "f":
            x = rng.uniform(-1.0, 1.0, a["shape"]).astype(dtype)
        else:  # indices: zeros are in bounds for every gather
            x = np.zeros(a["shape"], dtype)
        arrays.append(x)
    return [tvm.runtime.tensor(x, device=device) for x in arrays]


def _max_relative_error(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    from cw.verify import max_relative_error

    return max((max_relative_error(g, w) for g, w in zip(got, want)), default=0.0)


def _child_main(kit_dir: str, device_text: str, repeat: int, min_repeat_ms: int) -> None:
    from cw.engine import parse_device, tvm_device
    from cw.tvm_env import load_tvm

    tvm = load_tvm()
    kit = read_kit(Path(kit_dir))
    tasks = {t["id"]: t for t in kit["tasks"]}
    device = tvm_device(*parse_device(device_text))
    libraries: dict[str, object] = {}
    references: dict[str, list[np.ndarray] | None] = {}

    def run_once(task, lib, cand):
        args = _args(task, tvm, device, seed=0)
        lib[cand](*args)
        device.sync()
        return args, [a.numpy() for a in args]

    for line in sys.stdin:
        task_id, cand = line.split()
        print(BEGIN + line.strip(), flush=True)
        task = tasks[task_id]
        result: dict = {"task": task_id, "candidate": cand}
        try:
            if task_id not in libraries:
                libraries[task_id] = tvm.runtime.load_module(str(Path(kit_dir) /
                                                                 task["library"]))
            lib = libraries[task_id]
            ref = task.get("reference")
            if task_id not in references and ref and ref != cand:
                try:
                    references[task_id] = run_once(task, lib, ref)[1]
                except Exception:  # noqa: BLE001  (its own line says so; others go unchecked)
                    references[task_id] = None
            args, outputs = run_once(task, lib, cand)
            if ref == cand:
                references[task_id] = outputs
            want = references.get(task_id)
            if want is not None and cand != ref:
                err = _max_relative_error(outputs, want)
                result["max_rel_err"] = err
                if not err <= task["tolerance"]:
                    result.update(error=f"wrong answer: max relative error {err:.2e} against "
                                        f"{ref}", wrong=True)
            if "error" not in result:
                timer = lib.time_evaluator(cand, device, number=1, repeat=repeat,
                                           min_repeat_ms=min_repeat_ms)
                result["run_secs"] = [float(s) for s in timer(*args).results]
        except Exception as e:  # noqa: BLE001  (a failed candidate is a result, not a stop)
            lines = str(e).strip().splitlines() or [type(e).__name__]
            result["error"] = lines[-1][:300]
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    _child_main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
