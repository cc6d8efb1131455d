"""Measured CUTLASS plans: which tile shape and split-K count ran each convolution fastest on a
GPU (bench/cutlass_convs.py, on the GPU machine), applied by `cw compile --conv-algo cutlass`
instead of `cutlass_conv.plan`'s guess from the SM count.

A plan file is `cutlass.json` in a tuning directory: the one committed with cw for the target
(cw/tuning/<target key>/, unless --untuned) and any `--tune-db DIR` that holds one (those win).
Each entry names one convolution exactly (input and filter shapes, padding, strides,
dilation, and the math: 3xTF32 or TF32) and the tile and split to run it with; a convolution
without an entry keeps the guess. The times are of the plain kernel: the epilogue (bias,
residual, ReLU) adds the same pass over the output to every tile.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cw.compile import tuning
from cw.compile.cutlass_conv import MAX_SPLIT, TILES, conv_key
from cw.errors import UsageError

FILE = tuning.CUTLASS_PLANS_FILE
SCHEMA = 1
MATHS = ("3xtf32", "tf32")
MARGIN = 0.03  # a measured tile replaces the guess only where it was this much faster
# A tile and split whose output strayed further than this from cuDNN's fp32 (max |y - ref| /
# max |ref|) is never taken, however fast: 3xTF32 is held to issue 7's fp32 bar, one TF32
# product to the 1e-2 `cw run --verify` holds reduced precisions to (it measures ~3-5e-4)
ERROR_BAR = {"3xtf32": 1e-4, "tf32": 1e-2}


@dataclass(frozen=True)
class Plans:
    """(tile index into TILES, split-K slices) by conv_key, and the files they came from."""
    choices: dict = field(default_factory=dict)
    files: tuple[Path, ...] = ()

    def lookup(self, key: str) -> tuple[int, int] | None:
        return self.choices.get(key)

    def describe(self) -> str:
        return ", ".join(tuning._display(f) for f in self.files) or "none"


def read(path: Path) -> dict:
    """A plan file, checked: one error naming the file and the entry otherwise."""
    hint = "write it with `python bench/cutlass_convs.py ingest`, or remove it"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"{path}: not a readable CUTLASS plan file ({e})", hint) from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(
            doc.get("plans"), list):
        raise UsageError(f"{path}: not a CUTLASS plan file of schema {SCHEMA}", hint)
    for i, entry in enumerate(doc["plans"]):
        ok = (isinstance(entry, dict) and isinstance(entry.get("key"), str)
              and isinstance(entry.get("tile"), int) and 0 <= entry["tile"] < len(TILES)
              and isinstance(entry.get("split"), int) and 1 <= entry["split"] <= MAX_SPLIT)
        if not ok:
            raise UsageError(f"{path}: plan {i + 1} is malformed ({str(entry)[:120]}): each "
                             f"needs a key, a tile in 0..{len(TILES) - 1} and a split in "
                             f"1..{MAX_SPLIT}", hint)
    return doc


def load(key: str, user_dirs=(), use_committed: bool = True) -> Plans:
    """The plans for target `key` (e.g. cuda-sm_90): from each --tune-db directory that holds a
    plan file, then the committed one; the first to name a convolution wins."""
    files = [Path(d) / FILE for d in user_dirs if (Path(d) / FILE).is_file()]
    committed = tuning.committed_dir(key) / FILE
    if use_committed and committed.is_file():
        files.append(committed)
    choices = {}
    for path in files:
        doc = read(path)
        arch = doc.get("arch")
        if arch and key.split("-", 1)[-1] != arch:
            raise UsageError(f"{path}: plans measured for {arch}, not for this target ({key})",
                             "give a --tune-db measured on the target's GPU")
        for entry in doc["plans"]:
            choices.setdefault(entry["key"], (entry["tile"], entry["split"]))
    return Plans(choices, tuple(path.resolve() for path in files))


def coverage(onnx_path, batch_sizes, arch: str, tf32: bool = False,
             plans: Plans | None = None) -> dict[int, tuple[int, int]]:
    """Per batch size: (CUTLASS calls that take a tile and split from `plans`, CUTLASS calls)
    when `onnx_path` is compiled for CUDA `arch`: the same offload `cw compile` runs, without
    compiling (no GPU, no nvcc). `plans` None: what `cw compile` reads by default (the
    committed plans for that target)."""
    from cw.compile import cuda_conv, cutlass_conv, targets
    from cw.compile.compiler import CompileConfig, bind_batch, import_graph

    if plans is None:
        plans = load(targets.target_key("cuda", arch))
    config = CompileConfig(target="cuda", arch=arch, conv_algo="cutlass",
                           precision="tf32" if tf32 else "fp32",
                           batch_sizes=tuple(batch_sizes))
    onnx_model, imported, _ = import_graph(onnx_path, config)
    sms = cuda_conv.sm_count(arch)
    found = {}
    for batch in batch_sizes:
        mod, _ = cutlass_conv.offload(bind_batch(imported.mod, onnx_model, batch), sms, tf32,
                                      plans)
        found[batch] = (cutlass_conv.count_measured(mod, plans),
                        cutlass_conv.count_offloaded(mod))
    return found


def ingest(measured: dict, existing: dict | None = None, margin: float = MARGIN) -> dict:
    """A plan file from bench/cutlass_convs.py's measurements (`run --plans`), merged into
    `existing` (whose entries for other convolutions stay). Per convolution and math: the
    fastest tile and split where it beat the guess by `margin`, else the guess. A tile whose
    output was off (its error in `errors`, where the measurement has it) is left out."""
    plans = {e["key"]: e for e in (existing or {}).get("plans", [])}
    for conv in measured["convs"]:
        for math in MATHS:
            times = conv.get("times", {}).get(math)
            if not times:
                continue
            errors = conv.get("errors", {}).get(math, {})
            finite = {tuple(int(v) for v in k.split("/")): ms for k, ms in times.items()
                      if isinstance(ms, (int, float)) and ms > 0
                      and not errors.get(k, 0.0) > ERROR_BAR[math]}
            guess = tuple(conv["plan"])
            if not finite:
                continue
            best = min(finite, key=finite.get)
            guess_ms = finite.get(guess)
            if guess_ms is not None and finite[best] > (1 - margin) * guess_ms:
                best = guess
            key = conv_key(conv["x"], conv["w"], conv["pad"], conv["stride"], conv["dilation"],
                           math == "tf32")
            plans[key] = {"key": key, "tile": best[0], "split": best[1], "ms": finite[best],
                          "guess": list(guess), "guess_ms": guess_ms}
    return {"schema": SCHEMA, "arch": measured["arch"], "device": measured.get("device", ""),
            "measured": measured.get("date", ""),
            "source": "python bench/cutlass_convs.py run DIR --plans FILE; ingest FILE",
            "plans": sorted(plans.values(), key=lambda e: e["key"])}


def write(path: Path, doc: dict) -> None:
    """Whole or not at all: a plan file is read by every compile."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        # mkstemp makes it 0600; a committed, installed plan file must be readable by all
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
