"""Prometheus text metrics for the controller, served over HTTP from a thread of its own."""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LATENCY_BUCKETS_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)
_BUCKETS_NS = [b * 1_000_000 for b in LATENCY_BUCKETS_MS]  # upper bounds, inclusive


class Metrics:
    def __init__(self):
        self._lock = threading.Lock()
        self.requests = Counter()       # status -> count
        self.in_slo = 0
        self.latency_buckets = [0] * (len(LATENCY_BUCKETS_MS) + 1)
        self.latency_sum_s = 0.0
        self.actions = Counter()        # (kind, status) -> count
        self.queue_length = 0
        self.gpu_busy = {}              # "worker/gpu" -> busy fraction
        self.gpu_models = {}            # "worker/gpu" -> loaded models
        self.started_s = None
        self.now_s = None

    def request(self, status: str, latency_ns: int, in_slo: bool) -> None:
        with self._lock:
            self.requests[status] += 1
            self.in_slo += in_slo
            if status == "OK":
                self.latency_buckets[bisect.bisect_left(_BUCKETS_NS, latency_ns)] += 1
                self.latency_sum_s += latency_ns / 1e9

    def action(self, kind: str, status: str) -> None:
        with self._lock:
            self.actions[(kind, status)] += 1

    def gauges(self, queue_length: int, busy: dict, models: dict, now_s: float) -> None:
        with self._lock:
            self.queue_length = queue_length
            self.gpu_busy, self.gpu_models = dict(busy), dict(models)
            self.now_s = now_s
            if self.started_s is None:
                self.started_s = now_s

    def render(self) -> str:
        with self._lock:
            lines = ["# TYPE cw_requests_total counter"]
            for status, n in sorted(self.requests.items()):
                lines.append(f'cw_requests_total{{status="{status}"}} {n}')
            lines += ["# TYPE cw_requests_in_slo_total counter",
                      f"cw_requests_in_slo_total {self.in_slo}"]
            elapsed = (self.now_s or 0) - (self.started_s or 0)
            lines += ["# TYPE cw_goodput_rps gauge",
                      f"cw_goodput_rps {self.in_slo / elapsed if elapsed > 0 else 0:.3f}"]
            lines.append("# TYPE cw_latency_seconds histogram")
            cumulative = 0
            for bound, count in zip(LATENCY_BUCKETS_MS, self.latency_buckets):
                cumulative += count
                lines.append(f'cw_latency_seconds_bucket{{le="{bound / 1000}"}} {cumulative}')
            cumulative += self.latency_buckets[-1]
            lines += [f'cw_latency_seconds_bucket{{le="+Inf"}} {cumulative}',
                      f"cw_latency_seconds_sum {self.latency_sum_s:.6f}",
                      f"cw_latency_seconds_count {cumulative}",
                      "# TYPE cw_queue_length gauge", f"cw_queue_length {self.queue_length}",
                      "# TYPE cw_actions_total counter"]
            for (kind, status), n in sorted(self.actions.items()):
                lines.append(f'cw_actions_total{{kind="{kind}",status="{status}"}} {n}')
            lines.append("# TYPE cw_gpu_busy_fraction gauge")
            for gpu, frac in sorted(self.gpu_busy.items()):
                lines.append(f'cw_gpu_busy_fraction{{gpu="{gpu}"}} {frac:.4f}')
            lines.append("# TYPE cw_gpu_loaded_models gauge")
            for gpu, n in sorted(self.gpu_models.items()):
                lines.append(f'cw_gpu_loaded_models{{gpu="{gpu}"}} {n}')
            return "\n".join(lines) + "\n"


def serve_metrics(metrics: Metrics, port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
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
