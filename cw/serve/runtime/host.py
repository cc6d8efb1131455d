"""Models held in host memory by a worker: the verified bundle, its weights file in one aligned
buffer, and the page table. Copies of a model (`--copies N`) share one HostWeights."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


from cw.bundle import Bundle, Manifest, open_bundle, read_manifest
from cw.engine import read_aligned


class HostWeights:
    """One host copy of a bundle's weights, page by page."""

    def __init__(self, bundle: Bundle, read: bool = True):
        """`read=False` keeps only the page table (a simulated worker needs no weight bytes)."""
        self.manifest = bundle.manifest
        w = bundle.manifest.weights
        self.page_size = w.page_size
        self.num_pages = len(w.pages)
        self.buffer = read_aligned(bundle.file(w.file)) if read else None
        self.pages = ([self.buffer[p.file_offset:p.file_offset + p.used_bytes] for p in w.pages]
                      if read else [])

    @property
    def nbytes(self) -> int:
        return 0 if self.buffer is None else int(self.buffer.nbytes)


@dataclass
class HostModel:
    """A servable model instance: a unique id, its bundle and (possibly shared) weights."""
    model_id: str
    bundle: Bundle
    weights: HostWeights

    @property
    def manifest(self) -> Manifest:
        return self.bundle.manifest


def load_models(bundle_dirs: list[Path], copies: int = 1, read_weights: bool = True
                ) -> list[HostModel]:
    """Open (verify) each bundle once and make `copies` instances of it, sharing its weights.
    Instance ids are the bundle's name, suffixed `#k` for copies beyond the first."""
    from cw.memory import check_instances

    check_instances(len(bundle_dirs), copies)  # before the bundles are read
    check_names(bundle_dirs)
    models = []
    for path in bundle_dirs:
        bundle = open_bundle(path)
        weights = HostWeights(bundle, read=read_weights)
        for k in range(copies):
            model_id = bundle.manifest.name if k == 0 else f"{bundle.manifest.name}#{k}"
            models.append(HostModel(model_id, bundle, weights))
    return models


def find_bundles(models_dir: Path) -> list[Path]:
    """Every bundle directly inside `models_dir` (or `models_dir` itself if it is one)."""
    from cw.bundle import MANIFEST
    from cw.errors import UsageError

    models_dir = Path(models_dir)
    if (models_dir / MANIFEST).is_file():
        return [models_dir]
    if not models_dir.is_dir():
        raise UsageError(f"no such directory: {models_dir}", "give --models a directory of bundles")
    found = sorted(p for p in models_dir.iterdir() if (p / MANIFEST).is_file())
    if not found:
        raise UsageError(f"no bundles in {models_dir}",
                         "compile models into it with `cw compile MODEL.onnx -o DIR/NAME`")
    return found


def check_names(bundle_dirs: list[Path]) -> None:
    """A model id is its bundle's name: a second bundle of one name (a copied folder) would be
    served as the first, or not at all, without a word. (Reads the manifests only.)"""
    from cw.errors import UsageError

    named: dict[str, Path] = {}
    for path in bundle_dirs:
        name = read_manifest(path).name
        if name in named:
            raise UsageError(f"bundles {named[name]} and {path} are both named '{name}'",
                             "serve one of them, or recompile one with `cw compile --name "
                             "OTHER`; for instances of one model use --copies")
        named[name] = path
