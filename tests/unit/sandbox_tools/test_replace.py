"""Write and Edit never leave a file worse than they found it: a full file system, a
quota, a read-only mount or a missing permission leaves the old content whole and
tells the model what happened and what to do (never "internal error"); mode and
owner are kept; a symlink stays a link to the changed file; a hard-linked file is
changed under all its names; a file in a read-only directory is still writable."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sandbox_tools.jsontypes import JSONObject
from sandbox_tools.tools import ToolContext, run_tool
from sandbox_tools.tools.replace import TEMP_PREFIX
from tests.conftest import REPO_ROOT, UNPRIVILEGED

ORIGINAL = "original line\n" * 2000  # 28 KB: more than a 4 KB block survives a truncation
NOBODY = 65534


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(root=tmp_path.resolve())


def _leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.startswith(TEMP_PREFIX)]


def test_write_keeps_mode_and_owner_and_leaves_no_temporary_file(ctx: ToolContext) -> None:
    target = ctx.root / "run.sh"
    target.write_text("#!/bin/sh\necho old\n")
    os.chmod(target, 0o751)
    if os.geteuid() == 0:
        os.chown(target, UNPRIVILEGED, UNPRIVILEGED + 1)
    before = target.stat()

    out = run_tool("Write", {"file_path": str(target), "content": "#!/bin/sh\necho new\n"}, ctx)
    edit = run_tool(
        "Edit", {"file_path": str(target), "old_string": "new", "new_string": "newer"}, ctx
    )

    assert not out.is_error and not edit.is_error, (out, edit)
    after = target.stat()
    assert target.read_text() == "#!/bin/sh\necho newer\n"
    assert stat.S_IMODE(after.st_mode) == 0o751
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)
    assert _leftovers(ctx.root) == []


def test_a_new_file_gets_the_umask_mode(ctx: ToolContext) -> None:
    old = os.umask(0o027)
    try:
        out = run_tool("Write", {"file_path": "new.txt", "content": "x"}, ctx)
    finally:
        os.umask(old)
    assert not out.is_error
    assert stat.S_IMODE((ctx.root / "new.txt").stat().st_mode) == 0o640


def test_a_symlink_stays_a_link_to_the_changed_file(ctx: ToolContext) -> None:
    real = ctx.root / "real.txt"
    real.write_text("alpha\n")
    link = ctx.root / "link.txt"
    link.symlink_to("real.txt")

    run_tool("Edit", {"file_path": str(link), "old_string": "alpha", "new_string": "beta"}, ctx)
    run_tool("Write", {"file_path": str(link), "content": "gamma\n"}, ctx)

    assert link.is_symlink() and os.readlink(link) == "real.txt"
    assert real.read_text() == "gamma\n"


def test_a_hard_linked_file_is_replaced_whole_and_its_other_names_keep_theirs(
    ctx: ToolContext,
) -> None:
    # Deliberately no longer rewritten in place: a kill during an in-place rewrite
    # tore the file under every name. The name written gets the new content, the
    # others keep the old, and the result says so.
    first = ctx.root / "first.txt"
    first.write_text("shared text\n")
    second = ctx.root / "second.txt"
    os.link(first, second)

    edit = run_tool(
        "Edit", {"file_path": str(first), "old_string": "shared", "new_string": "common"}, ctx
    )
    write = run_tool("Write", {"file_path": str(second), "content": "longer " * 100}, ctx)

    assert not edit.is_error and not write.is_error
    assert "had 1 other name(s) (hard links); they keep the previous content" in edit.text
    assert first.read_text() == "common text\n"
    assert second.read_text() == "longer " * 100
    assert first.stat().st_ino != second.stat().st_ino
    assert _leftovers(ctx.root) == []


def _as_nobody(root: Path, calls: list[tuple[str, JSONObject]]) -> list[dict[str, object]]:
    """Run tool calls in a forked child as an unprivileged user (root ignores directory
    permissions); their outputs."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 1
        try:
            os.close(read_end)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            ctx = ToolContext(root=root)
            outs = [run_tool(name, raw, ctx)._asdict() for name, raw in calls]
            with os.fdopen(write_end, "w") as f:
                json.dump(outs, f)
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as f:
        text = f.read()
    _, status = os.waitpid(pid, 0)
    assert status == 0
    result: list[dict[str, object]] = json.loads(text)
    return result


def test_a_file_in_a_read_only_directory_is_changed_in_place() -> None:
    with tempfile.TemporaryDirectory(prefix="warden-test-") as top:  # pytest's is 0700
        os.chmod(top, 0o755)
        _check_read_only_directory(Path(top).resolve() / "ws")


