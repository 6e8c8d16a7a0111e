"""The asyncio client against real VMs: concurrent commands on one event loop, files, background, reconnect, a terminal."""
from __future__ import annotations

import asyncio
from typing import List

from sandglass import AsyncSandbox, CommandExitError


def test_async_sandbox_runs_commands_concurrently_and_moves_files() -> None:
    async def main() -> None:
        async with await AsyncSandbox.create(timeout_s=600, on_timeout="pause", auto_resume=True) as sbx:
            info = await sbx.get_info()
            assert (info.id, info.on_timeout, info.auto_resume) == (sbx.id, "pause", True)
            assert all(m.cpu_count >= 1 for m in await sbx.metrics())
            results = await asyncio.gather(*(sbx.commands.run(f"echo {i}") for i in range(3)))
            assert [r.stdout for r in results] == ["0\n", "1\n", "2\n"]
            await sbx.files.write("/root/aio.txt", "async")
            assert await sbx.files.read("/root/aio.txt") == "async"
            bg = await sbx.commands.run("echo one; sleep 1; echo two", background=True)
            assert (await bg.wait()).stdout == "one\ntwo\n"
            again = await (await AsyncSandbox.connect(sbx.id)).commands.connect(bg.id, from_offset=len("one\n"))
            assert (await again.wait()).stdout == "two\n"
            try:
                await sbx.commands.run("exit 4")
                raise AssertionError("exit 4 did not raise")
            except CommandExitError as e:
                assert e.result.exit_code == 4

    asyncio.run(main())


def test_async_terminal_takes_keystrokes_resizes_and_reports_its_exit() -> None:
    async def main() -> None:
        async with await AsyncSandbox.create(timeout_s=600) as sbx:
            seen: List[bytes] = []
            term = await sbx.pty.create(cols=90, rows=20, cmd="read line; stty size; echo got:$line; exit 6", on_data=seen.append)
            # The resize is answered before the keystrokes go: `read` returns only after it, so stty sees the new size.
            await term.resize(110, 35)
            await term.send_input("typed\n")
            exit_ = await term.wait()
            out = b"".join(seen).replace(b"\r", b"")
            assert exit_.exit_code == 6
            assert b"35 110\n" in out and b"got:typed\n" in out
            assert (await sbx.timeline_with_cadence())["cadence"]["intervalS"] > 0
            assert "command.started" in [e["type"] for e in await sbx.events(types=["command"])]
            assert all(p["public"] is False for p in await sbx.ports.list())

    asyncio.run(main())
