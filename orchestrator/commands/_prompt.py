"""`warden run`'s prompt: read once from PROMPT, standard input or `--prompt-file`,
bounded, UTF-8 and not empty, or refused with a usage error that says what to do."""

from __future__ import annotations

import sys
from pathlib import Path

import click

MAX_PROMPT_BYTES = 4 * 1024 * 1024
"""Largest prompt read from a file or stdin (more is refused, not cut)."""


def read_prompt(prompt: str | None, prompt_file: Path | None) -> str:
    """The prompt from exactly one of PROMPT, `PROMPT -` (stdin) and `--prompt-file`."""
    if prompt is not None and prompt_file is not None:
        raise click.UsageError("give the prompt once: as PROMPT or with --prompt-file, not both")
    if prompt is None and prompt_file is None:
        raise click.UsageError(
            "no prompt: give PROMPT, `-` to read it from standard input, or --prompt-file FILE"
        )
    if prompt is not None and prompt != "-":
        return prompt
    source = prompt_file or Path("-")
    where = "standard input" if str(source) == "-" else str(source)
    try:
        if str(source) == "-":
            data = sys.stdin.buffer.read(MAX_PROMPT_BYTES + 1)
        else:
            with source.open("rb") as f:
                data = f.read(MAX_PROMPT_BYTES + 1)
    except OSError as exc:
        raise click.UsageError(f"cannot read the prompt from {where}: {exc.strerror}") from None
    if len(data) > MAX_PROMPT_BYTES:
        raise click.UsageError(
            f"the prompt in {where} is over {MAX_PROMPT_BYTES // (1024 * 1024)} MiB; "
            "put the material in the workspace and point the prompt at it"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise click.UsageError(
            f"the prompt in {where} is not UTF-8 text (byte {exc.start}); convert it first"
        ) from None
    if not text.strip():
        raise click.UsageError(f"the prompt in {where} is empty")
    return text
