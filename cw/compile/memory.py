"""Memory metadata from TVM's static memory plan.

After `StaticPlanBlockMemory`, every planned block is an `R.memory.alloc_storage(R.shape([BYTES]))`
call; what the plan could not cover stays `R.builtin.alloc_tensor` (usually the outputs). The
workspace a worker must reserve for one inference is the sum of the planned blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

from cw.bundle import Allocation


@dataclass(frozen=True)
class MemoryPlan:
    storage_blocks: list[int]
    unplanned: list[Allocation]

    @property
    def workspace_bytes(self) -> int:
        return sum(self.storage_blocks)


def _static_size(shape_expr, dtype=None) -> int | None:
    from tvm import relax, tirx

    if not isinstance(shape_expr, relax.ShapeExpr):
        return None
    total = 1
    for v in shape_expr.values:
        if not isinstance(v, tirx.IntImm):
            return None
        total *= int(v.value)
    if dtype is not None:
        total *= (dtype.bits * dtype.lanes + 7) // 8
    return total


def memory_plan(func) -> MemoryPlan:
    """Planned storage blocks and unplanned allocations of a Relax function after planning."""
    from tvm import relax

    blocks: list[int] = []
    unplanned: list[Allocation] = []

    def visit(expr):
        if not (isinstance(expr, relax.Call) and hasattr(expr.op, "name")):
            return
        if expr.op.name == "relax.memory.alloc_storage":
            size = _static_size(expr.args[0])
            if size is None:
                unplanned.append(Allocation("alloc_storage", None))
            else:
                blocks.append(size)
        elif expr.op.name == "relax.builtin.alloc_tensor":
            dtype = expr.args[1].value if hasattr(expr.args[1], "value") else None
            size = _static_size(expr.args[0], dtype) if dtype is not None else None
            unplanned.append(Allocation("alloc_tensor", size))

    relax.analysis.post_order_visit(func.body, visit)
    return MemoryPlan(blocks, unplanned)
