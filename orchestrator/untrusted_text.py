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

Hand-written rather than a library: rich's `escape()` only covers markup, and
no maintained package makes arbitrary text inert on a terminal in this way.

A foundation beside `errors`: every package that shows container text uses it.

May import: `errors` (and rich).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

DETAIL_CHARS = 60
"""Default width of untrusted text in a one-line cell; longer text is cut with `…`."""

_BIDI_AND_SEPARATORS = frozenset(
    [0x061C, 0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
)


def as_data(text: object) -> str:
    """Make untrusted text inert on a terminal: every control character (C0 except
    newline, DEL, C1, so also ESC, CR, BEL and tab), bidi control, line/paragraph
    separator and lone surrogate becomes a visible escape; newlines are kept."""
    value = text if isinstance(text, str) else str(text)
    out: list[str] = []
    for ch in value:
        code = ord(ch)
        if ch == "\n":
            out.append(ch)
        elif ch == "\t":
            out.append("\\t")
        elif code < 0x20 or code == 0x7F or 0x80 <= code < 0xA0:
            out.append(f"\\x{code:02x}")
        elif code in _BIDI_AND_SEPARATORS or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
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
