"""Every convolution `--conv-algo cutlass` gives CUTLASS, alone: each tile shape and split-K
count against cuDNN (PyTorch, fp32, TF32 off) on the same GPU, checked against it, and the tile
`cutlass_conv.plan` guessed against the fastest; the same with one TF32 product (`--precision
tf32`) against cuDNN with TF32 on. What `bench/kernels.py` cannot say: which convolutions win or
lose, and whether the guess picks well. With --plans, every time goes to a file that `ingest`
turns into measured plans `cw compile` applies (cw/compile/cutlass_plans.py).

Build machine (compiles the kernels into a library, lists the models' convolutions):
    python bench/cutlass_convs.py stage DIR [--models resnet18,resnet50,densenet121]
        [--batch-sizes 1,4,16]
GPU machine (runtime-only TVM and PyTorch):
    python bench/cutlass_convs.py run DIR [--runs 20] [--plans OUT/cutlass-times.json]
        [--first resnet18,resnet50]
Build machine again (the fastest tile per convolution and math, merged into the plan file):
    python bench/cutlass_convs.py ingest OUT/cutlass-times.json \
        [--into cw/tuning/cuda-sm_90/cutlass.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LIBRARY = "cutlass_convs.so"
SHAPES = "convs.json"
SPLITS = (1, 2, 4, 8, 16)
ODD = "odd shapes"  # the model name of the convolutions staged for shapes the zoo lacks


def stage(out: Path, models: list[str], batch_sizes: list[int], arch: str) -> None:
    import model_zoo
    from cw.compile import cuda_conv, cutlass_build, cutlass_conv
    from cw.compile.compiler import CompileConfig, bind_batch, import_graph
    from cw.tvm_env import load_tvm

    tvm = load_tvm()
    from tvm import relax

    out.mkdir(parents=True, exist_ok=True)
    obj = cutlass_build.build_object(arch)
    tf32 = cutlass_build.build_object(arch, tf32=True)
    subprocess.run(["g++", "-shared", "-o", str(out / LIBRARY), tf32,
                    *cutlass_build.link_inputs(obj)], check=True)
    sms = cuda_conv.sm_count(arch)
    convs, seen = [], set()
    onnx_dir = Path(tempfile.mkdtemp(prefix="cw-cutlass-convs-"))  # not in `out`: it travels
    for name in models:
        onnx_path = onnx_dir / f"{name}.onnx"
        model_zoo.export(name, onnx_path)
        config = CompileConfig(target="cuda", conv_algo="cutlass", arch=arch,
                               batch_sizes=tuple(batch_sizes))
        onnx_model, imported, _ = import_graph(onnx_path, config)
        for batch in batch_sizes:
            mod, _ = cutlass_conv.offload(bind_batch(imported.mod, onnx_model, batch), sms)

            def visit(expr):
                if not (isinstance(expr, relax.Call) and expr.args
                        and isinstance(expr.args[0], relax.ExternFunc)
                        and str(expr.args[0].global_symbol) in cutlass_conv.SYMBOLS):
                    return
                # (x, w, params) or, with the epilogue, (x, w, bias[, residual], params): timed
                # without it
                x, w, *_, params = expr.args[1]
                shape = ([int(d) for d in x.ty.shape], [int(d) for d in w.ty.shape],
                         [int(d) for d in expr.ty.fields[0].shape],
                         [int(v) for v in params.values][:8])
                key = json.dumps(shape)
                if key not in seen:  # one row per distinct convolution
                    seen.add(key)
                    convs.append({"model": name, "batch": batch, "x": shape[0], "w": shape[1],
                                  "y": shape[2], "params": shape[3]})

            relax.analysis.post_order_visit(mod["main"].body, visit)
    shutil.rmtree(onnx_dir)
    # shapes the zoo's CNNs lack but the offload takes (tests/integration/test_cutlass_conv.py
    # checks them on the CPU): channels by 4 but not by 16, a 5x3 window, dilation, stride 2
    # with asymmetric padding (the last input column unread), a 1x1 conv
    odd = [([2, 13, 11, 8], [16, 3, 3, 8], [2, 6, 5, 16], (0, 1), (2, 2), (1, 1)),
           ([2, 6, 5, 16], [16, 3, 3, 16], [2, 6, 5, 16], (2, 2), (1, 1), (2, 2)),
           ([2, 6, 5, 16], [12, 1, 1, 16], [2, 6, 5, 12], (0, 0), (1, 1), (1, 1)),
           ([2, 6, 5, 12], [8, 5, 3, 12], [2, 6, 5, 8], (2, 1), (1, 1), (1, 1))]
    for x, w, y, pad, stride, dilation in odd:
        tile, split = cutlass_conv.plan(y[0] * y[1] * y[2], y[3], w[1] * w[2] * w[3], sms)
        convs.append({"model": ODD, "batch": x[0], "x": x, "w": w, "y": y,
                      "params": [tile, split, *pad, *stride, *dilation]})
    (out / SHAPES).write_text(json.dumps({"arch": arch, "sms": sms, "tiles": cutlass_conv.TILES,
                                          "convs": convs}, indent=1))
    print(f"staged {len(convs)} convolutions and {LIBRARY} in {out} "
          f"(tvm {tvm.__version__})")


def run(stage_dir: Path, runs: int, plans_out: Path | None = None,
        first: tuple[str, ...] = ()) -> None:
    import datetime

    import numpy as np
    import torch

    from cw.compile import cutlass_plans

    from cw.tvm_env import load_tvm

    tvm = load_tvm()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    spec = json.loads((stage_dir / SHAPES).read_text())
    library = tvm.runtime.load_module(str(stage_dir / LIBRARY))
    conv, conv_tf32 = library["cw_cutlass_conv2d_v1"], library["cw_cutlass_conv2d_tf32_v1"]
    tiles = [tuple(t) for t in spec["tiles"]]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(fn, back_to_back: int = 10) -> float:
        """Median GPU ms per call over `runs` groups of back-to-back calls: within a group the
        host queues ahead of the GPU, so neither side's dispatch time is counted."""
        for _ in range(3):
            fn()
        times = []
        for _ in range(runs):
            start.record()
            for _ in range(back_to_back):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / back_to_back)
        return float(np.median(times))

    staged: dict[str, list[int]] = {}  # the models and batch sizes whose convolutions these are
    for c in spec["convs"]:
        if c["model"] != ODD:
            staged.setdefault(c["model"], [])
            if c["batch"] not in staged[c["model"]]:
                staged[c["model"]].append(c["batch"])
    measured = {"arch": spec["arch"], "device": torch.cuda.get_device_name(),
                "date": datetime.date.today().isoformat(), "runs": runs, "staged": staged,
                "convs": []}
    print(f"device: {torch.cuda.get_device_name()}; GPU time per call, median of {runs} groups "
          "of 10 back-to-back calls; "
          "cuDNN fp32 with TF32 off; err = max |cw - cuDNN| / max |cuDNN|; TF32: every tile "
          "with one TF32 product against cuDNN with TF32 on, err against fp32 cuDNN")
    header = ["model", "batch", "x (NHWC)", "w (KRSC)", "stride", "cuDNN ms", "plan",
              "plan ms", "plan / cuDNN", "best", "best ms", "max err", "TF32 cuDNN ms",
              "TF32 plan ms", "TF32 best", "TF32 best ms", "TF32 best / cuDNN", "TF32 err"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    totals = {"cudnn": 0.0, "plan": 0.0, "best": 0.0, "cudnn_tf32": 0.0, "plan_tf32": 0.0,
              "best_tf32": 0.0}
    # the models named first go first: a call cut short by its time limit keeps whole models
    order = {name: i for i, name in enumerate(first)}
    for c in sorted(spec["convs"], key=lambda c: order.get(c["model"], len(order))):
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(c["x"], device="cuda", generator=gen)
        w = torch.randn(c["w"], device="cuda", generator=gen) * 0.05
        y = torch.empty(c["y"], device="cuda")
        plan_tile, plan_split, top, left, sh, sw, dh, dw = c["params"]
        x_nchw, w_oihw = x.permute(0, 3, 1, 2).contiguous(), w.permute(0, 3, 1, 2).contiguous()
        bottom = (c["y"][1] - 1) * sh + (c["w"][1] - 1) * dh + 1 - c["x"][1] - top
        right = (c["y"][2] - 1) * sw + (c["w"][2] - 1) * dw + 1 - c["x"][2] - left
        # negative: rows the convolution never reaches, cropped
        x_pad = torch.nn.functional.pad(x_nchw, (left, right, top, bottom))

        def cudnn():
            return torch.nn.functional.conv2d(x_pad, w_oihw, stride=(sh, sw), dilation=(dh, dw))

        ref = cudnn().permute(0, 2, 3, 1)
        t_cudnn = timed(cudnn)
        results, results_tf32 = {}, {}
        for tile in range(len(tiles)):
            for split in SPLITS:
                tm, tn = tiles[tile]
                blocks = -(-c["y"][0] * c["y"][1] * c["y"][2] // tm) * -(-c["y"][3] // tn)
                ws = torch.zeros(blocks if split > 1 else 1, dtype=torch.int32, device="cuda")
                params = tvm.runtime.ShapeTuple([tile, split, top, left, sh, sw, dh, dw])
                args = [tvm.runtime.from_dlpack(t) for t in (x, w)] + [params] + \
                    [tvm.runtime.from_dlpack(t) for t in (y, ws)]
                for fn, into in ((conv, results), (conv_tf32, results_tf32)):
                    try:
                        y.zero_()
                        fn(*args)
                        torch.cuda.synchronize()
                        err = float((y - ref).abs().max() / ref.abs().max())
                        into[(tile, split)] = (timed(lambda: fn(*args)), err)
                    except Exception as e:  # CUTLASS refuses some splits: say which, go on
                        into[(tile, split)] = (float("inf"), str(e).splitlines()[-1][:60])
        plan_ms, plan_err = results[(plan_tile, plan_split)]
        tf32_ms, tf32_err = results_tf32[(plan_tile, plan_split)]
        torch.backends.cudnn.allow_tf32 = True  # read when cuDNN picks its algorithm
        cudnn_tf32_ms = timed(cudnn)
        torch.backends.cudnn.allow_tf32 = False
        best = min(results, key=lambda k: results[k][0])
        best_tf32 = min(results_tf32, key=lambda k: results_tf32[k][0])
        totals["cudnn_tf32"] += cudnn_tf32_ms
        totals["plan_tf32"] += tf32_ms
        totals["best_tf32"] += results_tf32[best_tf32][0]
        worst_err = max((e for _, e in results.values() if isinstance(e, float)), default=-1)
        totals["cudnn"] += t_cudnn
        totals["plan"] += plan_ms
        totals["best"] += results[best][0]

        def label(k):
            return f"{tiles[k[0]][0]}x{tiles[k[0]][1]}/{k[1]}"

        print(f"| {c['model']} | {c['batch']} | {c['x']} | {c['w']} | {sh} | {t_cudnn:.3f} | "
              f"{label((plan_tile, plan_split))} | {plan_ms:.3f} | ×{plan_ms / t_cudnn:.2f} | "
              f"{label(best)} | {results[best][0]:.3f} | {worst_err:.1e} | "
              f"{cudnn_tf32_ms:.3f} | {tf32_ms:.3f} | {label(best_tf32)} | "
              f"{results_tf32[best_tf32][0]:.3f} | "
              f"×{results_tf32[best_tf32][0] / cudnn_tf32_ms:.2f} | "
              f"{f'{tf32_err:.1e}' if isinstance(tf32_err, float) else tf32_err} |", flush=True)
        if not isinstance(plan_err, float) or plan_err > 1e-4:
            print(f"  !! the plan's choice failed or is inaccurate: {plan_err}", flush=True)
        if plans_out is not None:
            def times(found):
                return {f"{t}/{s}": (ms if np.isfinite(ms) else None)
                        for (t, s), (ms, _) in found.items()}

            def errors(found):  # ingest leaves out a tile whose output was off
                return {f"{t}/{s}": err for (t, s), (_, err) in found.items()
                        if isinstance(err, float)}

            measured["convs"].append({
                "model": c["model"], "batch": c["batch"], "x": c["x"], "w": c["w"],
                "y": c["y"], "pad": [top, left], "stride": [sh, sw], "dilation": [dh, dw],
                "plan": [plan_tile, plan_split], "cudnn_ms": t_cudnn,
                "cudnn_tf32_ms": cudnn_tf32_ms,
                "times": {"3xtf32": times(results), "tf32": times(results_tf32)},
                "errors": {"3xtf32": errors(results), "tf32": errors(results_tf32)}})
            # after every convolution: a call cut short by its time limit keeps what it measured
            cutlass_plans.write(plans_out, measured)
    print(f"sum over distinct convolutions: cuDNN {totals['cudnn']:.2f} ms, plan "
          f"{totals['plan']:.2f} ms (×{totals['plan'] / totals['cudnn']:.2f}), best tile per "
          f"conv {totals['best']:.2f} ms (×{totals['best'] / totals['cudnn']:.2f}); TF32: "
          f"cuDNN {totals['cudnn_tf32']:.2f} ms, plan {totals['plan_tf32']:.2f} ms "
          f"(×{totals['plan_tf32'] / totals['cudnn_tf32']:.2f}), best "
          f"{totals['best_tf32']:.2f} ms (×{totals['best_tf32'] / totals['cudnn_tf32']:.2f})")


def ingest(measured_file: Path, into: Path) -> None:
    """The fastest tile per convolution and math from `run --plans`, merged into the plan
    file `cw compile` reads (cw/compile/cutlass_plans.py)."""
    from cw.compile import cutlass_plans

    measured = json.loads(measured_file.read_text())
    existing = cutlass_plans.read(into) if into.exists() else None
    doc = cutlass_plans.ingest(measured, existing)
    doc["covers"] = covered(measured, doc, existing)
    cutlass_plans.write(into, doc)
    # (entries written by hand carry no guess or times)
    changed = [e for e in doc["plans"] if e.get("guess", [e["tile"], e["split"]])
               != [e["tile"], e["split"]]]
    saved = sum(e["guess_ms"] - e["ms"] for e in changed if e.get("guess_ms") and e.get("ms"))
    print(f"{into}: {len(doc['plans'])} plans ({doc['device']}, {doc['measured']}); "
          f"{len(changed)} differ from the guess, {saved:.3f} ms faster in all")


def covered(measured: dict, doc: dict, existing: dict | None) -> dict[str, list[int]]:
    """The zoo models and batch sizes whose every CUTLASS call (3xTF32 and TF32) now takes a
    measured plan: what the test suite checks `cw compile` picks up (tests/integration/
    test_cutlass_conv.py). A run cut short by its time limit covers fewer."""
    import model_zoo
    from cw.compile import cutlass_plans

    plans = cutlass_plans.Plans({e["key"]: (e["tile"], e["split"]) for e in doc["plans"]})
    models = dict((existing or {}).get("covers", {}))
    staged = measured.get("staged")
    if not staged:  # a run before `staged` was written: the models it measured
        staged = {}
        for c in measured["convs"]:
            if c["model"] != ODD:
                staged.setdefault(c["model"], []).append(c["batch"])
    with tempfile.TemporaryDirectory(prefix="cw-cutlass-ingest-") as tmp:
        for name, sizes in staged.items():
            onnx_path = Path(tmp) / f"{name}.onnx"
            model_zoo.export(name, onnx_path)
            sizes = sorted(set(sizes))
            found = [cutlass_plans.coverage(onnx_path, sizes, measured["arch"], tf32, plans)
                     for tf32 in (False, True)]
            whole = [b for b in sizes if all(f[b][0] == f[b][1] > 0 for f in found)]
            if whole:
                models[name] = sorted(set(models.get(name, [])) | set(whole))
            print(f"{name}: every convolution measured at batch sizes {whole or 'none'} of "
                  f"{sorted(set(sizes))}")
    return models


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("stage", "run", "ingest"))
    ap.add_argument("dir", help="stage/run: the staged directory; ingest: run's --plans file")
    ap.add_argument("--models", default="resnet18,resnet50,densenet121")
    ap.add_argument("--batch-sizes", default="1,4,16")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--plans", type=Path, help="run: write every time here, for ingest")
    ap.add_argument("--first", default="resnet18,resnet50",
                    help="run: these models' convolutions first (~8,000 tile and split timings "
                         "in all: a run cut short keeps whole models)")
    ap.add_argument("--into", type=Path, help="ingest: the plan file to merge into "
                    "(default cw/tuning/cuda-ARCH/cutlass.json)")
    args = ap.parse_args()
    if args.mode == "stage":
        stage(Path(args.dir), args.models.split(","),
              [int(b) for b in args.batch_sizes.split(",")], args.arch)
    elif args.mode == "run":
        run(Path(args.dir), args.runs, args.plans, tuple(filter(None, args.first.split(","))))
    else:
        from cw.compile import cutlass_plans, tuning

        into = args.into or tuning.committed_dir(f"cuda-{args.arch}") / cutlass_plans.FILE
        ingest(Path(args.dir), into)


if __name__ == "__main__":
    main()
