"""report.html: a self-contained page (inline SVG, no scripts, no downloads) of one or several
replays, built from their telemetry CSVs and summary.json alone."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np

from cw.errors import UsageError, writing
from cw.replay.columns import actions_of, read_columns, requests_of
from cw.replay.per_model import ModelFigures, attainment_spread, most_missed, per_model
from cw.serve.telemetry import ActionRow, RequestRow

W, H, PAD = 560, 240, 44
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]


def _svg(title: str, series: list[tuple[str, np.ndarray, np.ndarray]], xlabel: str, ylabel: str,
         vlines: tuple[float, ...] = (), log_y: bool = False, steps: bool = False) -> str:
    xs = [x for _, x, _ in series if len(x)]
    ys = [y for _, _, y in series if len(y)]
    if not xs:
        return f"<figure><figcaption>{html.escape(title)}: no data</figcaption></figure>"
    x0, x1 = min(float(x.min()) for x in xs), max(float(x.max()) for x in xs)
    x1 = max([x1, *vlines])
    y_all = np.concatenate(ys)
    if log_y:
        y_all = y_all[y_all > 0]
    y0 = 0.0 if not log_y else float(y_all.min()) if y_all.size else 1e-3
    y1 = float(y_all.max()) if y_all.size else 1.0
    if y1 <= y0:
        y1 = y0 + 1
    x1 = x1 if x1 > x0 else x0 + 1

    def sx(x):
        return PAD + (x - x0) / (x1 - x0) * (W - 2 * PAD)

    def sy(y):
        if log_y:
            y = np.maximum(y, y0)
            return H - PAD - (np.log10(y) - np.log10(y0)) / (np.log10(y1) - np.log10(y0) or 1) \
                * (H - 2 * PAD)
        return H - PAD - (y - y0) / (y1 - y0) * (H - 2 * PAD)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
             f'font-family="sans-serif" font-size="11">',
             f'<rect width="{W}" height="{H}" fill="white"/>',
             f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="#444"/>',
             f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" stroke="#444"/>',
             f'<text x="{W / 2}" y="16" text-anchor="middle" font-weight="bold">'
             f'{html.escape(title)}</text>',
             f'<text x="{W / 2}" y="{H - 8}" text-anchor="middle">{html.escape(xlabel)}</text>',
             f'<text x="12" y="{H / 2}" transform="rotate(-90 12 {H / 2})" text-anchor="middle">'
             f'{html.escape(ylabel)}</text>']
    for frac in (0, 0.5, 1):
        xv, yv = x0 + frac * (x1 - x0), (y0 * (y1 / y0) ** frac if log_y else y0 + frac * (y1 - y0))
        parts.append(f'<text x="{sx(xv):.1f}" y="{H - PAD + 14}" text-anchor="middle">'
                     f'{xv:.4g}</text>')
        parts.append(f'<text x="{PAD - 4}" y="{sy(yv):.1f}" text-anchor="end">{yv:.4g}</text>')
    for vline in vlines:
        parts.append(f'<line x1="{sx(vline):.1f}" y1="{PAD}" x2="{sx(vline):.1f}" '
                     f'y2="{H - PAD}" stroke="#888" stroke-dasharray="4 3"/>')
    for i, (label, x, y) in enumerate(series):
        if not len(x):
            continue
        if len(x) > 2000:  # keep the page small: thin evenly
            idx = np.linspace(0, len(x) - 1, 2000).astype(int)
            x, y = x[idx], y[idx]
        px, py = sx(np.asarray(x, float)), sy(np.asarray(y, float))
        if steps:
            pts = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(np.repeat(px, 2)[1:],
                                                                np.repeat(py, 2)[:-1]))
        else:
            pts = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(px, py))
        color = COLORS[i % len(COLORS)]
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{pts}"/>')
        parts.append(f'<text x="{W - PAD - 4}" y="{PAD + 14 * i}" text-anchor="end" '
                     f'fill="{color}">{html.escape(label)}</text>')
    parts.append("</svg>")
    return "<figure>" + "".join(parts) + "</figure>"


def _cdf(values) -> tuple[np.ndarray, np.ndarray]:
    v = np.sort(np.asarray(values, dtype=float))
    return v, (np.arange(1, v.size + 1) / v.size if v.size else v)


class Run:
    """One replay output directory."""

    def __init__(self, directory: str | Path, summary: dict | None = None,
                 requests: list[RequestRow] | None = None,
                 actions: list[ActionRow] | None = None):
        """Reads the directory, or takes rows already in memory (a replay that just ran)."""
        d = Path(directory)
        self.dir = d
        if summary is None or requests is None or actions is None:
            if not d.is_dir():
                what = "a file, not a directory" if d.exists() else "no such directory"
                raise UsageError(f"no replay output at {d}: {what}",
                                 "give a directory written by `cw replay --out`")
            missing = [f for f in ("summary.json", "requests.csv", "actions.csv")
                       if not (d / f).is_file()]
            if missing:
                raise UsageError(f"{d} is not a replay output: {', '.join(missing)} missing",
                                 "give a directory written by `cw replay --out`")
            try:
                summary = json.loads((d / "summary.json").read_text())
            except ValueError as e:  # (JSONDecodeError, UnicodeDecodeError)
                summary = f"not JSON ({e})"
            if not isinstance(summary, dict):
                raise UsageError(f"{d / 'summary.json'} is damaged: "
                                 f"{summary if isinstance(summary, str) else 'not a JSON object'}",
                                 "the file was edited or cut short; re-run the replay")
            requests = read_columns(d / "requests.csv", RequestRow)
            actions = read_columns(d / "actions.csv", ActionRow)
            if "model_attainment" not in summary:  # written before summaries had it
                summary["model_attainment"] = attainment_spread(per_model(requests))
        self.summary, self.requests, self.actions = summary, requests, actions
        self.label = run_label(self.summary, d.name)


COMPARE_FILE, COMPARE_RUNS = "compare.html", "compare.json"


def is_comparison(directory: Path) -> bool:
    """Whether `directory` holds several runs side by side (`cw replay --scheduler a,b`)."""
    return (directory.is_dir() and not (directory / "summary.json").exists()
            and ((directory / COMPARE_RUNS).is_file() or (directory / COMPARE_FILE).is_file()))


def expand_runs(paths: list[Path]) -> list[Path]:
    """Replay output directories, a side-by-side one standing for its runs, in their order
    (by name where it predates compare.json)."""
    runs: list[Path] = []
    for path in paths:
        if not is_comparison(path):
            runs.append(path)
        elif (path / COMPARE_RUNS).is_file():
            try:
                names = json.loads((path / COMPARE_RUNS).read_text())["runs"]
            except (ValueError, KeyError, TypeError):
                raise UsageError(f"{path / COMPARE_RUNS} is damaged",
                                 "name the runs' directories in it instead") from None
            runs += [path / name for name in names]
        else:
            runs += sorted(d for d in path.iterdir() if (d / "summary.json").is_file())
    seen: dict[Path, Path] = {}
    for run in runs:
        first = seen.setdefault(run.resolve(), run)
        if first is not run:
            again = "" if first == run else f" (as {first})"
            raise UsageError(f"run {run} is given twice{again}",
                             "name each run once; a side-by-side output stands for all its runs")
    return runs


def run_name(policy: str, slo_ms: float | None = None) -> str:
    """The directory of one run of `cw replay --scheduler a,b [--slo x,y]`: the policy's spec
    made a file name, and the SLO where several are compared (`clockwork-slo-25ms`)."""
    from cw.serve.scheduler.spec import spec_label

    return spec_label(policy) + ("" if slo_ms is None else f"-slo-{slo_ms:g}ms")


def run_label(summary: dict, default_name: str = "") -> str:
    """What a run is called in tables and legends: its policy (and SLO, in a comparison of
    SLOs), and its directory's name where that says more (two runs of one policy, say)."""
    policy, name = summary.get("scheduler", "?"), summary.get("name", default_name)
    slo_ms = summary.get("slo_ms")
    if name in ("", policy, run_name(policy)):
        return policy
    if slo_ms is not None and name == run_name(policy, slo_ms):
        return f"{policy}, SLO {slo_ms:g} ms"
    return f"{policy} ({name})"


