"""Make MetaSchedule start in seconds instead of minutes.

MetaSchedule imports tvm.s_tir.tensor_intrin, which defines a few hundred TVMScript functions;
the TVMScript parser calls inspect.stack() for each, and inspect.stack() reads the source of
every frame on the stack (and looks up the module of every frame by scanning sys.modules). On
this 2-core machine that import took 70-90 s, in the tuning process and again in every builder
and runner worker. The parser only uses the frames themselves and the first caller's source
line, so a stack built from sys._getframe with source context for the innermost frames only is
equivalent for it. This module imports nothing heavy, so worker processes can load it cheaply
as their initializer.
"""

from __future__ import annotations

import contextlib
import inspect
import linecache
import sys

_CONTEXT_FRAMES = 3


def _fast_stack(context: int = 1):
    frame = sys._getframe(1)
    frames = []
    while frame is not None:
        code = frame.f_code
        lineno = frame.f_lineno
        lines = None
        if len(frames) < _CONTEXT_FRAMES:
            line = linecache.getline(code.co_filename, lineno)
            lines = [line] if line else None
        frames.append(inspect.FrameInfo(frame, code.co_filename, lineno, code.co_name, lines,
                                        0 if lines else None))
        frame = frame.f_back
    return frames


def install() -> None:
    """For throwaway worker processes (MetaSchedule's builder and runner pools)."""
    inspect.stack = _fast_stack


@contextlib.contextmanager
def fast_inspect_stack():
    original = inspect.stack
    inspect.stack = _fast_stack
    try:
        yield
    finally:
        inspect.stack = original
