"""A sweep of small graphs (one operator each, in the forms its attributes and opsets allow;
old exports' idioms; I/O edge cases; recurrent layers) compiled by cw and checked against
onnxruntime on the file as written. Each graph ends as one of:

  OK        compiled for batch sizes 1 and 4, and within 1e-4 of onnxruntime at batch 1 and 3
            (relative to the largest output value); with --target cuda: compiled only
  WRONG     compiled, and further from onnxruntime than that: a bug, silent to a user
  DIFFERS   as WRONG, where onnxruntime is the one that departs from ONNX (the case file
            says why)
  REFUSED   cw said why, in one line (a cw error with a hint)
  CRASH     any other exception: a bug, even where the graph is one cw cannot take
  RUNFAIL   compiled, and running it (or onnxruntime) failed
  BADCASE   the graph is not valid ONNX (a mistake of the case, not of cw)

A graph whose convolutions compiled without their layout (TVM's conversion to NCHWc on the
CPU, or to CUTLASS's NHWC on CUDA, failed: slower, not wrong) is counted as "(fallback)" too.

    python bench/op_sweep.py                      # every group, CPU, ~15 min on 2 cores
    python bench/op_sweep.py --group resize --only nearest
    python bench/op_sweep.py --target cuda        # compile for sm_90 only (no GPU needed)
    python bench/op_sweep.py --out sweep.json     # one record per graph

The graphs are in bench/op_sweep_cases/. Stops 74 and 75 found the silently wrong forms listed
in docs/benchmarks.md this way; the ones that mattered are tests too.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

TOLERANCE = 1e-4


def _model(case):
    import onnx
    from onnx import helper

    outputs = case.outputs or [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)]
    graph = helper.make_graph(case.nodes, "sweep", case.inputs, outputs, case.inits)
    opsets = [helper.make_opsetid("", case.opset)]
    if any(n.domain == "com.microsoft" for n in case.nodes):  # onnxruntime's operators
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8 if case.opset < 21 else 10 if case.opset < 23 else 11
    if case.outputs is not None:
        onnx.checker.check_model(model, full_check=True)
        return model
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception:  # (the output's shape stays unknown, which the checker would refuse)
        return model
    model.graph.output[0].CopyFrom(inferred.graph.output[0])
    if model.graph.output[0].type.tensor_type.HasField("shape"):
        onnx.checker.check_model(model, full_check=True)
    return model


def _sample(dtype: str, shape, rng, scale: float) -> np.ndarray:
    if dtype.startswith("float"):
        return (scale * rng.standard_normal(shape)).astype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(1, 6, shape).astype(dtype)


def run_case(name: str, case, target: str, work: Path) -> dict:
    import onnx

    from cw.compile.compiler import CompileConfig, compile_model
    from cw.engine import run_bundle

    try:
        model = _model(case)
    except Exception as e:
        return {"status": "BADCASE", "detail": str(e).splitlines()[0][:200]}
    d = Path(tempfile.mkdtemp(dir=work))  # a new path per graph: dlopen keeps libraries by path
    onnx.save(model, d / "m.onnx")
    start = time.perf_counter()
    try:
        manifest = compile_model(d / "m.onnx", d / "b",
                                 CompileConfig(target=target, batch_sizes=(1, 4)))
    except Exception as e:
        lines = str(e).strip().splitlines()
        return {"status": "REFUSED" if hasattr(e, "hint") else "CRASH",
                "detail": (lines[0] if lines else type(e).__name__)[:300],
                "error": type(e).__name__}
    record = {"compile_s": round(time.perf_counter() - start, 2),
              "batch_sizes": list(manifest.batch_sizes)}
    # a layout conversion that failed compiles, slower: every convolution left as it was
    fallback = [n for n in manifest.notes if "layout conversion" in n and "failed" in n]
    if fallback:
        record["fallback"] = fallback[0][:200]
    if target == "cuda":
        return {"status": "OK", **record}
    errors = []
    try:
        for batch in (1, 3) if 4 in manifest.batch_sizes else (1,):
            rng = np.random.default_rng(batch)
            xs = [_sample(spec.dtype, (batch, *spec.sample_shape), rng, case.scale)
                  for spec in manifest.inputs]
            errors.append(float(run_bundle(d / "b", xs, "cpu", d / "m.onnx").relative_error))
    except Exception as e:
        return {"status": "RUNFAIL", "detail": (str(e).splitlines() or [""])[0][:300], **record}
    worst = max(errors)
    return {"status": "OK" if worst <= TOLERANCE else "WRONG", "relative_error": errors,
            **record}


def main(argv=None) -> int:
    from op_sweep_cases import CASES, KNOWN

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--group", action="append", default=[],
                        help="only these groups (bench/op_sweep_cases/<group>.py)")
    parser.add_argument("--only", default="", help="only graphs whose name contains this")
    parser.add_argument("--out", type=Path, help="write one JSON record per graph here")
    args = parser.parse_args(argv)
    names = [n for n, c in CASES.items()
             if (not args.group or c.group in args.group) and args.only in n]
    if not names:
        print(f"no graph matches (groups: {sorted({c.group for c in CASES.values()})})",
              file=sys.stderr)
        return 2
    counts: collections.Counter = collections.Counter()
    results = {}
    with tempfile.TemporaryDirectory(prefix="cw-op-sweep-") as work:
        for k, name in enumerate(names, 1):
            result = run_case(name, CASES[name], args.target, Path(work))
            if result["status"] == "WRONG" and name in KNOWN:
                result = {**result, "status": "DIFFERS", "detail": KNOWN[name]}
            results[name] = {"group": CASES[name].group, **result}
            counts[result["status"]] += 1
            shown = result.get("detail") or result.get("relative_error") or ""
            if result.get("fallback"):
                counts["(fallback)"] += 1
                shown = f"{shown} FALLBACK: {result['fallback']}"
            print(f"[{k}/{len(names)}] {result['status']:8s} {name}  {shown}", flush=True)
    print(", ".join(f"{n} {s}" for s, n in counts.most_common()), f"({args.target})")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 1 if counts["WRONG"] or counts["CRASH"] else 0


if __name__ == "__main__":
    sys.exit(main())
