"""Tuning records: where they live, how `cw compile` finds them, and how they are applied.

A tuning database is a MetaSchedule JSON database directory (database_workload.json +
database_tuning_record.json). `cw compile` applies, in order of precedence, the directories given
with --tune-db and the records committed with cw under cw/tuning/<target key>/ (see
targets.target_key): MetaSchedule matches a kernel by the structural hash of its TIR only, so
records are filed per code generation target and never mixed across targets.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cw.errors import UsageError

COMMITTED_DIR = Path(__file__).resolve().parent.parent / "tuning"
WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
CUTLASS_PLANS_FILE = "cutlass.json"  # measured CUTLASS tiles (cutlass_plans.py), beside or alone


@dataclass(frozen=True)
class TuningSources:
    """The databases one compilation reads, most important first."""
    dirs: tuple[Path, ...]

    def describe(self) -> str:
        return ", ".join(_display(d) for d in self.dirs) or "none"


def _display(path: Path) -> str:
    try:
        return "cw/" + str(path.relative_to(COMMITTED_DIR.parent))
    except ValueError:
        return str(path)


def committed_dir(key: str) -> Path:
    return COMMITTED_DIR / key


def is_database(path: Path) -> bool:
    return (path / WORKLOAD_FILE).is_file() and (path / RECORD_FILE).is_file()


def sources_for(key: str, user_dirs: tuple[str | Path, ...] = (),
                use_committed: bool = True) -> TuningSources:
    dirs = []
    for d in user_dirs:
        path = Path(d)
        if not is_database(path) and not (path / CUTLASS_PLANS_FILE).is_file():
            raise UsageError(f"--tune-db {path}: not a tuning database (no {WORKLOAD_FILE} and "
                             f"{RECORD_FILE} there, nor measured CUTLASS plans in "
                             f"{CUTLASS_PLANS_FILE})",
                             "give a directory written by `cw tune --db DIR`")
        dirs.append(path.resolve())
    committed = committed_dir(key)
    if use_committed and is_database(committed):
        dirs.append(committed)
    return TuningSources(tuple(dirs))


def load_database(sources: TuningSources):
    """One in-memory database with the best record of every workload from every source. Files
    are only read: MetaSchedule's JSON database appends to its files on lookups, which must never
    touch the records that ship with cw."""
    databases = [d for d in sources.dirs if is_database(d)]  # not the CUTLASS plans alone
    if not databases:
        return None
    from tvm.s_tir import meta_schedule as ms

    merged = ms.database.MemoryDatabase()
    # later sources first so that a user's record replaces a committed one for the same workload
    for path in reversed(databases):
        source = ms.database.JSONDatabase(str(path / WORKLOAD_FILE), str(path / RECORD_FILE),
                                          allow_missing=False)
        source.dump_pruned(merged)
    return merged


def apply_database(mod, database):
    """Replace every kernel the database knows with its tuned schedule. Returns (module, number
    of kernels tuned, number of kernels)."""
    from tvm import relax, tirx

    def scheduled(m) -> int:
        # "tirx.is_scheduled" since TVM 0.27 renamed tir to tirx
        return sum(1 for f in m.functions.values() if isinstance(f, tirx.PrimFunc) and f.attrs
                   and ("tirx.is_scheduled" in f.attrs or "tir.is_scheduled" in f.attrs))

    total = sum(1 for f in mod.functions.values() if isinstance(f, tirx.PrimFunc))
    if database is None:
        return mod, 0, total
    before = scheduled(mod)
    mod = _tuned_without_lets(mod, database)
    with database:
        mod = relax.transform.MetaScheduleApplyDatabase()(mod)
    return mod, scheduled(mod) - before, total


def _tuned_without_lets(mod, database):
    """`mod` with each kernel that holds a Let of cw's fast-math formulas, and has a record in
    the form `cw tune` measured (fast_math.without_lets), in that form; the others keep their
    Lets (their input read once: float ultraface ran 6-10 % faster)."""
    from tvm import IRModule, tirx
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    from cw.compile import fast_math

    replaced = {}
    for gv, func in mod.functions.items():
        if not isinstance(func, tirx.PrimFunc) or not fast_math.has_lets(func):
            continue
        expanded = fast_math.without_lets(func)
        query = _normalize_mod(expanded)
        if database.has_workload(query) and \
                database.get_top_k(database.commit_workload(query), 1):
            replaced[gv] = expanded
    if not replaced:
        return mod
    # a copy, as passes return one
    mod = IRModule(dict(mod.functions), attrs=mod.attrs, global_infos=mod.global_infos)
    for gv, func in replaced.items():
        mod[gv] = func
    return mod
