"""Kernel speed side by side: cw-compiled models against onnxruntime (CPU) or PyTorch with cuDNN
(GPU), in one process, one model and batch size at a time, rounds interleaved so that both see
the same machine. Prints a markdown table with ratios (cw / baseline; < 1 means cw is faster)
and the accuracy of each cw bundle against onnxruntime.

CPU, on the build machine (compiles the bundles, then measures):
    python bench/kernels.py --device cpu --models resnet18 --batch-sizes 1 \\
        [--variants generic,default] [--tune-db DIR]

GPU, on the GPU machine, with bundles compiled on the build machine for sm_90:
    python bench/kernels.py --device cuda --bundles DIR --models resnet18,resnet50,densenet121 \\
        --batch-sizes 1,4,16 [--precision fp32,fp16,tf32,fp32-nosplit,fp32-cutlass]
    A variant ending in `+graphs` (fp32+graphs) serves the same bundle with EXEC as one CUDA
    graph (`cw serve --exec-graphs`) in the "served" columns.

Variants (CPU): `generic` = x86-64 code, NCHW convolutions, no tuning records (what cw first
did), `avx2-untuned` = the same as x86-64-v3 code, `avx2` = what `cw compile --arch x86-64-v3`
does (8-channel blocks), `default` = what `cw compile` does (NCHWc convolutions with cw's
schedule, in 16-channel blocks where the host has AVX-512, tuning records where committed, the
host's x86-64 level when those cover most kernels), plus a variant with the `--tune-db`
records. TVM's CPU kernels run with one thread per physical core (cw.tvm_env); set
TVM_NUM_THREADS to compare.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import model_zoo  # noqa: E402
from cw.compile.compiler import CompileConfig, compile_model  # noqa: E402
from cw.engine import LocalModel  # noqa: E402
from cw.profile.exec_timer import ExecTimer  # noqa: E402
from cw.verify import max_relative_error, onnx_reference  # noqa: E402

VARIANTS = {
    "generic": dict(arch="x86-64", use_committed_records=False, conv_layout="nchw"),
    "avx2-untuned": dict(arch="x86-64-v3", use_committed_records=False, conv_layout="nchw"),
    "avx2": dict(arch="x86-64-v3"),
    "default": dict(),
}


def median_ms(samples_s) -> float:
    return statistics.median(samples_s) * 1e3


def time_cw(model: LocalModel, x: np.ndarray, runs: int) -> list[float]:
    """Seconds per EXEC as TVM's time evaluator measures it on the device (CUDA events on a
    GPU), inputs and weights already resident."""
    batch = x.shape[0]
    vm = model._vm(batch)
    arg = model.tvm.runtime.tensor(np.ascontiguousarray(x), device=model.device)
    timer = vm.time_evaluator("main", model.device, number=1, repeat=runs, min_repeat_ms=0)
    return list(timer(arg, *model.weights).results)


def _failure(e: Exception) -> str:
    """One line for a table cell (an exception's last line; its type when it has no message)."""
    return f"failed: {(str(e).strip().splitlines() or [type(e).__name__])[-1]}"


def served_timer(bundle: Path, exec_graphs: bool = False):
    """The worker's EXEC path for `bundle` on GPU 0, or why it could not be set up (printed in
    its cells: the evaluator's column still comes)."""
    try:
        return ExecTimer(bundle, "cuda:0", exec_graphs=exec_graphs)
    except Exception as e:
        return _failure(e)


def time_ort(session, name: str, x: np.ndarray, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        session.run(None, {name: x})
        out.append(time.perf_counter() - t)
    return out


def ort_session(path: Path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = os.cpu_count() or 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def cpu_main(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    variants = args.variants.split(",") + (["tuned"] if args.tune_db else [])
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), "cpu")
    from cw.tvm_env import cpu_threads
    print(f"device: {cpu}, {os.cpu_count()} cores, TVM threads {cpu_threads()}; {args.rounds} "
          f"rounds × {args.runs} runs, median; ratio = cw / onnxruntime")
    header = ["model", "batch", "onnxruntime ms"] + [f"cw {v} ms (ratio, tuned)"
                                                     for v in variants]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name in args.models.split(","):
        onnx_path = out / f"{name}.onnx"
        model_zoo.export(name, onnx_path)
        models = {}
        for v in variants:
            bundle = out / f"{name}-{v}"
            shutil.rmtree(bundle, ignore_errors=True)
            kw = dict(VARIANTS.get(v, {}))
            if v == "tuned":
                kw = dict(tune_dbs=(args.tune_db,))
            manifest = compile_model(onnx_path, bundle,
                                     CompileConfig(batch_sizes=tuple(args.batch_sizes), **kw))
            models[v] = (LocalModel(bundle), {k.batch_size: k for k in manifest.kernels})
        for batch in args.batch_sizes:
            x = np.random.default_rng(batch).standard_normal(
                (batch, *model_zoo.get(name).input_shape)).astype(np.float32)
            ref = onnx_reference(onnx_path, [x])
            times = {v: [] for v in ["ort"] + variants}
            errors = {v: max(max_relative_error(y, r) for y, r in zip(m.run([x]), ref))
                      for v, (m, _) in models.items()}
            for _ in range(args.rounds):
                # a session per round, closed before cw runs: onnxruntime's idle threads spin
                # on the cores TVM's pool waits for (a 0.16 ms model took 5-7 ms beside one)
                session = ort_session(onnx_path)
                times["ort"] += time_ort(session, session.get_inputs()[0].name, x, args.runs)
                del session
                gc.collect()
                for v, (m, _) in models.items():
                    times[v] += time_cw(m, x, args.runs)
            ort_ms = median_ms(times["ort"])
            cells = [name, str(batch), f"{ort_ms:.3g}"]
            for v in variants:
                k = models[v][1][batch]
                ms = median_ms(times[v])
                convs = f", {k.kernels_conv_scheduled} NCHWc" if k.kernels_conv_scheduled else ""
                cells.append(f"{ms:.3g} (×{ms / ort_ms:.2f}, {k.kernels_tuned}/{k.kernels_total}"
                             f" tuned{convs}, err {errors[v]:.0e})")
            print("| " + " | ".join(cells) + " |", flush=True)


def gpu_main(args) -> None:
    import torch

    from torch_onnx import TorchOnnx, capture_cuda_graph

    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"device: {torch.cuda.get_device_name(0)}; {args.rounds} rounds × {args.runs} runs, "
          "median GPU time; ratio = cw / PyTorch CUDA graph at the same precision (fp16: "
          "PyTorch runs the graph in half, cw's bundle from `cw compile --precision fp16`; "
          "tf32: PyTorch with cuDNN's TF32 convolutions, cw's from `--precision tf32`); "
          "error vs PyTorch fp32; TF32 off elsewhere")
    print("cw served = EXEC as a worker runs it and `cw profile` stores it (every kernel queued "
          "behind the worker's gate, then released: cw.profile.exec_timer); cw evaluator = TVM's "
          "time evaluator, which launches each kernel while the GPU runs the one before")
    header = ["model", "precision", "batch", "PyTorch eager ms", "PyTorch CUDA graph ms",
              "cw served ms", "served / graph", "cw evaluator ms", "evaluator / graph",
              "cw max rel. err"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name in args.models.split(","):
        onnx_path = Path(args.bundles) / f"{name}.onnx"
        if not onnx_path.exists():
            model_zoo.export(name, onnx_path)
        fp32_model = TorchOnnx(onnx_path, device="cuda")
        for precision in args.precision.split(","):
            # bench/gpu_stage.py names them so: NAME for fp32, NAME-fp16 for fp16, and
            # NAME-nosplit, NAME-fp16-nosplit for bundles compiled with --conv-split off
            bundle_precision, _, mode = precision.partition("+")
            suffix = bundle_precision.replace("fp32", "").strip("-")
            bundle = Path(args.bundles) / (f"{name}-{suffix}" if suffix else name)
            if not bundle.exists():
                print(f"| {name} | {precision} | – | no bundle {bundle} |", flush=True)
                continue
            cw_model = LocalModel(bundle, device="cuda:0")
            served = served_timer(bundle, exec_graphs=mode == "graphs")
            half = precision.startswith("fp16")
            tf32 = precision.startswith("tf32")  # convolutions only, in both
            dtype = torch.float16 if half else torch.float32
            ref_model = TorchOnnx(onnx_path, "cuda", dtype) if half else fp32_model
            for batch in args.batch_sizes:
                x = np.random.default_rng(batch).standard_normal(
                    (batch, *model_zoo.get(name).input_shape)).astype(np.float32)
                xt = torch.from_numpy(x).cuda()
                with torch.no_grad():
                    ref = [fp32_model(xt).float().cpu().numpy()]
                outputs = cw_model.run([x])
                # a bundle refilled by bench/gpu_stage.py times right but computes nonsense
                err = "n/a (pattern weights)" if (bundle / "PATTERN_WEIGHTS").exists() else \
                    f"{max(max_relative_error(y, r) for y, r in zip(outputs, ref)):.0e}"
                xt = xt.to(dtype)
                torch.backends.cudnn.allow_tf32 = tf32  # read when cuDNN picks an algorithm
                replay, _ = capture_cuda_graph(ref_model, xt)
                times = {"eager": [], "graph": [], "cw": [], "served": []}
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                for _ in range(args.rounds):
                    for kind, fn in (("eager", lambda: ref_model(xt)), ("graph", replay)):
                        with torch.no_grad():
                            for _ in range(args.runs):
                                start.record()
                                fn()
                                end.record()
                                end.synchronize()
                                times[kind].append(start.elapsed_time(end) / 1e3)
                    times["cw"] += time_cw(cw_model, x, args.runs)
                    if isinstance(served, ExecTimer):
                        try:
                            times["served"] += [s / 1e9 for s in served.exec_ns([x], args.runs)]
                        except Exception as e:  # an untried path must not cost the others
                            served.close()
                            served = _failure(e)
                torch.backends.cudnn.allow_tf32 = False
                eager, graph, cw = (median_ms(times[k]) for k in ("eager", "graph", "cw"))
                if times["served"] and isinstance(served, ExecTimer):
                    ms = median_ms(times["served"])
                    served_cells = f"{ms:.2f} | ×{ms / graph:.2f}"
                else:
                    served_cells = f"{served} | –"
                print(f"| {name} | {precision} | {batch} | {eager:.2f} | {graph:.2f} | "
                      f"{served_cells} | {cw:.2f} | ×{cw / graph:.2f} | {err} |", flush=True)
            if isinstance(served, ExecTimer):
                served.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--models", default="resnet18")
    ap.add_argument("--batch-sizes", default="1", type=lambda s: [int(b) for b in s.split(",")])
    ap.add_argument("--variants", default="generic,default", help="CPU: " + ",".join(VARIANTS))
    ap.add_argument("--tune-db", help="CPU: also a variant compiled with this tuning database")
    ap.add_argument("--bundles", help="GPU: directory with one CUDA bundle per model")
    ap.add_argument("--precision", default="fp32",
                    help="GPU: fp32,fp16,tf32,fp32-nosplit,fp32-cutlass,... — which bundles "
                         "to time (NAME, NAME-fp16, NAME-tf32, NAME-nosplit, NAME-cutlass in "
                         "--bundles)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", default="/tmp/cw-kernels")
    args = ap.parse_args()
    if args.device == "cpu":
        cpu_main(args)
    else:
        if not args.bundles:
            ap.error("--device cuda needs --bundles (compile with --target cuda on the build "
                     "machine)")
        gpu_main(args)


if __name__ == "__main__":
    main()
