"""A change set reads to a person as exactly what it is: names and lines an attacker
wrote (controls, ANSI escapes, bidi overrides, zero-width characters, lookalikes,
newlines, trailing spaces) are shown escaped, never interpreted; binaries, links,
modes, submodules and removals are one-line summaries with what matters called
out; big diffs are cut with the cut announced; and content that is not what its
hash says is refused rather than shown."""

from __future__ import annotations

import hashlib
import unicodedata
from pathlib import Path

import pytest

from orchestrator.apply import render
from orchestrator.apply.changeset import ChangeSet, ContentStore, FileChange
from orchestrator.apply.render import (
    MAX_DIFF_INPUT_BYTES,
    MAX_DIFF_INPUT_LINES,
    MAX_FILE_DIFF_LINES,
    MAX_SUMMARY_FILES,
    MAX_TOTAL_COMPARED_LINES,
    MAX_TOTAL_DIFF_LINES,
    RenderError,
    ascii_name,
    render_change_set,
    shown_name,
)

HOSTILE_LINE = "ok \x1b[2J\x1b]8;;http://x\x07link\x1b]8;;\x07 \u202egnp.exe\u200b\rfake"


@pytest.fixture(autouse=True)
def _fresh_views() -> None:
    render._views.clear()  # each test renders its own bytes, not a kept rendering


@pytest.fixture
def store(tmp_path: Path) -> ContentStore:
    return ContentStore(tmp_path / "content")


def text_change(store: ContentStore, path: str, old: bytes | None, new: bytes) -> FileChange:
    new_sha = store.put(new)
    if old is None:
        return FileChange(
            path=path, kind="added", new_type="file", new_sha256=new_sha,
            new_size=len(new), new_mode=0o644,
        )  # fmt: skip
    return FileChange(
        path=path, kind="modified", old_type="file", new_type="file",
        old_sha256=store.put(old), new_sha256=new_sha, old_size=len(old), new_size=len(new),
        old_mode=0o644, new_mode=0o644,
    )  # fmt: skip


def change_set(*changes: FileChange) -> ChangeSet:
    return ChangeSet(
        task_id="sa_1",
        agent="coder",
        base="abc",
        changes=tuple(sorted(changes, key=lambda c: c.path)),
    )


def inert(text: str) -> None:
    """Nothing in `text` can act on a terminal or hide: only printable characters
    (and newlines between lines), no format, control or separator characters."""
    for ch in text:
        if ch == "\n":
            continue
        assert ch.isprintable() or ch == " ", repr(ch)
        assert unicodedata.category(ch) not in ("Cf", "Cc", "Zl", "Zp", "Cs", "Co"), repr(ch)


def test_the_header_names_the_whole_hash_and_every_file(store: ContentStore) -> None:
    cs = change_set(
        text_change(store, "a.py", b"one\n", b"two\n"), text_change(store, "b.py", None, b"x\n")
    )
    text = render_change_set(cs, store).text()
    assert text.startswith(f"Change set {cs.sha256}\n")
    assert "2 files: 1 added, 1 modified" in text
    assert "── a.py" in text and "── b.py" in text
    assert "   │-one\n   │+two\n" in text


def test_hostile_lines_are_shown_escaped_and_never_start_a_line_of_their_own(
    store: ContentStore,
) -> None:
    new = f"first\n{HOSTILE_LINE}\nsecond\u2028+++ b/other\x85@@ -1 +1 @@\x0bthird\n".encode()
    text = render_change_set(change_set(text_change(store, "a.txt", b"first\n", new)), store).text()
    inert(text)
    assert (
        "│+ok \\x1b[2J\\x1b]8;;http://x\\x07link\\x1b]8;;\\x07 \\u202egnp.exe\\u200b\\x0dfake"
        in text
    )
    # Only \n ends a line: U+2028, NEL and VT are escapes inside the one line.
    assert "│+second\\u2028+++ b/other\\x85@@ -1 +1 @@\\x0bthird" in text
    for line in text.splitlines():
        assert not line.startswith(("+++", "@@ -1 +1", "second", "fake")), line


def test_invisible_differences_show(store: ContentStore) -> None:
    """Trailing spaces and a tab, and bytes that are not UTF-8, are visible."""
    new = b"x = 1   \n\tindented\nbad \xff\xfe byte\n"
    text = render_change_set(change_set(text_change(store, "a.py", b"x = 1\n", new)), store).text()
    inert(text)
    assert "│+x = 1\\x20\\x20\\x20\n" in text
    assert "│+\\tindented" in text
    assert "│+bad \\udcff\\udcfe byte" in text


