"""The CUTLASS objects' cache (cw/compile/cutlass_build.py `_cached`): built once per key, and a
build clears out the same kind's objects that nothing used for STALE_DAYS."""

import os
import time

from cw.compile import cutlass_build


def test_a_build_prunes_only_stale_objects_of_its_own_kind(tmp_path, monkeypatch):
    monkeypatch.setenv("CW_CACHE", str(tmp_path))
    builds = []

    def build(tmp):
        builds.append(tmp.name)
        tmp.write_bytes(b"object")

    first = cutlass_build._cached("sm_90-3xtf32", "aaaa", ".o", build)
    assert cutlass_build._cached("sm_90-3xtf32", "aaaa", ".o", build) == first
    assert len(builds) == 1  # the second call found it
    other_kind = cutlass_build._cached("sm_90-tf32", "aaaa", ".o", build)
    reference = cutlass_build._cached("reference", "aaaa", ".ref.o", build)
    recent = cutlass_build._cached("sm_90-3xtf32", "bbbb", ".o", build)
    # all three of another kind or recently used survive a new build of the first kind
    long_ago = time.time() - (cutlass_build.STALE_DAYS + 1) * 86400
    for path in (first, other_kind, reference):
        os.utime(path, (long_ago, long_ago))
    newest = cutlass_build._cached("sm_90-3xtf32", "cccc", ".o", build)
    assert newest.exists() and recent.exists()
    assert not first.exists()  # stale, same kind
    assert other_kind.exists() and reference.exists()  # stale, but not this kind's to remove
    # using an object marks it used: it is no longer stale
    os.utime(recent, (long_ago, long_ago))
    cutlass_build._cached("sm_90-3xtf32", "bbbb", ".o", build)
    assert recent.stat().st_mtime > long_ago
    cutlass_build._cached("sm_90-3xtf32", "dddd", ".o", build)
    assert recent.exists()
    assert len(builds) == 6 and not list(tmp_path.rglob("*.tmp*"))
