"""What files one Bash command may read or write, as the path spellings rules match.

Owns how the shell analysis (redirections, each program's operands, options and
scripts, globs, a `cd` before a relative path) becomes the files and trees that
Read, Edit and Write rules are held against. `evaluate` decides from them; a change
to what a program is known to read or write lands in `file_reads`, `file_writes` or
`program_options`, and a change to how their findings become paths lands here."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.permissions import file_reads, file_writes, glob_reads, paths, program_options
from orchestrator.permissions.shell import ShellAnalysis

Spelled = tuple[str, list[str]]
"""A path as the command wrote it, and every spelling of it a rule may name."""


@dataclass
class BashTargets:
    """The files and trees a Bash command may reach, each with the text it wrote."""

    problems: list[str]
    """What the analyser could not prove, and paths made unknown by a `cd`."""
    writes: list[Spelled] = field(default_factory=list)
    """Output redirections."""
    changed: list[Spelled] = field(default_factory=list)
    """Files a command's operands or options write."""
    reads: list[Spelled] = field(default_factory=list)
    """Files read: input redirections, operands, options, and a glob's matches."""
    trees: list[Spelled] = field(default_factory=list)
    """Trees a command may read anywhere in (the spellings are the roots)."""
    write_trees: list[Spelled] = field(default_factory=list)
    """Trees a command may write anywhere in."""
    globs: list[tuple[str, glob_reads.GlobOperand]] = field(default_factory=list)
    """Glob operands decided exactly (their matches are also in `reads`)."""


def collect(analysis: ShellAnalysis, host: Path | None, cwd: str) -> BashTargets:
    """Every file and tree `analysis`'s command may read or write. A relative path
    after a `cd` is unknown: a file becomes the whole tree `/`, a redirect a problem."""
    moved = analysis.changes_dir

    def spell(target: str) -> list[str]:
        return paths.spellings(target, host, cwd)

    def tree(target: str) -> list[str]:
        return paths.normalise("/" if moved and not target.startswith("/") else target, cwd)

    def file_or_tree(target: str, files: list[Spelled], trees: list[Spelled]) -> None:
        if moved and not target.startswith("/"):  # unknown: anywhere
            trees.append((f"{target} (after a cd)", ["/"]))
        else:
            files.append((target, spell(target)))

    found = BashTargets(problems=list(analysis.problems))
    for target in analysis.writes:
        if moved and not target.startswith("/"):
            found.problems.append(f"'{target}' is written after a cd, so its path is unknown")
        found.writes.append((target, spell(target)))
    found.reads = [(t, spell(t)) for t in analysis.reads]
    for target in analysis.reads:
        if moved and not target.startswith("/"):
            found.problems.append(f"'{target}' is read after a cd, so its path is unknown")
    found.problems += program_options.link_problems(analysis.commands)
    found.problems += program_options.route_problems([*analysis.reads, *analysis.writes])
    for cmd in analysis.commands:
        written = file_writes.writes(cmd, cwd)
        hidden = program_options.effects(cmd)  # options and scripts that read or write
        found.problems += hidden.problems
        written.files += hidden.writes
        written.trees += hidden.write_trees
        for target in written.files:
            file_or_tree(target, found.changed, found.write_trees)
        found.write_trees += [(t, tree(t)) for t in written.trees]
        read = file_reads.reads(cmd, cwd)
        read.files += hidden.reads
        for target in read.files:
            file_or_tree(target, found.reads, found.trees)
        found.trees += [(t, tree(t)) for t in read.trees]
        for word in read.globs:
            operand = None
            if not moved or word.startswith("/"):
                operand = glob_reads.glob_operand(word, cwd, host)
            if operand is None:  # not decided exactly: the tree it lies under
                root = (
                    "/" if moved and not word.startswith("/") else file_reads.static_dir(word, cwd)
                )
                found.trees.append((word, paths.normalise(root, cwd)))
                continue
            found.globs.append((word, operand))
            found.reads += [(m, spell(m)) for m in operand.matches]
    return found