def _per_bucket(times_ns, weights=None, bucket_s=10.0, t_end_s=None):
    t = np.asarray(times_ns, dtype=float) / 1e9
    if t_end_s is None:
        t_end_s = float(t.max()) if t.size else 0
    edges = np.arange(0, t_end_s + bucket_s, bucket_s)
    if edges.size < 2:
        edges = np.array([0, bucket_s])
    counts, _ = np.histogram(t, bins=edges, weights=weights)
    return edges[:-1], counts


class RunSeries:
    """What a report needs of one run: its label, summary and the (label, x, y) series of each
    figure, long ones thinned as the plots thin them. Small enough to pass between processes,
    so that parallel replays send these instead of millions of rows."""

    def __init__(self, label: str, summary: dict, figures: list[list[tuple]],
                 most_missed: list[ModelFigures] = ()):
        self.label, self.summary, self.figures = label, summary, figures
        self.most_missed = list(most_missed)


def _thin(x, y, points: int = 2000):
    if len(x) <= points:
        return x, y
    idx = np.linspace(0, len(x) - 1, points).astype(int)
    return np.asarray(x)[idx], np.asarray(y)[idx]


def shared_axis(summaries: list[dict]) -> tuple[float, float]:
    """(duration, bucket) seconds: runs side by side share their time buckets."""
    dur = max(s.get("duration_s", 0) for s in summaries) or 1
    return dur, max(1.0, dur / 60)