def test_hostile_names_are_escaped_with_their_oddities_called_out(store: ContentStore) -> None:
    names = {
        "evil\nname\x1b[31m.txt": "evil\\nname\\x1b[31m.txt",
        "report\u202etxt.exe": "report\\u202etxt.exe",
        "zero\u200bwidth.py": "zero\\u200bwidth.py",
        "trailing.py ": "trailing.py\\x20",
        " leading.py": "\\x20leading.py",
        "looks\\u202eescaped": "looks\\\\u202eescaped",
        "a/../b": "a/../b",
        '<img src=x onerror="alert(1)">': '<img src=x onerror="alert(1)">',
    }
    changes = [text_change(store, name, None, b"x\n") for name in names]
    text = render_change_set(change_set(*changes), store).text()
    inert(text)
    for shown in names.values():
        assert f"── {shown}\n" in text
    assert "the name has a '.' or '..' component" in text
    assert "a name component starts or ends with a space" in text
    assert "the name holds control or invisible characters (shown escaped)" in text


def test_a_lookalike_name_gets_its_ascii_spelling(store: ContentStore) -> None:
    cyrillic = "p\u0430ypal.py"
    decomposed = unicodedata.normalize("NFD", "café.py")
    cs = change_set(
        text_change(store, cyrillic, None, b"x\n"), text_change(store, decomposed, None, b"y\n")
    )
    text = render_change_set(cs, store).text()
    assert "! name in ASCII: p\\u0430ypal.py" in text
    assert "mixes letters of several scripts (CYRILLIC, LATIN)" in text
    assert "! name in ASCII: cafe\\u0301.py" in text
    assert "not in Unicode's composed form (NFC)" in text
    assert ascii_name("plain.py") == shown_name("plain.py") == "plain.py"


def test_binaries_links_modes_submodules_and_removals_are_summaries(store: ContentStore) -> None:
    blob = b"\x00\x01\x02binary"
    sha = store.put(blob)
    changes = [
        FileChange(
            path="bin/tool", kind="added", new_type="file", new_sha256=sha, new_size=len(blob),
            new_mode=0o4755, binary=True,
        ),
        FileChange(path="etc", kind="symlink", new_type="symlink", link_target="/etc/passwd\x1b[0m"),
        FileChange(path="up", kind="symlink", new_type="symlink", link_target="../../home"),
        FileChange(
            path="run.sh", kind="mode_changed", old_type="file", new_type="file",
            old_sha256=sha, new_sha256=sha, old_mode=0o644, new_mode=0o755,
        ),
        FileChange(path="vendor/lib", kind="submodule", old_commit="a" * 40, new_commit="b" * 40),
        FileChange(path="gone.txt", kind="removed", old_type="file", old_sha256=sha, old_size=9),
    ]  # fmt: skip
    views = {v.change.path: v for v in render_change_set(change_set(*changes), store).files}
    tool = views["bin/tool"]
    assert tool.lines == () and f"binary, {len(blob)} bytes, sha256 {sha[:16]}" in tool.summary
    assert any("NEW EXECUTABLE BIT" in n for n in tool.notes)
    assert any("SETUID" in n for n in tool.notes)
    assert views["etc"].summary == "symlink → /etc/passwd\\x1b[0m"
    assert any("absolute path" in n for n in views["etc"].notes)
    assert any("climbs with '..'" in n for n in views["up"].notes)
    assert views["run.sh"].summary.startswith("mode 0644 → 0755")
    assert any("NEW EXECUTABLE BIT (mode 0644 → 0755)" in n for n in views["run.sh"].notes)
    assert views["vendor/lib"].summary == f"submodule pointer {'a' * 40} → {'b' * 40}"
    assert views["gone.txt"].summary.startswith(f"removed: text, 9 bytes, sha256 {sha[:16]}")


def test_a_long_diff_is_cut_per_file_and_the_cut_is_announced(store: ContentStore) -> None:
    new = "".join(f"line {i}\n" for i in range(MAX_FILE_DIFF_LINES * 2)).encode()
    view = render_change_set(change_set(text_change(store, "big.txt", None, new)), store).files[0]
    assert len(view.lines) == MAX_FILE_DIFF_LINES
    assert view.cut.startswith(f"{MAX_FILE_DIFF_LINES + 1} more diff lines of this file not shown")
    assert "sha256 above binds the whole content" in view.cut


