"""TVM's default schedules for the kernels no record or cw schedule covers (dlight's rules, on
CUDA), applied so that a rule that fails on one kernel hands it to the next rule instead of
failing the compile. On CUDA, a schedule that TVM then cannot lower counts as a failure too.

The target's pipeline applies its rules in order and takes the first that returns a schedule;
one that raises stops everything. dlight's GEMV rule asserts a split it cannot make on a
matrix-vector product whose reduction is short (x[N, 4, 6, 6] @ w[6]: "'FloorDiv' object has
no attribute 'value'"), where the next rules (Reduction, then Fallback) schedule it fine. Here
a rule that raises is passed over for that kernel, and the compile says which rule and kernel.
"""

from __future__ import annotations

import functools


def first_schedule(func, target, rules, failed: list | None = None, lowered: bool = False):
    """The schedule of the first of `rules` that takes `func` (None if none does); rules that
    raise are passed over, each appended to `failed` as (rule name, error's last line). With
    `lowered`, so is a schedule TVM's TIR lowering then rejects (where every rule's does, the
    first one's is kept: the build names the kernel)."""
    from tvm import s_tir

    first = None
    for rule in rules:
        try:
            space = rule.apply(func, target, False)
        except Exception as e:  # a rule's own bug, not the kernel's
            if failed is not None:
                failed.append((type(rule).__name__, _last_line(e)))
            continue
        if space is None:
            continue
        sch = space if isinstance(space, s_tir.Schedule) else space[0]
        error = _lowering_error(sch, target) if lowered else None
        if error is None:
            return sch
        if failed is not None:
            failed.append((type(rule).__name__, f"TVM cannot lower its schedule: {error}"))
        first = first or sch
    return first


def _last_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[-1][:100]


def _lowering_error(sch, target) -> str | None:
    """Why TVM's TIR lowering (the first half of a build, no code generated: ~5 ms a kernel)
    rejects `sch`, or None. dlight's Reduction rule gives a grouped convolution without padding
    (a plain copy before the product) a cross-thread reduction that LowerCrossThreadReduction
    refuses: the compile failed at the build, after every batch size was lowered."""
    import tvm
    from tvm.s_tir.pipeline import default_s_tir_pipeline

    lower = default_s_tir_pipeline()[0]
    kernel = sch.mod["main"].with_attr("target", target).with_attr("global_symbol", "kernel")
    try:
        lower(tvm.IRModule({"kernel": kernel}))
    except Exception as e:
        lines = str(e).strip().splitlines()
        checks = [line for line in lines if "Check failed" in line]
        return (checks[0] if checks else _last_line(e))[:100]
    return None


def replacing(passes: list) -> list:
    """`passes` with the pipeline's ApplyDefaultSchedule replaced by this module's pass of the
    same rules."""
    return [_pass_class()(list(p.rules))
            if getattr(getattr(p, "info", None), "name", "") == "ApplyDefaultSchedule"
            and hasattr(p, "rules") else p for p in passes]


@functools.cache
def _pass_class():
    from tvm import tirx
    from tvm.ir.transform import module_pass
    from tvm.target import Target

    @module_pass(opt_level=0, name="ApplyDefaultSchedule")
    class ApplyDefaultSchedules:
        """dlight's ApplyDefaultSchedule, with `first_schedule` per kernel; `failed` collects
        (kernel, rule, error) for the rules it passed over."""

        def __init__(self, rules):
            self.rules = list(rules)
            self.failed: list[tuple[str, str, str]] = []

        def transform_module(self, mod, _ctx):
            updated = {}
            for gv, func in mod.functions_items():
                if not isinstance(func, tirx.PrimFunc) or (
                        func.attrs is not None and int(func.attrs.get("tirx.is_scheduled", 0))):
                    continue
                target = func.attrs.get("target") if func.attrs is not None else None
                target = target or Target.current(allow_none=False)
                failed: list = []
                sch = first_schedule(func, target, self.rules, failed,
                                     lowered=target.kind.name == "cuda")
                self.failed += [(gv.name_hint, rule, error) for rule, error in failed]
                if sch is not None:
                    updated[gv] = sch.mod["main"].with_attr("tirx.is_scheduled", True)
            for gv, func in updated.items():
                mod[gv] = func
            return mod

    return ApplyDefaultSchedules


def notes(passes: list) -> list[str]:
    """One line per kernel and rule the pass in `passes` passed over."""
    return [f"TVM's default schedule rule {rule} failed on kernel {kernel} ({error}); the "
            "next rule that takes it was applied" for p in passes
            for kernel, rule, error in getattr(p, "failed", [])]
