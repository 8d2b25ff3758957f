"""The one way container-originated text reaches a terminal: as inert plain text.

Everything a subagent can influence (commands, tool inputs and results, task
descriptions, errors, file names, agent names from workspace files, transcript
roles) is attacker-written. Two things can go wrong when it is printed:

- **Markup.** rich parses strings given to `Table.add_row`, `Tree`, `Panel` and
  `Console.print` as console markup: `[/bold]` raises `MarkupError` (which froze
  the live display and turned an approval question into a deny), `[link=…]`
  emits a hyperlink. `plain()` returns a `rich.text.Text`, which rich never
  parses, so renderers pass `Text` objects, not strings, for anything untrusted.
- **Terminal control sequences.** ESC (CSI such as `\\x1b[2J`, OSC 8 hyperlinks,
  title changes), BEL, CR, other C0/C1 controls, DEL, bidi overrides, line and
  paragraph separators and lone surrogates (which make a UTF-8 stream raise) are
  shown as visible escapes by `as_data()`, so text can neither redraw the screen
  nor fake a prompt line.
- **Invisible characters.** Zero-width and other format characters (category Cf),
  spaces other than the ASCII one and blank letters are escaped too, so padding
  cannot hide or disguise what a command does.

Hand-written rather than a library: rich's `escape()` only covers markup, and
no maintained package makes arbitrary text inert on a terminal in this way.

A foundation beside `errors`: every package that shows container text uses it.

May import: `errors` (and rich).
"""

from __future__ import annotations

import unicodedata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

DETAIL_CHARS = 60
"""Default width of untrusted text in a one-line cell; longer text is cut with `…`."""

_INVISIBLE_CATEGORIES = frozenset({"Cf", "Co", "Cn", "Cs", "Zl", "Zp", "Zs"})
"""Unicode categories shown as escapes: format characters (zero-width space and
joiners, bidi controls, word joiner, soft hyphen, tag characters), private use,
unassigned code points, lone surrogates, line/paragraph separators and every
space but the ASCII one; each can hide or disguise what a command does."""

_BLANK_LETTERS = frozenset([0x115F, 0x1160, 0x2800, 0x3164, 0xFFA0])
"""Characters that draw nothing although their category says letter or symbol."""


def as_data(text: object) -> str:
    """Make untrusted text inert on a terminal: every control character (C0 except
    newline, DEL, C1, so also ESC, CR, BEL and tab), format character (Unicode
    category Cf: zero-width characters, bidi controls, tags), separator, space other
    than ASCII space, blank letter, private-use, unassigned code point and lone
    surrogate becomes a visible escape; newlines are kept."""
    value = text if isinstance(text, str) else str(text)
    out: list[str] = []
    for ch in value:
        code = ord(ch)
        if ch in "\n ":
            out.append(ch)
        elif ch == "\t":
            out.append("\\t")
        elif code < 0x20 or code == 0x7F or 0x80 <= code < 0xA0:
            out.append(f"\\x{code:02x}")
        elif code in _BLANK_LETTERS or unicodedata.category(ch) in _INVISIBLE_CATEGORIES:
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(ch)
    return "".join(out)


def printable(text: object, limit: int | None = DETAIL_CHARS, *, multiline: bool = False) -> str:
    """Untrusted text as an inert plain string: `as_data`, newlines shown as `\\n`
    unless `multiline`, and cut to `limit` characters with a trailing `…`."""
    out = as_data(text)
    if not multiline:
        out = out.replace("\n", "\\n")
    return out if limit is None or len(out) <= limit else out[: limit - 1] + "…"


def plain(
    text: object, limit: int | None = None, *, multiline: bool = False, style: str = ""
) -> Text:
    """Untrusted text as a rich `Text`: never parsed as markup, controls escaped."""
    from rich.text import Text

    return Text(printable(text, limit, multiline=multiline), style=style)
