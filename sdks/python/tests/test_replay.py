"""Replay from Python against real VMs: a recorded session re-run in a fork answers the same; a file changed in the fork
before the inputs shows as the first divergence; a start that is not the sandbox's is refused with its code."""
from __future__ import annotations

from typing import Iterator

import pytest

from sandglass import CommandExitError, NotFoundError, ReplayFork, Sandbox, compare_command, format_replay_report

RANDOM = "import random; print(random.random())"


@pytest.fixture(scope="module")
def session() -> Iterator[tuple]:
    src = Sandbox.create(timeout_s=1200, snapshot_interval_s=3600)
    src.files.write("/root/config.txt", "mode=original\n")
    start = src.snapshot(name="py-replay-start")["id"]
    src.files.write("/root/app/data.txt", "twelve bytes")
    src.files.make_dir("/root/out")
    # It ends when a file appears, not on its input: the gateway records an input after the agent took it, so an input
    # that ends a command can be logged after the exit it caused, and a replay would wait for that exit first.
    greet = src.commands.run("read name; echo hello $name; until [ -e /root/go ]; do sleep 0.05; done", background=True, stdin=True)
    greet.send_stdin("alice\n")
    src.files.write("/root/go", "")
    assert greet.wait().stdout == "hello alice\n"
    assert src.commands.run("cat /root/config.txt").stdout == "mode=original\n"
    src.commands.exec(["python3", "-c", RANDOM])
    src.files.rename("/root/app/data.txt", "/root/app/data2.txt")
    src.commands.run("ls /root/app")
    src.files.remove("/root/app/data2.txt")
    src.commands.run("echo out; echo err >&2")
    with pytest.raises(CommandExitError):
        src.commands.run("exit 3")
    yield src, start
    Sandbox.kill(src.id)


def test_a_replay_of_the_session_answers_the_same(session: tuple) -> None:
    src, start = session
    report = Sandbox.replay(src, snapshot_id=start, nondeterministic=[RANDOM])
    kinds = [i["kind"] for i in report["inputs"]]
    assert report["snapshotId"] == start and report["forkSandboxId"] != src.id
    assert report["firstDivergence"] is None, format_replay_report(report)
    assert report["counts"]["different"] == 0 and report["counts"]["not_recorded"] == 0
    assert {"command", "stdin", "file.write", "file.mkdir", "file.rename", "file.remove"} <= set(kinds)
    random = next(i for i in report["inputs"] if RANDOM in i["summary"])
    assert random["verdict"] in ("same", "nondeterministic")
    failed = next(i for i in report["inputs"] if i["summary"].endswith("exit 3"))
    assert failed["verdict"] == "same" and failed["replay"]["exitCode"] == 3
    assert "no divergence" in format_replay_report(report)
    # The fork is gone once the replay answered, unless keep_fork.
    assert Sandbox.connect(report["forkSandboxId"]).get_info()["state"] == "ended"


def test_a_changed_file_in_the_fork_is_the_first_divergence(session: tuple) -> None:
    src, start = session

    def change(fork: ReplayFork) -> None:
        fork.files.write("/root/config.txt", "mode=changed\n")

    report = Sandbox.replay(src.id, snapshot_id=start, nondeterministic=[RANDOM], prepare=change)
    first = report["firstDivergence"]
    assert first is not None and first["summary"].endswith("cat /root/config.txt")
    assert first["replay"]["outputTail"] == "mode=changed\n"
    assert any("stdout differs" in d for d in first["differences"])
    with pytest.raises(NotFoundError) as e:
        Sandbox.replay(src, snapshot_id="snap_notofthissandbox")
    assert e.value.code == "snapshot_not_found"


def test_compare_command_tells_timing_from_a_real_difference() -> None:
    o = {"exitCode": 0, "signal": None, "timedOut": False, "outputBytes": 4, "output": {"sha256": "a", "stdoutSha256": "s", "stderrSha256": "e", "stdoutBytes": 2, "stderrBytes": 2}}
    interleaved = dict(o, output=dict(o["output"], sha256="b"))
    assert compare_command(o, interleaved)["verdict"] == "timing"
    assert compare_command(o, dict(interleaved, output=dict(interleaved["output"], stdoutSha256="x")))["verdict"] == "different"
    assert compare_command(o, dict(interleaved, output=dict(interleaved["output"], stdoutSha256="x")), nondeterministic=True)["verdict"] == "nondeterministic"
    assert compare_command(o, dict(o, exitCode=1), nondeterministic=True)["verdict"] == "different"


def test_delivery_order_puts_an_input_back_before_the_exit_it_caused() -> None:
    from sandglass.replay import delivery_order

    def ev(seq: int, type_: str, cid: str) -> dict:
        return {"seq": seq, "type": type_, "at": "2026-12-01T10:00:00Z", "data": {"commandId": cid}}

    started, write, exited, other, eof, later = (ev(1, "command.started", "a"), ev(2, "command.input", "a"), ev(3, "command.exited", "a"),
                                                 ev(4, "command.started", "b"), ev(5, "command.input", "a"), ev(6, "command.input", "b"))
    assert delivery_order([started, write, exited, other, eof, later]) == [started, write, eof, exited, other, later]
    assert delivery_order([started, write, eof, exited]) == [started, write, eof, exited]
