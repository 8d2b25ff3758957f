"""GNU sed 4.9 scripts, read far enough to find what they do beyond printing: the
files `r`/`R` read, the files `w`/`W` and `s///w` write, and the commands `e` and
`s///e` run. A script this reader does not understand is a problem (it asks):
an unknown command letter could be any of these."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SedEffects:
    """What one sed script reads, writes, and what makes it unprovable."""

    reads: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def read_sed_script(script: str) -> SedEffects:
    """What one sed script reads, writes and runs (see the module doc)."""
    out = SedEffects()
    try:
        _SedScript(script, out).run()
    except _NotUnderstood as exc:
        out.problems.append(f"sed script not understood ({exc}); it may run, read or write files")
    return out


class _NotUnderstood(Exception):
    pass


class _SedScript:
    """GNU sed's script grammar, enough to find `e`, `r`, `R`, `w`, `W` and `s///ew`."""

    def __init__(self, text: str, out: SedEffects) -> None:
        self.s, self.i, self.out = text, 0, out

    def _peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def _blank(self) -> None:
        while self._peek() in (" ", "\t"):
            self.i += 1

    def _to_eol(self) -> str:
        end = self.s.find("\n", self.i)
        end = len(self.s) if end < 0 else end
        text, self.i = self.s[self.i : end], end
        return text

    def _delimited(self, delim: str) -> None:
        while self.i < len(self.s):
            c = self.s[self.i]
            self.i += 1
            if c == "\\":
                self.i += 1
            elif c == delim:
                return
        raise _NotUnderstood("an unterminated expression")

    def _address(self) -> None:
        c = self._peek()
        if c.isdigit():
            while self._peek().isdigit() or self._peek() == "~":
                self.i += 1
        elif c == "$":
            self.i += 1
        elif c in ("/", "\\"):
            if c == "\\":
                self.i += 1
            delim = self._peek()
            self.i += 1
            self._delimited(delim)
            while self._peek() in ("I", "M"):
                self.i += 1
        else:
            return
        self._blank()
        if self._peek() == ",":
            self.i += 1
            self._blank()
            if self._peek() in ("+", "~"):
                self.i += 1
            self._address()

    def run(self) -> None:
        while self.i < len(self.s):
            c = self._peek()
            if c in " \t\n;}":
                self.i += 1
                continue
            self._address()
            self._blank()
            while self._peek() == "!":
                self.i += 1
                self._blank()
            c = self._peek()
            self.i += 1
            self._command(c)

    def _command(self, c: str) -> None:
        if c == "{" or c in "=dDgGhHnNpPxzF":
            return
        if c == "#" or c in ":btTv":
            self._label()
        elif c in "aic":
            while True:  # text to the end of the line, continued by a trailing backslash
                line = self._to_eol()
                if not line.endswith("\\") or self.i >= len(self.s):
                    break
                self.i += 1
        elif c in "rR":
            self.out.reads.append(self._to_eol().strip())
        elif c in "wW":
            self.out.writes.append(self._to_eol().strip())
        elif c == "e":
            self.out.problems.append("sed 'e' runs a command")
            self._to_eol()
        elif c in "qQlL":
            self._blank()
            while self._peek().isdigit():
                self.i += 1
        elif c in "sy":
            delim = self._peek()
            if not delim or delim in "\n\\":
                raise _NotUnderstood(f"'{c}' without a delimiter")
            self.i += 1
            self._delimited(delim)
            self._delimited(delim)
            if c == "s":
                self._flags()
        elif c == "":
            return
        else:
            raise _NotUnderstood(f"command {c!r}")

    def _label(self) -> None:
        while self._peek() not in ("", "\n", ";"):
            self.i += 1

    def _flags(self) -> None:
        while True:
            c = self._peek()
            if not c:
                return
            if c == "e":
                self.out.problems.append("sed 's///e' runs the pattern space as a command")
            elif c == "w":
                self.i += 1
                self.out.writes.append(self._to_eol().strip())
                return
            elif not (c.isdigit() or c in "gpiImM"):
                return
            self.i += 1
