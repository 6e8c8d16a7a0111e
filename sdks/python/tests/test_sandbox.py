"""The sync client against real VMs: commands, files, errors with the catalogue's codes, time travel, policy, secrets."""
from __future__ import annotations

import io
import tarfile
from typing import List

import pytest

from sandglass import (
    CommandExitError,
    CommandTimeoutError,
    ConnectionFailedError,
    InvalidArgumentError,
    NotFoundError,
    Sandbox,
    SandglassError,
    Secrets,
)


def test_run_streams_stdout_to_the_callback_and_returns_the_result(sbx: Sandbox) -> None:
    seen: List[str] = []
    r = sbx.commands.run("echo hello; echo oops >&2", on_stdout=seen.append)
    assert (r.exit_code, r.stdout, r.stderr) == (0, "hello\n", "oops\n")
    assert "".join(seen) == "hello\n"


def test_a_failing_command_raises_with_its_result(sbx: Sandbox) -> None:
    with pytest.raises(CommandExitError) as e:
        sbx.commands.run("echo partial; exit 3")
    assert (e.value.code, e.value.result.exit_code, e.value.result.stdout) == ("command_failed", 3, "partial\n")


def test_a_command_past_its_timeout_is_killed(sbx: Sandbox) -> None:
    with pytest.raises(CommandTimeoutError) as e:
        sbx.commands.run("sleep 30", timeout_ms=1000)
    assert e.value.code == "timeout" and e.value.result.timed_out


def test_background_then_reconnect_from_an_offset_in_another_handle(sbx: Sandbox) -> None:
    h = sbx.commands.run("echo first; read line; echo second $line", background=True, stdin=True)
    h.send_stdin("x\n")
    assert h.wait().stdout == "first\nsecond x\n"
    again = Sandbox.connect(sbx.id).commands.connect(h.id, from_offset=len("first\n"))
    assert again.wait().stdout == "second x\n"


def test_exec_runs_an_argv_without_a_shell(sbx: Sandbox) -> None:
    assert sbx.commands.exec(["echo", "$HOME", "a b"]).stdout == "$HOME a b\n"


def test_stdin_until_eof(sbx: Sandbox) -> None:
    h = sbx.commands.run("cat", background=True, stdin=True)
    h.send_stdin(b"bytes in\n")
    h.close_stdin()
    assert h.wait().stdout == "bytes in\n"


def test_a_terminal_has_its_size_takes_keystrokes_resizes_and_reports_its_exit(sbx: Sandbox) -> None:
    sized: List[bytes] = []
    assert sbx.pty.create(cols=100, rows=30, cmd="stty size", on_data=sized.append).wait().exit_code == 0
    assert b"30 100" in b"".join(sized)
    seen: List[bytes] = []
    term = sbx.pty.create(cmd="read line; stty size; echo got:$line; exit 5", on_data=seen.append)
    # The resize is answered before the keystrokes go: `read` returns only after it, so stty sees the new size.
    term.resize(120, 40)
    term.send_input("typed\n")
    exit_ = term.wait()
    out = b"".join(seen).replace(b"\r", b"")
    assert exit_.exit_code == 5
    assert b"40 120\n" in out and b"got:typed\n" in out


def test_files_text_bytes_list_and_remove(sbx: Sandbox) -> None:
    sbx.files.write("/root/py/a.txt", "héllo")
    sbx.files.write("/root/py/b.bin", bytes([0, 255, 1]))
    assert sbx.files.read("/root/py/a.txt") == "héllo"
    assert sbx.files.read("/root/py/b.bin", format="bytes") == bytes([0, 255, 1])
    assert sorted(e["name"] for e in sbx.files.list("/root/py")) == ["a.txt", "b.bin"]
    sbx.files.remove("/root/py/a.txt")
    assert not sbx.files.exists("/root/py/a.txt")
    with pytest.raises(NotFoundError) as e:
        sbx.files.read("/root/py/a.txt")
    assert e.value.code == "file_not_found" and e.value.status == 404


def test_a_directory_goes_up_and_comes_down_as_tar(sbx: Sandbox) -> None:
    up = io.BytesIO()
    with tarfile.open(fileobj=up, mode="w") as tar:
        info = tarfile.TarInfo("sub/t.txt")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"tared"))
    sbx.files.write_tar("/root/tarred", up.getvalue())
    assert sbx.files.read("/root/tarred/sub/t.txt") == "tared"
    with tarfile.open(fileobj=io.BytesIO(sbx.files.read_tar("/root/tarred")), mode="r") as down:
        member = next(m for m in down.getmembers() if m.name.endswith("sub/t.txt"))
        extracted = down.extractfile(member)
        assert extracted is not None and extracted.read() == b"tared"


def test_errors_carry_the_catalogue_codes() -> None:
    with pytest.raises(NotFoundError) as e:
        Sandbox.connect("sbx_doesnotexist0000000000")
    assert e.value.code == "sandbox_not_found" and e.value.request_id
    with pytest.raises(InvalidArgumentError) as bad:
        Sandbox.create(memory_mib=1)
    assert bad.value.code == "invalid_argument" and bad.value.status == 400 and bad.value.retryable is False
    with pytest.raises(ConnectionFailedError) as down:
        Sandbox.list(api_url="http://127.0.0.1:1")
    assert down.value.code == "connection_failed"
    with pytest.raises(InvalidArgumentError) as source:
        Sandbox.fork("not-a-source")
    assert source.value.details["field"] == "from" and isinstance(source.value, SandglassError)
    assert Sandbox.kill("sbx_doesnotexist0000000000") is False


def test_list_shows_the_sandbox(sbx: Sandbox) -> None:
    assert sbx.id in [s["id"] for s in Sandbox.list()]


def test_snapshot_fork_pause_and_resume_keep_the_files() -> None:
    src = Sandbox.create(timeout_s=600)
    try:
        src.files.write("/root/state.txt", "before")
        snap = src.snapshot(name="py-checkpoint")
        assert snap["id"] in [s["id"] for s in src.timeline()]
        [copy] = Sandbox.fork(snap["id"], count=1)
        try:
            assert copy.files.read("/root/state.txt") == "before"
        finally:
            Sandbox.kill(copy.id)
        src.pause()
        back = Sandbox.resume(src.id)
        assert back.files.read("/root/state.txt") == "before"
    finally:
        Sandbox.kill(src.id)


def test_network_policy_is_set_at_create_and_replaced() -> None:
    with Sandbox.create(timeout_s=600, network={"allow": ["example.com"]}) as sbx:
        assert sbx.get_info()["network"]["allow"] == ["example.com"]
        assert sbx.set_network(allow=["example.org"], deny=["bad.example.org"])["allow"] == ["example.org"]
        assert sbx.get_info()["network"]["deny"] == ["bad.example.org"]


def test_secrets_never_come_back() -> None:
    info = Secrets.set("PY_SDK_TOKEN", "s3cret-value", hosts=["api.example.com"], header="Authorization", format="Bearer {value}")
    try:
        assert info["name"] == "PY_SDK_TOKEN" and "s3cret-value" not in repr(info)
        assert "s3cret-value" not in repr(Secrets.list())
    finally:
        assert Secrets.remove("PY_SDK_TOKEN") is True
    assert Secrets.remove("PY_SDK_TOKEN") is False