def _check_read_only_directory(root: Path) -> None:
    locked = root / "locked"
    locked.mkdir(parents=True)
    target = locked / "notes.txt"
    target.write_text("draft\n")
    owner = NOBODY if os.geteuid() == 0 else os.geteuid()
    for p in (root, locked, target):
        os.chown(p, owner, owner)
    os.chmod(target, 0o644)
    os.chmod(locked, 0o555)

    edit, write, new = _as_nobody(
        root,
        [
            ("Edit", {"file_path": str(target), "old_string": "draft", "new_string": "final"}),
            ("Write", {"file_path": str(target), "content": "final\n" * 500}),
            ("Write", {"file_path": str(locked / "new.txt"), "content": "x"}),
        ],
    )

    assert not edit["is_error"] and not write["is_error"], (edit, write)
    assert target.read_text() == "final\n" * 500
    assert new["is_error"]
    assert "permission denied" in str(new["text"]) and "internal error" not in str(new["text"])
    assert _leftovers(locked) == []


def _in_a_full_tmpfs(tmp_path: Path, script: str) -> dict[str, object]:
    """Run `script` (Python; `root` is a full 256 KiB tmpfs holding a.txt and b.txt with
    ORIGINAL, `ctx` its ToolContext) in a private mount namespace; its JSON output."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    prologue = (
        "import json, os, sys\nfrom pathlib import Path\n"
        "from sandbox_tools.tools import ToolContext, run_tool\n"
        "root = Path(sys.argv[1]); ctx = ToolContext(root=root)\n"
        f"for n in ('a.txt', 'b.txt'): (root / n).write_text({ORIGINAL!r})\n"
        "os.link(root / 'b.txt', root / 'b-link.txt')\n"
        "try:\n"
        "    with open(root / 'filler', 'wb') as f:\n"
        "        while True: f.write(b'\\0' * 4096); f.flush()\n"
        "except OSError: pass\n"
    )
    shell = f'mount -t tmpfs -o size=256k tmpfs {mnt} && exec {sys.executable} -c "$0" {mnt}'
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", shell, prologue + script],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_full_file_system_leaves_every_file_whole_and_says_so(tmp_path: Path) -> None:
    result = _in_a_full_tmpfs(
        tmp_path,
        "calls = [\n"
        "  ('Write', {'file_path': 'a.txt', 'content': 'new ' * 20000}),\n"
        "  ('Edit', {'file_path': 'a.txt', 'old_string': 'original', 'new_string': 'x' * 50,"
        " 'replace_all': True}),\n"
        "  ('Edit', {'file_path': 'b.txt', 'old_string': 'original', 'new_string': 'y' * 50,"
        " 'replace_all': True}),\n"
        "  ('Write', {'file_path': 'c.txt', 'content': 'z' * 100000}),\n"
        "]\n"
        "outs = [run_tool(n, i, ctx)._asdict() for n, i in calls]\n"
        "files = {p.name: p.read_text() for p in root.iterdir() if p.name != 'filler'}\n"
        "print(json.dumps({'outs': outs, 'files': files}))\n",
    )
    outs = result["outs"]
    files = result["files"]
    assert isinstance(outs, list) and isinstance(files, dict)
    for out in outs:
        assert out["is_error"], out
        assert "no space left on the device" in out["text"], out
        assert "internal error" not in out["text"]
    assert "a.txt is unchanged" in outs[0]["text"] and "Free space" in outs[0]["text"]
    assert files == {"a.txt": ORIGINAL, "b.txt": ORIGINAL, "b-link.txt": ORIGINAL}


@pytest.mark.skipif(os.geteuid() != 0, reason="remounting needs root")
def test_a_read_only_file_system_is_named_and_the_file_kept(tmp_path: Path) -> None:
    result = _in_a_full_tmpfs(
        tmp_path,
        "import subprocess\n"
        "(root / 'filler').unlink()\n"
        "subprocess.run(['mount', '-o', 'remount,ro', str(root)], check=True)\n"
        "out = run_tool('Edit', {'file_path': 'a.txt', 'old_string': 'original',"
        " 'new_string': 'changed', 'replace_all': True}, ctx)._asdict()\n"
        "print(json.dumps({'out': out, 'a': (root / 'a.txt').read_text()}))\n",
    )
    out = result["out"]
    assert isinstance(out, dict)
    assert out["is_error"] and "the file system is read-only" in out["text"], out
    assert result["a"] == ORIGINAL
