"""The floor of a Python virtual-time replay: per request, the least any event-driven
simulator in Python does — take the arrival, build a decision, pass its result through the
event heap, answer the request and keep two telemetry rows — with no scheduling logic at all
(one GPU, first come first served, fixed 1 ms EXEC).

    python bench/sim_floor.py [--requests 200000]

Compare with `bench/sim_speed.py`'s µs per request: issue 6's ×100 at 1,000 r/s leaves 10 µs
per request for everything.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import random
import time

from cw.serve.protocol import RequestStatus, Status
from cw.serve.scheduler.base import ActionResult, Finish, Request, SendInfer
from cw.serve.telemetry import ActionRow, RequestRow

MS = 1_000_000


def replay_floor(n: int) -> float:
    """Seconds of wall time to replay `n` requests with no policy."""
    rng = random.Random(0)
    arrivals = iter(sorted(rng.randrange(0, n * MS) for _ in range(n)))  # 1,000 r/s
    start_wall = time.perf_counter()
    events: list = []
    seq, request_ids, action_ids = itertools.count(), itertools.count(1), itertools.count(1)
    waiting: dict[int, Request] = {}
    request_rows, action_rows = [], []
    gpu_free_ns = 0
    arrival = next(arrivals, None)
    while arrival is not None or events:
        if arrival is not None and (not events or arrival <= events[0][0]):
            now = arrival
            arrival = next(arrivals, None)
            r = Request(next(request_ids), "m", 1, now, now + 100 * MS)
            waiting[r.request_id] = r
            start = max(now + MS // 5, gpu_free_ns)
            gpu_free_ns = start + MS
            d = SendInfer(next(action_ids), 1, 0, "m", 1, [r.request_id], start, start + 3 * MS, MS)
            result = ActionResult(d.action_id, Status.OK, start, start + MS, MS)
            heapq.heappush(events, (start + MS + MS // 5, next(seq), (d, result)))
        else:
            now, _, (d, result) = heapq.heappop(events)
            action_rows.append(ActionRow(
                d.action_id, "infer", "OK", 1, 0, "m", 1, 1, d.earliest_ns - MS // 5,
                d.earliest_ns, d.latest_ns, MS, d.earliest_ns + MS, result.start_ns, result.end_ns,
                MS, 0, 0, now, True))
            f = Finish(d.request_ids[0], RequestStatus.OK, action_id=d.action_id)
            r = waiting.pop(f.request_id)
            request_rows.append(RequestRow(
                r.request_id, r.model, 1, r.arrival_ns, r.deadline_ns, 100 * MS, now,
                now - r.arrival_ns, "OK", now <= r.deadline_ns, 1, 1, 0, d.action_id, False, True))
    return time.perf_counter() - start_wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200_000)
    args = ap.parse_args()
    wall = replay_floor(args.requests)
    per_request_us = wall / args.requests * 1e6
    print(f"{args.requests} requests at 1,000 r/s with no policy: {wall:.2f} s wall, "
          f"{per_request_us:.1f} µs per request, virtual/wall ×{1000 / per_request_us:.0f}")


if __name__ == "__main__":
    main()