def run_series(r: Run, dur: float, bucket: float) -> RunSeries:
    req, act = requests_of(r.requests), actions_of(r.actions)
    ok = req.equals("status", "OK")
    models = per_model(req)

    def ran(kind):  # actions of `kind` that ran
        return act.equals("kind", kind) & act.equals("status", "OK")

    def load():
        res = []
        for label, times in (("offered", req["arrival_ns"]),
                             ("throughput", req["completion_ns"][ok]),
                             ("goodput", req["completion_ns"][req["deadline_met"]])):
            x, c = _per_bucket(times, bucket_s=bucket, t_end_s=dur)
            res.append((label, x, c / bucket))
        return res

    def lat_time():
        if not ok.any():
            return []
        t = req["completion_ns"][ok] / 1e9
        lat = req["latency_ns"][ok] / 1e6
        edges = np.arange(0, dur + bucket, bucket)
        idx = np.digitize(t, edges) - 1
        xs, p50, p99, mx = [], [], [], []
        for b in range(len(edges) - 1):
            sel = lat[idx == b]
            if sel.size:
                xs.append(edges[b])
                p50.append(np.percentile(sel, 50))
                p99.append(np.percentile(sel, 99))
                mx.append(sel.max())
        xs = np.array(xs)
        return [("p50", xs, np.array(p50)), ("p99", xs, np.array(p99)), ("max", xs, np.array(mx))]

    def lat_cdf():
        x, y = _cdf(req["latency_ns"][ok] / 1e6)
        return [("latency", x, y)]

    def model_cdf():
        x, y = _cdf([m.attainment for m in models])
        return [("models", x, y)]

    def batches():
        b = act["batch_size"][ran("infer")]
        sizes = np.arange(1, 17)
        return [("INFERs", sizes, np.array([(b == s).sum() for s in sizes]))]

    def cold():
        x1, c1 = _per_bucket(req["arrival_ns"][req["cold_start"]], bucket_s=bucket, t_end_s=dur)
        x2, c2 = _per_bucket(act["sent_ns"][act.equals("kind", "load")], bucket_s=bucket,
                             t_end_s=dur)
        return [("cold starts", x1, c1), ("loads", x2, c2)]

    def busy():
        res = []
        gpus = max(1, len(set(zip(act["worker"].tolist(), act["gpu"].tolist()))))
        for kind, label in (("infer", "GPU (EXEC)"), ("load", "PCIe (LOAD)")):
            done = ran(kind)
            x, c = _per_bucket(act["start_ns"][done], weights=act["measured_ns"][done],
                               bucket_s=bucket, t_end_s=dur)
            res.append((label, x, c / (bucket * 1e9 * gpus)))
        return res

    def pred():
        res = []
        for kind in ("infer", "load"):
            x, y = _cdf(act["prediction_error_ns"][ran(kind)] / 1e3)
            res.append((f"{kind} prediction error", x, y))
        x, y = _cdf(act["completion_error_ns"][ran("infer")] / 1e3)
        res.append(("infer completion error", x, y))
        return res

    def answer():
        done = ran("infer")
        end, sent, got = act["end_ns"][done], act["result_sent_ns"][done], act["result_ns"][done]
        stamped = sent > 0
        return [(label, *_cdf(v / 1e3)) for label, v in (
            ("EXEC end → result here", got - end), ("in the worker", (sent - end)[stamped]),
            ("way back", (got - sent)[stamped])) if v.size]

    return RunSeries(r.label, r.summary,
                     [[(label, *_thin(x, y)) for label, x, y in fn()]
                      for fn in (load, lat_time, lat_cdf, model_cdf, batches, cold, busy, pred,
                                 answer)],
                     most_missed(models))


