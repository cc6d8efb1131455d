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


def test_every_option_says_what_it_is():
    import inspect

    from cw.cli.app import _register_commands, app

    _register_commands()
    silent, seen = [], 0

    def walk(typer_app, path):
        commands = [(info.name or info.callback.__name__, info.callback)
                    for info in typer_app.registered_commands]
        if typer_app.registered_callback is not None:
            commands.append(("", typer_app.registered_callback.callback))
        for name, callback in commands:
            for param in inspect.signature(callback).parameters.values():
                option = param.default
                if type(option).__name__ != "OptionInfo" or option.hidden:
                    continue
                nonlocal seen
                seen += 1
                if not option.help:
                    silent.append(f"{' '.join(path + [name]).strip()} {option.param_decls}")
        for group in typer_app.registered_groups:
            walk(group.typer_instance, path + [group.name])

    walk(app, ["cw"])
    assert seen > 100 and silent == []


def test_version_names_cw_tvm_and_python(cli):
    import importlib.metadata

    import cw

    r = cli("--version")
    assert r.code == 0, r.err
    assert r.out.startswith(f"cw {cw.__version__} (apache-tvm "
                            f"{importlib.metadata.version('apache-tvm')}, Python 3.")


def test_an_unknown_flag_or_command_is_a_usage_error_with_exit_code_2():
    env = dict(os.environ, COLUMNS="300", NO_COLOR="1")
    for args, said in ((["compile", "--nosuch"], "No such option: --nosuch"),
                       (["nosuchcmd"], "No such command 'nosuchcmd'")):
        r = subprocess.run([sys.executable, "-m", "cw", *args], capture_output=True, text=True,
                           env=env)
        assert r.returncode == 2, (args, r.stderr)
        assert said in r.stderr and "Traceback" not in r.stderr
