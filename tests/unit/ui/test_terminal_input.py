"""What a person types at the live prompt, read key by key from a real pseudo-terminal
in cbreak mode: editing keys edit, arrow keys are dropped, the line being typed is
shown as it changes, and the terminal's own settings come back afterwards."""

from __future__ import annotations

import asyncio
import os
import termios

from orchestrator.ui.terminal_input import LineReader


async def test_keys_are_edited_into_lines_and_the_terminal_is_restored() -> None:
    master, slave = os.openpty()
    before = termios.tcgetattr(slave)
    with os.fdopen(slave, "r") as stream:
        lines = LineReader(stream)
        seen: list[str] = []
        lines.on_typing = lambda: seen.append(lines.typed)
        with lines.keys():
            assert not termios.tcgetattr(slave)[3] & (termios.ICANON | termios.ECHO)
            reading = asyncio.create_task(lines.readline())
            os.write(master, b"den")
            while "den" not in seen:
                await asyncio.sleep(0.01)
            # backspace, Ctrl-U, an arrow key, Ctrl-W, then Enter
            os.write(master, b"\x7fy\x15not \x1b[Dnow later\x17please\r")
            assert await asyncio.wait_for(reading, 5) == "not now please\n"
            os.write(master, "ünï\n".encode())
            assert await asyncio.wait_for(lines.readline(), 5) == "ünï\n"
        assert termios.tcgetattr(slave) == before
        os.close(master)