def figures(runs: list[RunSeries], bucket: float) -> list[str]:
    slos_ms = tuple(sorted({r.summary["slo_ms"] for r in runs if r.summary.get("slo_ms")}))
    specs = [  # title, x label, y label, options; in run_series's order
        ("Offered load, throughput and goodput", "time (s)", "requests/s", {"steps": True}),
        ("Latency over time", "time (s)", "latency (ms)", {}),
        ("Latency CDF (dashed: SLO)", "latency (ms)", "fraction of served requests",
         {"vlines": slos_ms}),
        ("SLO attainment per model (CDF over models)", "fraction of its requests in the SLO",
         "fraction of models", {"steps": True}),
        ("Batch sizes", "batch size", "INFER actions", {"steps": True}),
        (f"Cold starts and loads per {bucket:g} s", "time (s)", "count", {"steps": True}),
        ("Busy fraction (mean over GPUs)", "time (s)", "fraction", {"steps": True}),
        ("Prediction and completion error CDFs", "measured − expected (µs)",
         "fraction of actions", {}),
        ("Answer delay CDFs: INFER's EXEC end → its result at the controller", "delay (µs)",
         "fraction of INFERs", {}),
    ]
    figs = []
    for i, (title, xlabel, ylabel, options) in enumerate(specs):
        series = [(label if len(runs) == 1 else f"{r.label}: {label}", x, y)
                  for r in runs for label, x, y in r.figures[i]]
        figs.append(_svg(title, series, xlabel, ylabel, **options))
    return figs


SUMMARY_KEYS = [("SLO ms", "slo_ms"), ("requests", "requests"), ("offered r/s", "offered_rps"),
                ("goodput r/s", "goodput_rps"), ("SLO attainment", "slo_attainment"),
                ("rejected", "rejected"), ("late", "late"), ("timed out", "timed_out"),
                ("errors", "errors"),
                ("p50 ms", ("latency_ms", "p50")), ("p99 ms", ("latency_ms", "p99")),
                ("p99.99 ms", ("latency_ms", "p9999")), ("max ms", ("latency_ms", "max")),
                ("mean batch", "mean_batch_size"), ("cold starts", "cold_starts"),
                ("models asked", ("model_attainment", "models")),
                ("p10 model in SLO", ("model_attainment", "p10"))]


def summary_value(summary: dict, key):
    if isinstance(key, tuple):
        return (summary.get(key[0]) or {}).get(key[1])
    return summary.get(key)


