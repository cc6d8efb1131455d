"""A bundle's profile.json on disk: reading it, keeping what earlier runs measured, and
registering a profile measured elsewhere (`cw profile BUNDLE --import FILE`).

A profile counts only when the bundle's manifest lists it with its checksum, as `cw profile`
does when it writes one. A profile.json copied into a bundle by hand is not listed, so workers
and replays ignore it; `unregistered_profile` finds such a file so that they can say so.
"""

from __future__ import annotations

import logging
from pathlib import Path

import msgspec

from cw.bundle import PROFILE_FILE, Bundle, encode_json, open_bundle, replace_file_in_bundle
from cw.errors import UsageError
from cw.profile.schema import PROFILE_SCHEMA_VERSION, Profile

log = logging.getLogger("cw.profile")
_warned: set[Path] = set()


def read_profile(bundle: Bundle) -> Profile | None:
    if not bundle.has_profile:
        return None
    return msgspec.json.decode(bundle.file(PROFILE_FILE).read_bytes(), type=Profile)


def unregistered_profile(bundle: Bundle) -> Path | None:
    """A profile.json in the bundle's directory that its manifest does not list, or None."""
    path = bundle.path / PROFILE_FILE
    return path if not bundle.has_profile and path.is_file() else None


def warn_unregistered(bundle: Bundle, fallback: str) -> None:
    """Log once per bundle that its hand-copied profile.json is ignored, and how to use it."""
    path = unregistered_profile(bundle)
    if path is None or path in _warned:
        return
    _warned.add(path)
    log.warning("%s is not in the bundle's manifest, so it is ignored (timings %s); register it "
                "with: cw profile %s --import %s", path, fallback, bundle.path, path)


def merge_measured(old: Profile | None, new: Profile) -> Profile:
    """`new`, plus the batch sizes `old` measured on the same device and runtime that `new`
    did not measure again: `cw profile --batch-sizes 16` must not drop sizes 1-8."""
    if old is None or (old.device.name, old.runtime) != (new.device.name, new.runtime):
        return new
    measured = {b.batch_size for b in new.batches}
    kept = [b for b in old.batches if b.batch_size not in measured]
    if not kept:
        return new
    batches = sorted(new.batches + kept, key=lambda b: b.batch_size)
    note = (f"batch size(s) {', '.join(str(b.batch_size) for b in kept)} kept from the profile "
            f"of {old.date_utc}")
    return msgspec.structs.replace(new, batches=batches, notes=[*new.notes, note])


def import_profile(bundle_path: str | Path, profile_file: str | Path) -> Profile:
    """Register `profile_file` (measured elsewhere, e.g. model_zoo/profiles/ or on a GPU
    machine) as the bundle's profile, after checking that it fits the bundle."""
    bundle = open_bundle(bundle_path, remeasuring=True)  # (the profile it replaces may be damaged)
    m = bundle.manifest
    source = Path(profile_file)
    if not source.is_file():
        raise UsageError(f"no profile at {source}", "give a profile.json that `cw profile` wrote")
    try:
        profile = msgspec.json.decode(source.read_bytes(), type=Profile)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise UsageError(f"{source} is not a cw profile: {e}",
                         "give a profile.json that `cw profile` wrote") from None
    if profile.schema_version != PROFILE_SCHEMA_VERSION:
        raise UsageError(f"{source} has profile schema {profile.schema_version}; this cw reads "
                         f"{PROFILE_SCHEMA_VERSION}", "measure again with `cw profile`")
    if profile.device.kind != m.target.kind:
        raise UsageError(f"{source} was measured on a {profile.device.kind} device, but "
                         f"{bundle.path} is compiled for {m.target.kind}",
                         "import a profile of a bundle compiled for the same target")
    sizes = [b.batch_size for b in profile.batches]
    foreign = sorted(set(sizes) - set(m.batch_sizes))
    if foreign or not sizes:
        raise UsageError(f"{source} measures batch sizes {sizes}; {bundle.path} compiles "
                         f"{m.batch_sizes}",
                         "import a profile of a bundle compiled with those batch sizes")
    if profile.load.pages != len(m.weights.pages):
        raise UsageError(f"{source} loads {profile.load.pages} weight page(s); {bundle.path} has "
                         f"{len(m.weights.pages)}",
                         "import a profile of the same model with the same --page-size")
    if profile.bundle != m.name:
        note = f"measured as '{profile.bundle}', imported into '{m.name}' from {source.name}"
    else:
        note = f"imported from {source.name}"
    profile = msgspec.structs.replace(profile, notes=[*profile.notes, note])
    replace_file_in_bundle(bundle, PROFILE_FILE, encode_json(profile))
    _warned.discard(bundle.path / PROFILE_FILE)
    return profile
