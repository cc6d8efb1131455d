"""Prometheus text metrics for the controller, served over HTTP from a thread of its own."""

from __future__ import annotations

import bisect
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LATENCY_BUCKETS_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)
# How long one controller loop iteration keeps the loop busy (handling, planning, telemetry):
# anything near the answer guard (1 ms) or the completion margin (2 ms) can make answers late.
LOOP_BUCKETS_MS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 25, 50, 100)


class Histogram:
    """Counts of durations per bucket (upper bounds in ms, inclusive; one overflow bucket), their
    sum and the largest. Observed by one thread; a scrape reads it as it stands."""

    def __init__(self, bounds_ms):
        self.bounds_ms = tuple(bounds_ms)
        self._bounds_ns = [int(b * 1_000_000) for b in self.bounds_ms]
        self.counts = [0] * (len(self.bounds_ms) + 1)
        self.sum_ns = 0
        self.max_ns = 0

    def observe(self, ns: int) -> None:
        self.counts[bisect.bisect_left(self._bounds_ns, ns)] += 1
        self.sum_ns += ns
        if ns > self.max_ns:
            self.max_ns = ns

    def over(self, bound_ms: float) -> int:
        """How many observations exceeded `bound_ms`, one of the bounds."""
        return sum(self.counts[self.bounds_ms.index(bound_ms) + 1:])

    def render(self, name: str) -> list[str]:
        lines = [f"# TYPE {name} histogram"]
        cumulative = 0
        for bound, count in zip(self.bounds_ms, self.counts):
            cumulative += count
            lines.append(f'{name}_bucket{{le="{bound / 1000:g}"}} {cumulative}')
        cumulative += self.counts[-1]
        return lines + [f'{name}_bucket{{le="+Inf"}} {cumulative}',
                        f"{name}_sum {self.sum_ns / 1e9:.6f}", f"{name}_count {cumulative}"]


def loop_summary(busy: Histogram, intake: Histogram | None = None) -> dict:
    """The controller loop's busy times, for a replay's summary.json: iterations that kept it
    busy past the answer guard (1 ms) or the completion margin (2 ms) are what answer late.
    With `intake`: how long requests from clients on its clock waited to be taken in."""
    out = {"iterations": sum(busy.counts), "max_ms": round(busy.max_ns / 1e6, 3),
           "over_1ms": busy.over(1), "over_2ms": busy.over(2), "over_5ms": busy.over(5)}
    if intake is not None:
        out["intake"] = {"requests": sum(intake.counts), "max_ms": round(intake.max_ns / 1e6, 3),
                         "over_1ms": intake.over(1), "over_2ms": intake.over(2),
                         "over_5ms": intake.over(5)}
    return out


