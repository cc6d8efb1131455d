"""Durations of a model's actions before anything was measured live: from the bundle's
profile.json (batch sizes it lacks interpolated), else (for zoo models) from Clockwork's
Table 1, else from a size-based default.
Zoo models simulated by name take the profiles measured on the GPU machine and committed under
model_zoo/profiles/ (`zoo_profile`), falling back to Table 1.

The controller seeds its estimates with these; the simulated runtime executes them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from cw.bundle import Bundle

# Where neither a profile nor the paper has a figure: pinned host→GPU copies at ~12 GB/s as on
# the paper's V100 (PCIe 3), and a nominal 1 ms + 0.5 ms per sample of compute.
_DEFAULT_COPY_BYTES_PER_NS = 12.0
_DEFAULT_EXEC_NS = 1_000_000
_DEFAULT_EXEC_PER_SAMPLE_NS = 500_000


@dataclass(frozen=True)
class Estimates:
    load_ns: int
    exec_ns: dict[int, int]     # per compiled batch size
    input_ns: dict[int, int]
    output_ns: dict[int, int]
    source: str  # "profile" | "profile-partial" | "zoo-profile" | "paper" | "default"


def profile_estimates(profile, batch_sizes, percentile: str = "p99_ns",
                      source: str = "profile") -> Estimates:
    """Each phase's `percentile` in a measured profile, for `batch_sizes`. A size the profile
    did not measure (`cw profile --batch-sizes 1,16`) is interpolated between the nearest
    measured sizes around it; below the smallest it takes the smallest's time, above the
    largest the largest's scaled by batch size (both err long, never short)."""
    measured = {b.batch_size: b for b in profile.batches}

    def phase(name: str) -> dict[int, int]:
        points = sorted((b, getattr(getattr(p, name), percentile)) for b, p in measured.items())
        return {b: _interpolate(points, b) for b in batch_sizes}

    return Estimates(getattr(profile.load.stats, percentile), phase("exec"), phase("input"),
                     phase("output"), source)


def _interpolate(points: list[tuple[int, int]], b: int) -> int:
    below = [p for p in points if p[0] <= b]
    above = [p for p in points if p[0] >= b]
    if not below:
        return above[0][1]
    if not above:
        size, ns = below[-1]
        return -(-ns * b // size)
    (b0, t0), (b1, t1) = below[-1], above[0]
    return t0 if b0 == b1 else t0 + -(-(t1 - t0) * (b - b0) // (b1 - b0))


# The folders under model_zoo/profiles/ that zoo models simulated by name take their timings
# from, newest kernels first: a model takes the first that holds it. nvidia-h200: bundles
# compiled with today's CUDA defaults (CUTLASS convolutions, 2026-11-27; resnet50 at batch 1
# ×4.9 faster than the untuned kernels); nvidia-h100: TVM 0.27's untuned defaults (2026-11-22),
# for the models not measured since. Both are sm_90.
ZOO_PROFILE_DEVICES = ("nvidia-h200", "nvidia-h100")


@functools.lru_cache(maxsize=None)
def zoo_profile(name: str):
    """The newest profile measured on the GPU machine for zoo model `name` and committed under
    model_zoo/profiles/ (the first of ZOO_PROFILE_DEVICES that holds one), or None where there
    is none. Read once per name: a replay may ask for thousands of copies of one model
    (profiles are frozen structs)."""
    from importlib import resources

    import msgspec

    from cw.profile.schema import Profile

    for device in ZOO_PROFILE_DEVICES:
        path = resources.files("model_zoo") / "profiles" / device / f"{name}.json"
        if path.is_file():
            return msgspec.json.decode(path.read_bytes(), type=Profile)
    return None


def _copy_ns(nbytes: int) -> int:
    return max(1_000, int(nbytes / _DEFAULT_COPY_BYTES_PER_NS))


def bundle_estimates(bundle: Bundle, percentile: str = "p99_ns") -> Estimates:
    m = bundle.manifest
    copies_in = {k.batch_size: _copy_ns(k.input_bytes) for k in m.kernels}
    copies_out = {k.batch_size: _copy_ns(k.output_bytes) for k in m.kernels}
    from cw.profile.store import read_profile, warn_unregistered

    profile = read_profile(bundle)
    if profile is not None and profile.batches:
        complete = {b.batch_size for b in profile.batches} >= set(m.batch_sizes)
        return profile_estimates(profile, m.batch_sizes, percentile,
                                 "profile" if complete else "profile-partial")
    paper = _paper_figures(m.name, m.source.producer)
    warn_unregistered(bundle, "from Clockwork's Table 1" if paper else "from size-based defaults")
    if paper is not None:
        load_ms, exec_ms = paper
        by_size = dict(zip((1, 2, 4, 8, 16), exec_ms))
        exec_ns = {}
        for b in m.batch_sizes:
            # a compiled size the paper lacks runs like the next larger one it has
            ref = min((s for s in by_size if s >= b), default=16)
            exec_ns[b] = int(by_size[ref] * 1e6)
        return Estimates(int(load_ms * 1e6), exec_ns, copies_in, copies_out, "paper")
    return Estimates(_copy_ns(m.weights.total_bytes),
                     {b: _DEFAULT_EXEC_NS + b * _DEFAULT_EXEC_PER_SAMPLE_NS for b in m.batch_sizes},
                     copies_in, copies_out, "default")


def _paper_figures(name: str, producer: str):
    if producer != "cw.model_zoo":
        return None
    import model_zoo

    entry = model_zoo.MODELS.get(name)
    if entry is None or entry.paper_exec_ms is None:
        return None
    return entry.paper_load_ms, entry.paper_exec_ms