def _cell(value) -> str:
    return "n/a" if value is None else str(value)


TIMING_SOURCES = {"profile": "from their bundles' profile.json",
                  "profile-partial": "from their bundles' profile.json (sizes it lacks "
                                     "interpolated)",
                  "zoo-profile": "measured on the GPU machine (model_zoo/profiles)",
                  "paper": "from Clockwork's Table 1 (V100)",
                  "default": "from size-based defaults (no profile)"}


def timings_note(timings: dict | None) -> str:
    """Where a simulation's durations came from: "50 instances measured on ..., 30 ..."."""
    if not timings:
        return ""
    return ", ".join(f"{n} instance{'s' * (n != 1)} {TIMING_SOURCES.get(source, source)}"
                     for source, n in timings.items())


MODEL_COLUMNS = ("model", "requests", "missed", "in SLO", "rejected", "late", "errors",
                 "cold starts", "p99 ms")


def most_missed_tables(runs: list[RunSeries]) -> str:
    """Per run, the models that missed the most requests: where its losses are."""
    parts = []
    for r in runs:
        if not r.most_missed:
            continue
        head = "".join(f"<th>{c}</th>" for c in MODEL_COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in (
                m.model, m.requests, m.missed, f"{m.attainment:.4f}", m.rejected, m.late,
                m.errors, m.cold_starts, m.p99_ms)) + "</tr>" for m in r.most_missed)
        parts.append(f"<table class='models'><caption>{html.escape(r.label)}</caption>"
                     f"<tr>{head}</tr>{body}</table>")
    if not parts:
        return ""
    return ("<h2>Models that missed the most requests</h2>"
            "<p>missed: requests not answered OK within their SLO.</p>" + "".join(parts))


def render(runs: list[Run | RunSeries]) -> str:
    dur, bucket = shared_axis([r.summary for r in runs])
    runs = [r if isinstance(r, RunSeries) else run_series(r, dur, bucket) for r in runs]
    head = "".join(f"<th>{html.escape(r.label)}</th>" for r in runs)
    rows = ""
    for label, key in SUMMARY_KEYS:
        cells = "".join(f"<td>{html.escape(_cell(summary_value(r.summary, key)))}</td>"
                        for r in runs)
        rows += f"<tr><th>{label}</th>{cells}</tr>"
    sim = any(r.summary.get("simulated") for r in runs)
    meta = "<br>".join(
        html.escape(f"{r.label}: trace {r.summary.get('trace')}, runtime "
                    f"{r.summary.get('runtime')}"
                    + (f" ({r.summary['sim_engine']} simulator)" if r.summary.get("sim_engine")
                       else "") + f", SLO {r.summary.get('slo_ms')} ms, seed "
                    f"{r.summary.get('seed')}, {r.summary.get('duration_s')} s"
                    + (f"; durations: {timings_note(r.summary['timings'])}"
                       if r.summary.get("timings") else "")) for r in runs)
    banner = ("<p class='sim'>SIMULATED: durations come from profiles (or the paper's figures), "
              "no device ran.</p>" if sim else "")
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>cw replay report</title>
<style>body{{font-family:sans-serif;margin:24px;max-width:1200px}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}caption{{text-align:left;
font-weight:bold;padding:8px 0 2px}}.models{{display:inline-table;vertical-align:top;margin:6px}}figure{{display:inline-block;
margin:6px}}.sim{{background:#fff3cd;padding:6px;border:1px solid #e0c060}}</style></head><body>
<h1>cw replay report</h1>{banner}<p>{meta}</p>
<table><tr><th></th>{head}</tr>{rows}</table>
{''.join(figures(runs, bucket))}
{most_missed_tables(runs)}
</body></html>
"""


def write_report(runs: list[Run | RunSeries | str | Path], out: str | Path) -> Path:
    runs = [r if isinstance(r, (Run, RunSeries)) else Run(r) for r in runs]
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp")
    page = render(runs)
    try:
        with writing(out, "-o"):
            tmp.write_text(page)
            tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return out
