"""How many threads TVM's CPU kernels get, and how CPU workers share a machine's cores."""

import os
import subprocess
import sys

import pytest

from cw.cli.serve_cmds import parse_cpu_list
from cw.errors import UsageError
from cw.tvm_env import physical_cores, split_cores


def test_workers_get_whole_disjoint_cores_as_even_as_possible():
    groups = [[0, 4], [1, 5], [2, 6], [3, 7]]  # 4 cores with 2 hyper-threads each
    assert split_cores(2, groups) == [[0, 4, 1, 5], [2, 6, 3, 7]]
    assert split_cores(3, groups) == [[0, 4, 1, 5], [2, 6], [3, 7]]
    assert split_cores(1, groups) == [[0, 4, 1, 5, 2, 6, 3, 7]]


def test_more_workers_than_cores_share_cores_round_robin():
    assert split_cores(5, [[0], [1]]) == [[0], [1], [0], [1], [0]]


def test_cpu_lists_parse_and_are_checked_against_this_process():
    allowed = sorted(os.sched_getaffinity(0))
    assert parse_cpu_list(",".join(map(str, allowed))) == allowed
    assert parse_cpu_list(f"{allowed[0]}-{allowed[0]}") == [allowed[0]]
    with pytest.raises(UsageError, match="not a CPU list"):
        parse_cpu_list("a-b")
    with pytest.raises(UsageError, match="not available"):
        parse_cpu_list(str(max(allowed) + 64))


def _tvm_threads(**env_overrides) -> int:
    env = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")}
    env.update(env_overrides)
    code = ("from cw.tvm_env import load_tvm; tvm = load_tvm(); "
            "print(tvm.get_global_func('runtime.NumThreads')())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def test_tvm_kernels_use_one_thread_per_physical_core_unless_told_otherwise():
    # TVM alone halves the CPU count on x86 (assuming hyper-threads): on a 2-core VM without
    # SMT it ran every CPU kernel on one core.
    assert _tvm_threads() == physical_cores()
    assert _tvm_threads(TVM_NUM_THREADS="1") == 1
    assert _tvm_threads(OMP_NUM_THREADS="1") == 1
