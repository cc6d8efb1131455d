"""Compile CUDA bundles on the build machine for a GPU machine whose TVM is runtime-only.

    python bench/gpu_stage.py --out .gpu/bundles --tests                 # what tests/gpu needs
    python bench/gpu_stage.py --out .gpu/bundles --models resnet18,mobilenet_v2 \\
        [--batch-sizes 1,2,4,8,16] [--arch sm_90]

Test bundles are named NAME-B_B (the `cuda_bundle` fixture's names; point $CW_TEST_CUDA_BUNDLES at
the directory); benchmark bundles are named NAME (what bench/kernels.py --bundles expects).
Prints the staged size: a device call carries at most 64 MiB in all.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import model_zoo  # noqa: E402
from cw.compile.compiler import CompileConfig, compile_model  # noqa: E402

TEST_BUNDLES = {"small_cnn": (1, 4), "mlp": (1, 2)}


def stage(name: str, out: Path, batch_sizes: tuple[int, ...], arch: str | None) -> None:
    if (out / "manifest.json").is_file():
        print(f"{out} exists, kept")
        return
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = Path(tmp) / f"{name}.onnx"
        model_zoo.export(name, onnx_path)
        compile_model(onnx_path, out, CompileConfig(target="cuda", arch=arch,
                                                    batch_sizes=batch_sizes, name=name))
    print(f"staged {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tests", action="store_true", help="the bundles tests/gpu uses")
    ap.add_argument("--models", default="", help="zoo names, comma-separated")
    ap.add_argument("--batch-sizes", default="1,2,4,8,16")
    ap.add_argument("--arch", default=None, help="default: cw's CUDA default (sm_90)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.tests:
        for name, sizes in TEST_BUNDLES.items():
            stage(name, out / f"{name}-{'_'.join(map(str, sizes))}", sizes, args.arch)
    sizes = tuple(int(b) for b in args.batch_sizes.split(","))
    for name in filter(None, args.models.split(",")):
        stage(name, out / name, sizes, args.arch)
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"{out}: {total / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
