"""`cw --help`: each command's summary on one line when the terminal is wide enough (rich
markup kept the docstrings' line breaks, which cut entries mid-sentence)."""

import os
import subprocess
import sys


def _help(*args: str) -> str:
    env = dict(os.environ, COLUMNS="300", NO_COLOR="1")
    return subprocess.run([sys.executable, "-c", "from cw.cli.app import main; main()", *args,
                           "--help"], capture_output=True, text=True, env=env, check=True).stdout


def test_command_summaries_are_one_line_each():
    text = _help()
    line = next(x for x in text.splitlines() if "│ compile " in x)
    assert "one kernel library per batch size, one paged weights blob, memory metadata" in line
    line = next(x for x in _help("serve").splitlines() if "│ controller " in x)
    assert "workers connect with `cw serve worker --controller ...`" in line
