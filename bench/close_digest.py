"""What a `close` call measured, as the tables docs/benchmarks.md takes and a verdict per issue.

    python bench/close_digest.py RESULTS        # results.tgz as it came back, or its folder

Reads what `bash bench/gpu_session.sh close` leaves (device.txt, fig5*/*/summary.json,
p9999*.json, accuracy.txt, torch-tails.txt, pytest-gpu.txt) and prints: Fig. 5 per run (goodput, late by the
controller's count and by the client's, where the client's late answers were lost, how busy the
client was), EXEC tails per bundle (isolated, through graphs, back to back, with when the
slowest runs came), the accuracy lines and PyTorch's tails; then whether issue 5's "none late"
and issue 7's p99.99/p50 <= 1.01 hold in this call, and whether the GPU tests passed. Reads files only: nothing here needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tarfile
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

TAIL_BAR = 1.01  # issue 7: EXEC p99.99 / p50
STAMP = "%Y-%m-%d %H:%M:%S,%f"  # the stall lines' time, and a replay's `clock_origin`
NEAR_MS = 10  # stall lines this close to a late answer's receipt are shown with it


def _load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def fig5_rows(root: Path) -> list[dict]:
    rows = []
    for f in sorted(root.glob("fig5*/fig5-*/summary.json")):
        s = _load(f)
        if not s:
            continue
        c = s.get("client_view") or {}
        cpu = (s.get("client_cpu") or {}).get("python") or []
        rows.append({
            "run": f"{f.parent.parent.name}/{f.parent.name}", "slo_ms": s.get("slo_ms"),
            "scheduler": s.get("scheduler"), "requests": s.get("requests"),
            "goodput": s.get("goodput_rps"), "late_controller": s.get("late"),
            "late_client": c.get("late"), "left_in_time": c.get("late_that_left_in_time"),
            "late_when_taken_in": c.get("late_when_taken_in"),
            "way_back_p99": (c.get("way_back_ms") or {}).get("p99"),
            "client_cores": max(cpu) if cpu else None})
    return rows


def late_near_stalls(root: Path, shown: int = 8) -> list[str]:
    """Each run's first late answers by the client's count (client_view's `late_answers`), each
    with the stall lines (its stalls.log: controller, workers, the replay's own client) logged
    within NEAR_MS of its receipt: what held it up, where a line says so."""
    out = []
    for f in sorted(root.glob("fig5*/fig5-*/summary.json")):
        s = _load(f) or {}
        late = (s.get("client_view") or {}).get("late_answers")
        if not late or not s.get("clock_origin"):
            continue
        origin = datetime.strptime(s["clock_origin"], STAMP)
        stalls = []
        try:
            text = (f.parent / "stalls.log").read_text(errors="replace")
        except OSError:
            text = ""
        for line in text.splitlines():
            try:
                stalls.append((datetime.strptime(line[:23], STAMP), line[24:]))
            except ValueError:
                continue
        out.append(f"{f.parent.parent.name}/{f.parent.name}: {len(late)} late answers listed "
                   f"(stall lines within {NEAR_MS} ms of each receipt)")
        for a in late[:shown]:
            got = origin + timedelta(seconds=a["sent_s"], milliseconds=a["answered_ms"])
            near = [text[:110] for when, text in stalls
                    if abs((got - when).total_seconds()) * 1e3 <= NEAR_MS]
            out.append(f"  sent {a['sent_s']:.3f} s {a['status']}: left {a['left_ms']} ms, "
                       f"taken in {a['taken_in_ms']} ms, answered {a['answered_ms']} ms; "
                       + ("; ".join(near) if near else "no stall line near"))
    return out


def _when(slowest: list[dict]) -> str:
    """The slowest runs by size, each with when it ran: `0.995 ms @4.10 s`."""
    top = sorted(slowest, key=lambda r: -r["exec_ns"])[:4]
    return ", ".join(f"{r['exec_ns'] / 1e6:.3f} @{r['at_ns'] / 1e9:.2f} s" for r in top)


def tail_rows(root: Path) -> list[dict]:
    rows = []
    for f in sorted(root.glob("p9999*.json")):
        d = _load(f)
        if not d or "profile" not in d:
            continue
        name = f.stem.removeprefix("p9999").lstrip("-")
        how = "graphs" if name.startswith("graphs-") else "VM"
        name = name.removeprefix("graphs-").removeprefix("b2b-")
        for b in d["profile"]["batches"]:
            e = b["exec"]
            rows.append({"bundle": name.rsplit("-b", 1)[0], "how": how + ", isolated",
                         "batch": b["batch_size"], "runs": e["n"], "p50": e["p50_ns"] / 1e6,
                         "p9999": e["p9999_ns"] / 1e6, "ratio": e["p9999_ns"] / e["p50_ns"],
                         "when": _when(b.get("exec_slowest") or []), "busy": None})
        for r in d.get("back_to_back") or []:
            e = r["exec"]
            rows.append({"bundle": name.rsplit("-b", 1)[0], "how": how + ", back to back",
                         "batch": r["batch_size"], "runs": e["n"], "p50": e["p50_ns"] / 1e6,
                         "p9999": e["p9999_ns"] / 1e6, "ratio": e["p9999_ns"] / e["p50_ns"],
                         "when": _when(r.get("exec_slowest") or []), "busy": r["busy"]})
    return rows


def gpu_tests(root: Path) -> dict | None:
    """pytest's closing counts in pytest-gpu.txt ({"passed": 40, ...}) and the tests it
    skipped (`-rs`), or None without that file or a closing line (the step was cut short).
    All skipped is no pass: they skip where no CUDA GPU is seen."""
    try:
        lines = (root / "pytest-gpu.txt").read_text().splitlines()
    except OSError:
        return None
    closing = [ln for ln in lines if re.search(r"\d+ (passed|failed|errors?|skipped)\b.* in [\d.]+s", ln)]
    if not closing:
        return None
    counts = {("error" if word.startswith("error") else word): int(n) for n, word in
              re.findall(r"(\d+) (passed|failed|errors?|skipped|deselected)", closing[-1])}
    return {"counts": counts, "skipped": [ln for ln in lines if ln.startswith("SKIPPED")]}


def _cell(v, fmt="{}") -> str:
    return "n/a" if v is None else fmt.format(v)


def digest(root: Path, out=sys.stdout) -> dict:
    """Print the tables; return the verdicts (None: nothing measured)."""
    device = (root / "device.txt").read_text().strip() if (root / "device.txt").exists() \
        else "unknown"
    print(f"device: {device}", file=out)
    fig5 = fig5_rows(root)
    print("\n| run | scheduler | requests | goodput r/s | late, controller | late, client | "
          "of those left in time | late when taken in | way back p99 ms | client cores |",
          file=out)
    print("|---|---|---|---|---|---|---|---|---|---|", file=out)
    for r in fig5:
        print(f"| {r['run']} | {r['scheduler']} | {_cell(r['requests'], '{:,}')} | "
              f"{_cell(r['goodput'])} | {_cell(r['late_controller'])} | "
              f"{_cell(r['late_client'])} | {_cell(r['left_in_time'])} | "
              f"{_cell(r['late_when_taken_in'])} | {_cell(r['way_back_p99'])} | "
              f"{_cell(r['client_cores'])} |", file=out)
    near = late_near_stalls(root)
    if near:
        print("\n" + "\n".join(near), file=out)
    tails = tail_rows(root)
    print("\n| bundle | EXEC | batch | runs | p50 ms | p99.99 ms | p99.99 / p50 | busy | "
          "slowest (ms @ when) |", file=out)
    print("|---|---|---|---|---|---|---|---|---|", file=out)
    for r in tails:
        print(f"| {r['bundle']} | {r['how']} | {r['batch']} | {r['runs']:,} | {r['p50']:.3f} | "
              f"{r['p9999']:.3f} | {r['ratio']:.4f} | {_cell(r['busy'], '{:.1%}')} | "
              f"{r['when']} |", file=out)
    for name in ("accuracy.txt", "torch-tails.txt"):
        if (root / name).exists():
            print(f"\n{name}:\n{(root / name).read_text().rstrip()}", file=out)
    # the verdicts: issue 5 by the client's count (the stricter), per SLO of the default runs
    # (`close` keeps them in fig5/, `client-stalls` in fig5-default-SLO/)
    default = [r for r in fig5 if r["run"].startswith(("fig5/", "fig5-default-"))]
    tests = gpu_tests(root)
    if tests is not None:
        print(f"\nGPU tests: {tests['counts']}", file=out)
        for line in tests["skipped"]:
            print(f"  {line}", file=out)
    verdicts = {
        "gpu_tests_passed": None if tests is None else (
            tests["counts"].get("passed", 0) > 0 and not tests["counts"].get("failed")
            and not tests["counts"].get("error")),
        "issue5_none_late": None if not default else all(
            r["late_client"] == 0 and r["late_controller"] == 0 for r in default),
        "issue7_tails_within_bar": None if not tails else {
            f"{r['bundle']} ({r['how']}) b{r['batch']}": r["ratio"] <= TAIL_BAR for r in tails},
    }
    print(f"\nGPU tests passed: {verdicts['gpu_tests_passed']}", file=out)
    print("issue 5, none late at "
          f"{', '.join(str(r['slo_ms']) + ' ms' for r in default) or 'no SLO'} "
          f"(both counts): {verdicts['issue5_none_late']}", file=out)
    if tails:
        held = [k for k, ok in verdicts["issue7_tails_within_bar"].items() if ok]
        missed = [k for k, ok in verdicts["issue7_tails_within_bar"].items() if not ok]
        print(f"issue 7, p99.99/p50 <= {TAIL_BAR}: held by {', '.join(held) or 'none'}; "
              f"missed by {', '.join(missed) or 'none'}", file=out)
    return verdicts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="results.tgz, or the folder it unpacks to")
    args = ap.parse_args()
    if args.results.is_dir():
        digest(args.results)
        return
    if not args.results.is_file():
        sys.exit(f"error: no {args.results} (give close's results.tgz or its folder)")
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(args.results) as tar:
            tar.extractall(tmp, filter="data")
        digest(Path(tmp))


if __name__ == "__main__":
    main()