class Metrics:
    def __init__(self, scheduler: str = ""):
        self._lock = threading.Lock()
        self.scheduler = scheduler      # the policy spec, for dashboards comparing deployments
        self.requests = Counter()       # status -> count
        self.in_slo = 0
        self.latency = Histogram(LATENCY_BUCKETS_MS)  # answered OK
        self.loop_busy = Histogram(LOOP_BUCKETS_MS)   # controller loop iterations
        # a request's send (by a client on the controller's clock) to the loop taking it in
        self.intake = Histogram(LOOP_BUCKETS_MS)
        self.actions = Counter()        # (kind, status) -> count
        self.queue_length = 0
        self.workers = 0                # joined now
        self.gpu_busy = {}              # "worker/gpu" -> busy fraction
        self.gpu_models = {}            # "worker/gpu" -> loaded models
        self.clocks = {}                # worker name -> (offset, estimate, rtt) in ns
        self.windows = {}               # worker name -> (INFER slack, completion margin) in ns
        self.started_s = None
        self.now_s = None
        self.telemetry_held_bytes = 0   # formatted for --log-dir, not written yet
        self.telemetry_lost_rows = 0    # never reached --log-dir (it was full, say)
        self.telemetry_failing = False  # writing to --log-dir fails now

    def request(self, status: str, latency_ns: int, in_slo: bool) -> None:
        with self._lock:
            self.requests[status] += 1
            self.in_slo += in_slo
            if status == "OK":
                self.latency.observe(latency_ns)

    def served_text(self) -> str:
        """What was answered, for a server's last line: "1,234 requests: 1,229 in SLO, 5
        rejected" ("" before any)."""
        with self._lock:
            total = sum(self.requests.values())
            if not total:
                return ""
            parts = [f"{self.in_slo:,} in SLO"]
            if self.requests["OK"] > self.in_slo:
                parts.append(f"{self.requests['OK'] - self.in_slo:,} OK but late")
            parts += [f"{n:,} {status.lower().replace('_', ' ')}"
                      for status, n in sorted(self.requests.items()) if status != "OK" and n]
        return f"{total:,} request{'s' if total != 1 else ''}: " + ", ".join(parts)

    def action(self, kind: str, status: str) -> None:
        with self._lock:
            self.actions[(kind, status)] += 1

    def worker_clock(self, worker: str, offset_ns: int, estimate_ns: int, rtt_ns: int) -> None:
        with self._lock:
            self.clocks[worker] = (offset_ns, estimate_ns, rtt_ns)

    def worker_gone(self, worker: str) -> None:
        """A gone worker's clock is not a reading any more (and names may come and go for
        weeks)."""
        with self._lock:
            self.clocks.pop(worker, None)
            self.windows.pop(worker, None)

    def gauges(self, queue_length: int, busy: dict, models: dict, now_s: float,
               workers: int = 0, windows: dict | None = None) -> None:
        """`windows`: worker name -> (INFER slack, completion margin) in ns, as the scheduler
        plans that worker's INFERs now (Scheduler.worker_windows)."""
        with self._lock:
            self.queue_length = queue_length
            self.workers = workers
            self.windows = dict(windows or {})
            self.gpu_busy, self.gpu_models = dict(busy), dict(models)
            self.now_s = now_s
            if self.started_s is None:
                self.started_s = now_s

    def telemetry(self, held_bytes: int, lost_rows: int, failing: bool) -> None:
        with self._lock:
            self.telemetry_held_bytes = held_bytes
            self.telemetry_lost_rows = lost_rows
            self.telemetry_failing = failing

    def render(self) -> str:
        with self._lock:
            lines = ["# TYPE cw_scheduler_info gauge",
                     f'cw_scheduler_info{{scheduler="{self.scheduler}"}} 1',
                     "# TYPE cw_requests_total counter"]
            for status, n in sorted(self.requests.items()):
                lines.append(f'cw_requests_total{{status="{status}"}} {n}')
            lines += ["# TYPE cw_requests_in_slo_total counter",
                      f"cw_requests_in_slo_total {self.in_slo}"]
            elapsed = (self.now_s or 0) - (self.started_s or 0)
            lines += ["# TYPE cw_goodput_rps gauge",
                      f"cw_goodput_rps {self.in_slo / elapsed if elapsed > 0 else 0:.3f}"]
            lines += self.latency.render("cw_latency_seconds")
            lines += self.loop_busy.render("cw_controller_loop_busy_seconds")
            lines += ["# TYPE cw_controller_loop_busy_max_seconds gauge",
                      f"cw_controller_loop_busy_max_seconds {self.loop_busy.max_ns / 1e9:.6f}"]
            lines += self.intake.render("cw_controller_intake_seconds")
            lines += [
                      "# TYPE cw_queue_length gauge", f"cw_queue_length {self.queue_length}",
                      "# TYPE cw_workers gauge", f"cw_workers {self.workers}",
                      "# TYPE cw_actions_total counter"]
            for (kind, status), n in sorted(self.actions.items()):
                lines.append(f'cw_actions_total{{kind="{kind}",status="{status}"}} {n}')
            lines.append("# TYPE cw_gpu_busy_fraction gauge")
            for gpu, frac in sorted(self.gpu_busy.items()):
                lines.append(f'cw_gpu_busy_fraction{{gpu="{gpu}"}} {frac:.4f}')
            lines.append("# TYPE cw_gpu_loaded_models gauge")
            for gpu, n in sorted(self.gpu_models.items()):
                lines.append(f'cw_gpu_loaded_models{{gpu="{gpu}"}} {n}')
            lines += ["# TYPE cw_telemetry_failing gauge",
                      f"cw_telemetry_failing {int(self.telemetry_failing)}",
                      "# TYPE cw_telemetry_held_bytes gauge",
                      f"cw_telemetry_held_bytes {self.telemetry_held_bytes}",
                      "# TYPE cw_telemetry_lost_rows_total counter",
                      f"cw_telemetry_lost_rows_total {self.telemetry_lost_rows}"]
            # how the scheduler plans each worker's INFERs: both widen for a worker that is
            # late to start them or slow to answer (SchedulerConfig.adapt_slack, the learned
            # completion margin)
            for i, name in enumerate(("infer_slack", "completion_margin")):
                lines.append(f"# TYPE cw_worker_{name}_seconds gauge")
                for worker, values in sorted(self.windows.items()):
                    lines.append(f'cw_worker_{name}_seconds{{worker="{worker}"}} '
                                 f"{values[i] / 1e9:.6f}")
            # the offset a worker translates windows with; on one host it is pinned to 0 and
            # the round-trip estimate beside it shows the error that pinning avoids
            for i, name in enumerate(("offset", "estimate", "rtt")):
                lines.append(f"# TYPE cw_worker_clock_{name}_seconds gauge")
                for worker, values in sorted(self.clocks.items()):
                    lines.append(f'cw_worker_clock_{name}_seconds{{worker="{worker}"}} '
                                 f"{values[i] / 1e9:.9f}")
            return "\n".join(lines) + "\n"

    def health(self, now_s: float) -> tuple[bool, str]:
        """Whether the controller can serve (`now_s`: its loop's clock, time.monotonic()):
        a worker has joined, and the loop updated its gauges within `HEALTH_STALE_S`."""
        with self._lock:
            if self.now_s is None:
                return False, "the controller has not started serving"
            quiet = now_s - self.now_s
            if quiet > HEALTH_STALE_S:
                return False, f"the controller's loop has not run for {quiet:.1f} s"
            if not self.workers:
                return False, "no worker has joined"
            return True, (f"ok: {self.workers} worker{'s' if self.workers != 1 else ''}, "
                          f"{len(self.gpu_busy)} GPU{'s' if len(self.gpu_busy) != 1 else ''}")


# a loop that has not updated its gauges (every 200 ms) for this long is stuck
HEALTH_STALE_S = 2.0


def serve_metrics(metrics: Metrics, port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/healthz":  # for load balancers and orchestrators
                ok, text = metrics.health(time.monotonic())
                body = (text + "\n").encode()
                self.send_response(200 if ok else 503)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            if self.path not in ("/metrics", "/"):
                self.send_error(404)
                return
            body = metrics.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
