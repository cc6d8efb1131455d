"""The machine refusing (a full disk, a path not writable) is one error line naming the path,
with a fix, and exit code 6: not an internal error to report (cw/errors.py)."""

import errno

import pytest

from cw.cli.app import EXIT_INTERNAL
from cw.errors import HostError, writing


def fill_a_disk():
    with open("/dev/full", "w") as f:  # every write to it fails as on a full disk: ENOSPC
        f.write("x")


def test_a_full_disk_names_what_was_being_written(tmp_path):
    with pytest.raises(HostError) as e:
        with writing(tmp_path / "out", "--out"):
            fill_a_disk()
    assert e.value.one_line() == (f"no space left on device writing {tmp_path / 'out'} (free "
                                  "some space there, or write elsewhere (--out))")
    assert e.value.exit_code == 6 != EXIT_INTERNAL
    assert isinstance(e.value.__cause__, OSError) and e.value.__cause__.errno == errno.ENOSPC


def test_the_file_the_os_names_wins_and_other_errors_pass_unchanged(tmp_path):
    denied = OSError(errno.EACCES, "Permission denied", str(tmp_path / "x"))
    host = HostError.of(denied, "elsewhere")
    assert host.message == f"permission denied: {tmp_path / 'x'}" and "permissions" in host.hint
    assert HostError.of(OSError(errno.EMFILE, "Too many open files")).hint.startswith(
        "raise the open-files limit")
    # a file that is not there is the command's business (or a bug): not the machine's
    with pytest.raises(FileNotFoundError):
        with writing(tmp_path / "out"):
            open(tmp_path / "missing" / "x")
    assert HostError.of(OSError(errno.ENOENT, "No such file or directory")) is None
    # where nothing says which option chose the path, the hint names none
    assert HostError.of(OSError(errno.EROFS, "Read-only file system")).hint == "write elsewhere"


def test_a_temporary_beside_the_output_is_named_as_the_output(tmp_path):
    """Atomic writers write `.NAME.xxxx` beside NAME: the user asked for NAME."""
    out = tmp_path / "report.html"
    for ours in (tmp_path / ".report.html.tmp", tmp_path / ".report.html.k2j3" / "lib" / "x.so"):
        host = HostError.of(OSError(errno.EACCES, "Permission denied", str(ours)), out, "-o")
        assert host.message == f"permission denied writing {out}", ours
    other = tmp_path / ".other.tmp"  # not ours for this output: named as the OS named it
    host = HostError.of(OSError(errno.EACCES, "Permission denied", str(other)), out, "-o")
    assert host.message == f"permission denied: {other}"


def test_a_folder_that_cannot_be_made_is_named_with_the_option_that_chose_it(tmp_path):
    from cw.errors import UsageError, creating

    with pytest.raises(HostError) as e:  # the machine refusing: exit 6
        with creating(tmp_path / "logs", "--log-dir"):
            raise OSError(errno.EACCES, "Permission denied", str(tmp_path / "logs" / ".tmp1"))
    assert e.value.one_line() == (f"cannot write to {tmp_path / 'logs'}: permission denied "
                                  "(check that path's permissions, or write elsewhere "
                                  "(--log-dir))")
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError) as e:  # a path that cannot be a folder: the command's
        with creating(tmp_path / "file" / "logs", "--log-dir"):
            (tmp_path / "file" / "logs").mkdir(parents=True)
    assert e.value.exit_code == 2
    assert e.value.one_line().startswith(f"cannot write to {tmp_path / 'file' / 'logs'}: "
                                         f"{tmp_path / 'file'} is a file, not a folder")
    assert e.value.one_line().endswith("(choose a writable output directory with --log-dir)")


def test_how_a_process_ended_in_words():
    from cw.serve.launch import ended_how

    assert ended_how(0) == "exited with code 0" and ended_how(3) == "exited with code 3"
    assert ended_how(-15) == "was killed by SIGTERM"
    assert ended_how(-9).startswith("was killed by SIGKILL (the out-of-memory killer")
    assert ended_how(-99) == "was killed by signal 99" and ended_how(None) == "is still running"


def test_errors_cross_a_process_boundary_whole():
    """A process pool's worker, or cw replay's sender processes, hand errors back pickled: the
    class, the message, the hint and a failed request's status must all survive."""
    import pickle

    from cw.client import NoAnswer, RequestFailed
    from cw.errors import UsageError
    from cw.serve.protocol import RequestStatus

    failed = RequestFailed(RequestStatus.UNKNOWN_MODEL, "no worker serves 'resnet50' yet")
    for error in (failed, RequestFailed(RequestStatus.REJECTED, ""),
                  UsageError("--slo 0ms: not a duration", "give an SLO like 100ms"),
                  NoAnswer("no answer within 30 s", "is `cw serve` running there?"),
                  HostError("disk full", None)):
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error)
        assert (back.message, back.hint, back.one_line()) == \
            (error.message, error.hint, error.one_line())
        assert back.exit_code == error.exit_code
    back = pickle.loads(pickle.dumps(failed))
    assert back.status is RequestStatus.UNKNOWN_MODEL
    assert "retry once its workers have joined" in back.hint  # worked out again, the same
