"""Compile CUDA bundles on the build machine for a GPU machine whose TVM is runtime-only.

    python bench/gpu_stage.py --out .gpu/bundles --tests                 # what tests/gpu needs
    python bench/gpu_stage.py --out .gpu/bundles --models resnet18,mobilenet_v2 \\
        [--batch-sizes 1,2,4,8,16] [--arch sm_90] [--hollow resnet152] [--precision fp32,fp16] \\
        [--conv-split off] [--conv-algo winograd2] [--page-size 64MiB]
    python bench/gpu_stage.py --refill .gpu/bundles/resnet152      # on the GPU machine

`--hollow NAME` stages a bundle without its weights file, for models too large to carry (a call
carries 64 MiB); `--refill` writes a weights file of the same size there, filled with a fixed
random pattern, and its checksum into the manifest. Such a bundle times LOAD and EXEC exactly
like the real one (no kernel's speed depends on the weights' values) but computes nonsense:
never use it for accuracy.

Test bundles are named NAME-B_B (the `cuda_bundle` fixture's names; point $CW_TEST_CUDA_BUNDLES at
the directory); benchmark bundles are named NAME, NAME-fp16, and with `--conv-split off`
NAME-nosplit and NAME-fp16-nosplit, with `--conv-algo winograd2` NAME-winograd2 and with
`--conv-algo direct` NAME-direct (what bench/kernels.py --bundles --precision expects).
Prints the staged size: a device call carries at most 64 MiB in all.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HOLLOW = "HOLLOW"  # marker file: the weights were left behind
PATTERN = "PATTERN_WEIGHTS"  # marker file: refilled, times right, computes nonsense


def refill(path: Path) -> None:
    import numpy as np

    from cw.bundle import open_bundle, replace_file_in_bundle

    bundle = open_bundle(path, verify=False)
    total = max(page.file_offset + page.used_bytes for page in bundle.manifest.weights.pages)
    # an fp16 bundle's pattern in fp16: float32 bytes read as fp16 hold infinities and NaNs
    dtype = np.float16 if bundle.manifest.target.precision == "fp16" else np.float32
    size = np.dtype(dtype).itemsize
    data = (np.random.default_rng(0).standard_normal(-(-total // size)) * 0.02).astype(dtype)
    replace_file_in_bundle(bundle, bundle.manifest.weights.file, data.tobytes()[:total])
    (path / HOLLOW).unlink(missing_ok=True)
    (path / PATTERN).write_text("pattern weights from bench/gpu_stage.py --refill: for timing "
                                "only, never for accuracy\n")
    print(f"refilled {path}: {total / 2**20:.1f} MiB of pattern weights (timing only)")

def split_weights(bundles: list[Path], dirs: list[Path], part_bytes: int) -> None:
    """Real weights too large for one device call: the bundles' weights files, end to end, cut
    into parts of at most `part_bytes` in each of `dirs` but the last, which takes the rest and
    weights.json (each bundle's file and size, each part's size and sha256). Each bundle is
    left hollow; on the GPU machine `--join` puts the real weights back once every part is
    there (each dir carried by its own call while the machine stays warm)."""
    import hashlib
    import json

    from cw.bundle import open_bundle

    index: dict = {"bundles": [], "parts": []}
    files = []
    for path in bundles:
        weights = path / open_bundle(path, verify=False).manifest.weights.file
        files.append(weights)
        index["bundles"].append({"bundle": path.name, "file": weights.name,
                                 "size": weights.stat().st_size})
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    stream = b"".join(f.read_bytes() for f in files)
    pos, n = 0, 0
    for i, d in enumerate(dirs):
        end = len(stream) if i == len(dirs) - 1 else min(len(stream), pos + part_bytes)
        if end > pos:
            chunk = stream[pos:end]
            name = f"part-{n:03d}"
            (d / name).write_bytes(chunk)
            index["parts"].append({"name": name, "size": len(chunk),
                                   "sha256": hashlib.sha256(chunk).hexdigest()})
            pos, n = end, n + 1
    (dirs[-1] / "weights.json").write_text(json.dumps(index, indent=1))
    for path, weights in zip(bundles, files):
        weights.unlink()
        (path / HOLLOW).write_text("weights carried in parts: bench/gpu_stage.py --join\n")
    print(f"{len(stream) / 2**20:.1f} MiB of real weights in {n} parts: "
          + ", ".join(f"{p['name']} {p['size'] / 2**20:.1f} MiB" for p in index["parts"]))


def join_weights(parts: Path, kernels: Path) -> None:
    """On the GPU machine: the real weights back into the bundles `split_weights` left hollow,
    if every part arrived intact; otherwise they stay hollow (and get pattern weights)."""
    import hashlib
    import json

    from cw.bundle import open_bundle

    index = json.loads((parts / "weights.json").read_text())
    for p in index["parts"]:
        f = parts / p["name"]
        if not f.is_file() or f.stat().st_size != p["size"] or \
                hashlib.sha256(f.read_bytes()).hexdigest() != p["sha256"]:
            print(f"real weights: part {p['name']} missing or damaged in {parts}; "
                  "the bundles keep pattern weights")
            return
    stream = b"".join((parts / p["name"]).read_bytes() for p in index["parts"])
    pos = 0
    for b in index["bundles"]:
        path = kernels / b["bundle"]
        (path / b["file"]).write_bytes(stream[pos:pos + b["size"]])
        pos += b["size"]
        open_bundle(path, verify=True)  # every file against the manifest's sha256
        (path / HOLLOW).unlink(missing_ok=True)
        print(f"real weights: {path} ({b['size'] / 2**20:.1f} MiB, sha256 checked)")


# name, batch sizes, precision: as tests/conftest.py's bundle_dirname names them
TEST_BUNDLES = [("small_cnn", (1, 4), "fp32"), ("mlp", (1, 2), "fp32"),
                ("small_cnn", (1, 4), "fp16"), ("late_cnn", (1, 4), "direct"),
                ("small_cnn", (1, 4), "winograd2"), ("small_cnn", (1, 4), "winograd4"),
                ("small_cnn", (1, 4), "cutlass"), ("late_cnn", (1, 4), "cutlass"),
                ("small_cnn", (1, 4), "tf32"), ("small_bert", (1, 4), "fp32"),
                # a ../shared/models-edge file (the GPU machine has no ../shared: its
                # reference outputs are staged beside it, see stage_reference)
                ("edge:mobilenetv2-12-int8", (1, 4), "fp32"),
                ("int8_activations", (1, 4), "fp32")]
# edge model -> the sample shape of its test inputs (tests/conftest.py's edge_inputs)
EDGE_SAMPLE_SHAPES = {"edge:mobilenetv2-12-int8": (3, 224, 224)}
EDGE_PREFIX = "edge:"  # as tests/conftest.py's zoo_onnx takes them
SHARED = Path(__file__).resolve().parents[2] / "shared"


def _edge_onnx(name: str) -> Path:
    return SHARED / "models-edge" / f"{name.removeprefix(EDGE_PREFIX)}.onnx"


def stage_reference(name: str, out: Path, batch_sizes) -> None:
    """onnxruntime's outputs for the GPU test's inputs, beside the staged bundle."""
    import numpy as np

    from cw.verify import onnx_reference
    from tests.conftest import bundle_dirname, edge_inputs

    path = out.parent / f"{bundle_dirname(name, batch_sizes)}.reference.npz"
    if path.is_file():
        return
    inputs = edge_inputs(EDGE_SAMPLE_SHAPES[name])
    outputs = [onnx_reference(_edge_onnx(name), x)[0] for x in inputs]
    np.savez(path, **{str(i): y for i, y in enumerate(outputs)})
    print(f"staged {path}")


def stage(name: str, out: Path, batch_sizes: tuple[int, ...], arch: str | None,
          hollow: bool = False, precision: str = "fp32", conv_split: str = "auto",
          untuned: bool = False, conv_algo: str = "auto",
          page_size: int | None = None) -> None:
    import model_zoo
    from cw.bundle import open_bundle
    from cw.compile.compiler import CompileConfig, compile_model

    if (out / "manifest.json").is_file():
        print(f"{out} exists, kept")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            if name.startswith(EDGE_PREFIX):
                onnx_path = _edge_onnx(name)
            else:
                onnx_path = Path(tmp) / f"{name}.onnx"
                model_zoo.export(name, onnx_path)
            compile_model(onnx_path, out, CompileConfig(target="cuda", arch=arch,
                                                        batch_sizes=batch_sizes,
                                                        name=name.removeprefix(EDGE_PREFIX),
                                                        precision=precision,
                                                        conv_split=conv_split,
                                                        conv_algo=conv_algo,
                                                        use_committed_records=not untuned,
                                                        **({"page_size": page_size}
                                                           if page_size else {})))
        print(f"staged {out}")
    if hollow:
        weights = out / open_bundle(out, verify=False).manifest.weights.file
        if weights.exists():
            os.unlink(weights)
            (out / HOLLOW).write_text("weights left behind: bench/gpu_stage.py --refill\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--refill", type=Path, help="on the GPU machine: a hollow bundle's weights")
    ap.add_argument("--hollow", default="", help="zoo names staged without weights")
    ap.add_argument("--split-weights", default="",
                    help="bundle dirs, comma-separated: their real weights into --parts")
    ap.add_argument("--parts", default="",
                    help="with --split-weights: dirs, comma-separated, the last for the rest")
    ap.add_argument("--part-size", default="58MiB", help="with --split-weights")
    ap.add_argument("--join", type=Path,
                    help="on the GPU machine: the parts' dir (with weights.json); needs --into")
    ap.add_argument("--into", type=Path, help="with --join: the hollow bundles' parent dir")
    ap.add_argument("--tests", action="store_true", help="the bundles tests/gpu uses")
    ap.add_argument("--models", default="", help="zoo names, comma-separated")
    ap.add_argument("--batch-sizes", default="1,2,4,8,16")
    ap.add_argument("--arch", default=None, help="default: cw's CUDA default (sm_90)")
    ap.add_argument("--precision", default="fp32",
                    help="fp32,fp16,tf32: --models and --hollow bundles to stage (fp16 ones "
                         "as NAME-fp16, tf32 ones as NAME-tf32)")
    ap.add_argument("--conv-split", default="auto",
                    help="off: --models and --hollow bundles without split-K convolutions, "
                         "named NAME-nosplit (the A/B for cw/compile/cuda_conv.py)")
    ap.add_argument("--untuned", action="store_true",
                    help="--models and --hollow bundles without cw's committed tuning records, "
                         "named NAME-untuned (the A/B for cw/tuning/)")
    ap.add_argument("--conv-algo", default="auto",
                    help="direct, winograd2, winograd4 or cutlass: --models and --hollow "
                         "bundles with cw's own convolutions (what sm_90 had before CUTLASS "
                         "was its default), Winograd 3x3 ones or CUTLASS ones whatever the "
                         "default, named NAME-direct, NAME-winograd2 etc. (the A/Bs for "
                         "cw/compile/cuda_conv.py, winograd.py and cutlass_conv.py)")
    ap.add_argument("--page-size", default=None,
                    help="weights page size (winograd4's transformed filters need 64MiB)")
    args = ap.parse_args()
    if args.refill:
        return refill(args.refill)
    if args.join:
        return join_weights(args.join, args.into)
    if args.split_weights:
        from cw.units import parse_size

        return split_weights([Path(b) for b in args.split_weights.split(",")],
                             [Path(d) for d in args.parts.split(",")],
                             parse_size(args.part_size, "part size"))
    if not args.out:
        ap.error("--out is required")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.tests:
        for name, sizes, variant in TEST_BUNDLES:
            from tests.conftest import bundle_dirname

            algo = variant.startswith("winograd") or variant in ("cutlass", "direct")
            stage(name, out / bundle_dirname(name, sizes, variant), sizes, args.arch,
                  precision="fp32" if algo else variant,
                  conv_algo=variant if algo else "auto")
            if name.startswith(EDGE_PREFIX):
                stage_reference(name, out / bundle_dirname(name, sizes, variant), sizes)
    sizes = tuple(int(b) for b in args.batch_sizes.split(","))
    split = ("" if args.conv_split == "auto" else "-nosplit") + ("-untuned" if args.untuned
                                                                  else "") \
        + ("" if args.conv_algo == "auto" else f"-{args.conv_algo}")
    page_size = None
    if args.page_size:
        from cw.units import parse_size

        page_size = parse_size(args.page_size, "page size")
    for hollow, names in ((False, args.models), (True, args.hollow)):
        for name in filter(None, names.split(",")):
            for precision in args.precision.split(","):
                label = (name if precision == "fp32" else f"{name}-{precision}") + split
                stage(name, out / label, sizes, args.arch, hollow=hollow, precision=precision,
                      conv_split=args.conv_split, untuned=args.untuned,
                      conv_algo=args.conv_algo, page_size=page_size)
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"{out}: {total / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
