"""Do staged tuning kits still match the kernels `cw compile` builds today?

    python bench/kit_check.py MODEL.onnx KIT [KIT ...] [--batch-sizes 1,4,16]
        [--conv-algo direct|winograd2|winograd4] [--arch sm_90]

A kit's records apply only to kernels whose workload (TVM's structural hash of the kernel)
is the same as when it was staged; a change to the compile pipeline since then (a pass, a
legalization, cw's own conv kernels) would leave its candidates timed on the GPU for nothing.
Run it before spending device time on `bash bench/gpu_session.sh tune`: every task should
match; re-stage the kits that do not. Exit status 1 when some task does not match.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from cw.units import parse_batch_sizes


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("kits", nargs="+")
    ap.add_argument("--batch-sizes", default="1,4,16")
    ap.add_argument("--conv-algo", default="direct")
    ap.add_argument("--arch", default=None)
    args = ap.parse_args()
    from cw.compile.tuner import TuneConfig, extract_work, open_database
    from cw.tvm_env import load_tvm

    load_tvm()
    db = tempfile.mkdtemp(prefix="cw-kit-check-")
    stale_any = False
    for kit in args.kits:
        k = json.loads((Path(kit) / "kit.json").read_text())
        config = TuneConfig(db=db, target=k["device"], arch=args.arch,
                            batch_sizes=parse_batch_sizes(args.batch_sizes),
                            precision=k["precision"], conv_algo=args.conv_algo)
        work, _ = extract_work(args.model, config, open_database(Path(db)), lambda e, i: None)
        today = {str(w.workload.as_json()[0]) for w in work}
        stale = [t["name"] for t in k["tasks"] if t["workload_hash"] not in today]
        stale_any |= bool(stale)
        print(f"{kit}: {len(k['tasks'])} tasks, {len(k['tasks']) - len(stale)} match today's "
              f"{len(today)} kernels" + (f"; stale: {', '.join(sorted(set(stale)))}"
                                         if stale else ""))
    return 1 if stale_any else 0


if __name__ == "__main__":
    sys.exit(main())
