"""The asyncio client against real VMs: commands run concurrently on one event loop, files, background and reconnect."""
from __future__ import annotations

import asyncio

from sandglass import AsyncSandbox, CommandExitError


def test_async_sandbox_runs_commands_concurrently_and_moves_files() -> None:
    async def main() -> None:
        async with await AsyncSandbox.create(timeout_s=600) as sbx:
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