def test_the_whole_review_has_a_diff_budget(store: ContentStore) -> None:
    files = MAX_TOTAL_DIFF_LINES // MAX_FILE_DIFF_LINES + 2
    body = "".join(f"{i}\n" for i in range(MAX_FILE_DIFF_LINES)).encode()
    changes = [
        text_change(store, f"f{i:03}.txt", None, body + str(i).encode()) for i in range(files)
    ]
    views = render_change_set(change_set(*changes), store).files
    assert sum(len(v.lines) for v in views) == MAX_TOTAL_DIFF_LINES
    assert "budget is spent" in views[-1].cut and views[-1].summary.startswith("added")


def test_a_huge_file_is_summarised_not_diffed(store: ContentStore) -> None:
    big = b"x" * (MAX_DIFF_INPUT_BYTES + 1)
    view = render_change_set(change_set(text_change(store, "big.txt", None, big)), store).files[0]
    assert view.lines == () and "larger than" in view.cut


def test_content_that_is_not_what_its_hash_says_is_refused(
    store: ContentStore, tmp_path: Path
) -> None:
    change = text_change(store, "a.txt", None, b"reviewed\n")
    assert change.new_sha256 is not None
    stored = tmp_path / "content" / change.new_sha256[:2] / change.new_sha256
    stored.chmod(0o600)
    stored.write_bytes(b"swapped\n")
    with pytest.raises(RenderError, match="cannot be reviewed"):
        render_change_set(change_set(change), store)
    missing = change.model_copy(update={"new_sha256": hashlib.sha256(b"never stored").hexdigest()})
    with pytest.raises(RenderError, match="cannot be reviewed"):
        render_change_set(change_set(missing), store)


def test_a_small_edit_to_a_big_file_is_a_small_diff(store: ContentStore) -> None:
    old = "".join(f"line {i}\n" for i in range(MAX_DIFF_INPUT_LINES * 4)).encode()
    new = old.replace(b"line 7000\n", b"line seven thousand\n")
    view = render_change_set(change_set(text_change(store, "big.txt", old, new)), store).files[0]
    assert [(line.tag, line.text) for line in view.lines] == [
        ("hunk", "@@ -6998,7 +6998,7 @@"),
        ("context", "line 6997"), ("context", "line 6998"), ("context", "line 6999"),
        ("removed", "line 7000"), ("added", "line seven thousand"),
        ("context", "line 7001"), ("context", "line 7002"), ("context", "line 7003"),
    ]  # fmt: skip
    assert view.cut == ""


def test_a_changed_part_too_long_to_compare_is_summarised(store: ContentStore) -> None:
    old = "".join(f"a{i}\n" for i in range(MAX_DIFF_INPUT_LINES + 10)).encode()
    new = "".join(f"a{i}\n" if i % 2 else f"z{i}\n" for i in range(MAX_DIFF_INPUT_LINES + 10))
    view = render_change_set(change_set(text_change(store, "f.txt", old, new.encode())), store)
    assert view.files[0].lines == ()
    assert f"more than {MAX_DIFF_INPUT_LINES}" in view.files[0].cut


def test_a_summary_lists_a_bounded_number_of_files(store: ContentStore) -> None:
    changes = [
        text_change(store, f"f{i:04}.txt", None, b"x\n") for i in range(MAX_SUMMARY_FILES + 5)
    ]
    view = render_change_set(change_set(*changes), store)
    summary = view.summary_text()
    assert (
        summary.count("── f") == MAX_SUMMARY_FILES and "[5 more files not listed here]" in summary
    )
    assert view.text().count("── f") == MAX_SUMMARY_FILES + 5


def test_a_review_compares_a_bounded_number_of_lines(store: ContentStore) -> None:
    """However many files a subagent changes, difflib's work per review is bounded."""
    each = MAX_TOTAL_COMPARED_LINES // 2 - 10
    body = "".join(f"{i}\n" for i in range(each)).encode()
    changes = [text_change(store, f"f{i}.txt", None, body + bytes([65 + i])) for i in range(3)]
    views = render_change_set(change_set(*changes), store).files
    assert [bool(v.lines) for v in views] == [True, True, False]
    assert "compared as many lines as it may" in views[2].cut
