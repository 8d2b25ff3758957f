"""Image tags are content-addressed: they change exactly when a build input (a
Dockerfile, an images/ file, sandbox_tools, the base image) changes,
and `resolve_image` finds the current tag with one engine call."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.errors import ConfigError, ImageNotFoundError
from orchestrator.images import hints, resolve_image
from orchestrator.images.base_image import BaseProbe, bootstrap_hash
from orchestrator.images.hashing import (
    KINDS,
    LABEL_INPUTS_HASH,
    LABEL_KIND,
    content_tag,
    inputs_hash,
)
from orchestrator.shipped import shipped_root

AGENT = KINDS["agent"]
BASH = KINDS["bash"]
BASE_ID = "sha256:" + "a" * 64


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A minimal source tree with every input the two images are built from."""
    files = {
        "Dockerfile.agent": "FROM x\n",
        "images/setup-image.sh": "echo setup\n",
        "images/bootstrap-base.sh": "echo bootstrap\n",
        "images/bash/Dockerfile": "FROM y\n",
        "images/bash/restrict.sh": "echo restrict\n",
        "sandbox_tools/__init__.py": "",
        "sandbox_tools/wire.py": "X = 1\n",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def hashes(root: Path) -> tuple[str, str]:
    return inputs_hash(AGENT, root), inputs_hash(BASH, root)


def test_same_inputs_same_hash_and_mtime_does_not_count(tree: Path) -> None:
    before = hashes(tree)
    os.utime(tree / "sandbox_tools/wire.py", (1, 1))
    assert hashes(tree) == before


def test_bytecode_caches_do_not_count(tree: Path) -> None:
    before = hashes(tree)
    cache = tree / "sandbox_tools/__pycache__"
    cache.mkdir()
    (cache / "wire.cpython-311.pyc").write_bytes(b"\0junk")
    (tree / "sandbox_tools/stray.pyc").write_bytes(b"\0junk")
    assert hashes(tree) == before


@pytest.mark.parametrize(
    "relative",
    [
        "sandbox_tools/wire.py",
        "images/setup-image.sh",
    ],
)
def test_a_common_input_changes_both_tags(tree: Path, relative: str) -> None:
    agent, bash = hashes(tree)
    (tree / relative).write_text("changed\n")
    new_agent, new_bash = hashes(tree)
    assert new_agent != agent
    assert new_bash != bash


def test_a_new_file_in_sandbox_tools_changes_both_tags(tree: Path) -> None:
    before = hashes(tree)
    (tree / "sandbox_tools/runner.py").write_text("")
    after = hashes(tree)
    assert after[0] != before[0]
    assert after[1] != before[1]


def test_each_dockerfile_changes_only_its_own_tag(tree: Path) -> None:
    agent, bash = hashes(tree)
    (tree / "images/bash/restrict.sh").write_text("echo stricter\n")
    assert hashes(tree) == (agent, inputs_hash(BASH, tree))
    assert inputs_hash(BASH, tree) != bash
    (tree / "Dockerfile.agent").write_text("FROM z\n")
    assert inputs_hash(AGENT, tree) != agent


def test_the_exec_bit_counts(tree: Path) -> None:
    before = inputs_hash(BASH, tree)
    (tree / "images/bash/restrict.sh").chmod(0o755)
    assert inputs_hash(BASH, tree) != before


def test_the_base_image_id_counts() -> None:
    inputs = "f" * 64
    first = content_tag(AGENT, inputs, BASE_ID)
    assert re.fullmatch(r"warden-agent:[0-9a-f]{12}", first)
    assert content_tag(AGENT, inputs, BASE_ID) == first
    assert content_tag(AGENT, inputs, "sha256:" + "b" * 64) != first


def test_the_bootstrapped_base_is_content_addressed_by_its_script(tree: Path) -> None:
    before = bootstrap_hash(tree)
    (tree / "images/bootstrap-base.sh").write_text("echo other\n")
    assert bootstrap_hash(tree) != before


def test_a_missing_input_is_an_error(tree: Path) -> None:
    (tree / "images/setup-image.sh").unlink()
    with pytest.raises(FileNotFoundError, match=r"setup-image\.sh"):
        inputs_hash(AGENT, tree)


def test_the_real_tree_hashes() -> None:
    assert re.fullmatch(r"[0-9a-f]{64}", inputs_hash(AGENT, shipped_root()))
    assert inputs_hash(AGENT, shipped_root()) != inputs_hash(BASH, shipped_root())


def test_python_and_tools_decide_whether_a_base_is_suitable() -> None:
    slim = BaseProbe((3, 12), "x86_64", ("glibc", "2.36"), frozenset({"bash", "find", "grep"}))
    assert "git" in slim.missing_for(AGENT)
    old = BaseProbe((3, 8), "x86_64", ("glibc", "2.36"), frozenset(AGENT.required_tools))
    assert old.missing_for(AGENT) == ["python3>=3.9"]
    full = BaseProbe((3, 11), "x86_64", ("glibc", "2.36"), frozenset(AGENT.required_tools))
    assert full.missing_for(AGENT) == []


class FakeAPI:
    """Answers `images(filters=...)` and `inspect_image` like the engine would."""

    def __init__(self, rows: list[dict[str, Any]], present: set[str]) -> None:
        self.rows = rows
        self.present = present
        self.calls = 0
        self.inspected: list[str] = []

    def images(self, filters: dict[str, list[str]]) -> list[dict[str, Any]]:
        self.calls += 1
        wanted = dict(item.split("=", 1) for item in filters["label"])
        return [r for r in self.rows if all(r["Labels"].get(k) == v for k, v in wanted.items())]

    def inspect_image(self, ref: str) -> dict[str, Any]:
        from docker.errors import ImageNotFound

        self.calls += 1
        self.inspected.append(ref)
        for row in self.rows:
            if ref in row["RepoTags"]:
                return {"Id": "sha256:" + "d" * 64, "Config": {"Labels": row["Labels"]}}
        if ref not in self.present:
            raise ImageNotFound(f"no such image: {ref}")
        return {"Id": "sha256:" + "c" * 64, "Config": {"Labels": {}}}


class FakeImages:
    """`client.images.get(ref)`: one inspect, the image's id and labels."""

    def __init__(self, api: FakeAPI) -> None:
        self._api = api

    def get(self, ref: str) -> SimpleNamespace:
        found = self._api.inspect_image(ref)
        return SimpleNamespace(id=found["Id"], labels=found["Config"]["Labels"])


class FakeClient:
    def __init__(self, api: FakeAPI) -> None:
        self.api = api
        self.images = FakeImages(api)


def test_resolve_image_picks_the_newest_image_built_from_the_current_inputs() -> None:
    current = inputs_hash(BASH)
    rows = [
        {"Created": 1, "RepoTags": ["warden-bash:111111111111"],
         "Labels": {LABEL_KIND: "bash", LABEL_INPUTS_HASH: current}},
        {"Created": 3, "RepoTags": ["warden-bash:333333333333"],
         "Labels": {LABEL_KIND: "bash", LABEL_INPUTS_HASH: "stale"}},
        {"Created": 2, "RepoTags": ["warden-bash:222222222222"],
         "Labels": {LABEL_KIND: "bash", LABEL_INPUTS_HASH: current}},
    ]  # fmt: skip
    api = FakeAPI(rows, set())
    assert resolve_image(FakeClient(api), "bash") == "warden-bash:222222222222"
    assert api.calls == 1


def bash_rows(tag: str, inputs: str) -> list[dict[str, Any]]:
    return [{"Created": 1, "RepoTags": [tag], "Labels": {LABEL_KIND: "bash", LABEL_INPUTS_HASH: inputs}}]


def test_the_tag_found_is_kept_and_the_next_lookup_inspects_only_it(tmp_path: Path) -> None:
    """Listing every image costs the engine ~50 ms with a few dozen images; one
    inspect ~2 ms. The second lookup asks about the kept tag only."""
    api = FakeAPI(bash_rows("warden-bash:222222222222", inputs_hash(BASH)), set())
    assert resolve_image(FakeClient(api), "bash", tmp_path) == "warden-bash:222222222222"
    assert (api.calls, api.inspected) == (1, [])  # the listing
    api.calls = 0
    assert resolve_image(FakeClient(api), "bash", tmp_path) == "warden-bash:222222222222"
    assert (api.calls, api.inspected) == (1, ["warden-bash:222222222222"])


@pytest.mark.parametrize("why", ["image removed", "sources changed", "labels differ", "garbage"])
def test_a_hint_the_engine_does_not_confirm_falls_back_to_the_listing(
    tmp_path: Path, why: str
) -> None:
    current = inputs_hash(BASH)
    api = FakeAPI(bash_rows("warden-bash:222222222222", current), set())
    resolve_image(FakeClient(api), "bash", tmp_path)  # keeps the hint
    hint = tmp_path / hints.HINTS_FILE
    if why == "image removed":
        api.rows = bash_rows("warden-bash:333333333333", current)
    elif why == "sources changed":
        hint.write_text(json.dumps({"bash": {"inputs": "older", "tag": "warden-bash:222222222222"}}))
    elif why == "labels differ":  # a hint naming another image is not believed
        api.rows = [*bash_rows("warden-bash:333333333333", current),
                    *bash_rows("warden-bash:222222222222", "other inputs")]  # fmt: skip
    else:
        hint.write_text("{not json")
    found = resolve_image(FakeClient(api), "bash", tmp_path)
    expected = "warden-bash:222222222222" if why in ("sources changed", "garbage") else (
        "warden-bash:333333333333")  # fmt: skip
    assert found == expected
    assert json.loads(hint.read_text())["bash"] == {"inputs": current, "tag": expected}


def test_resolve_image_names_the_build_command_when_not_built() -> None:
    with pytest.raises(ImageNotFoundError, match="warden images build"):
        resolve_image(FakeClient(FakeAPI([], set())), "agent")


def test_resolve_image_passes_other_local_images_through() -> None:
    client = FakeClient(FakeAPI([], {"python:3.12-slim"}))
    assert resolve_image(client, "python:3.12-slim") == "python:3.12-slim"
    with pytest.raises(ImageNotFoundError, match="does not exist locally"):
        resolve_image(client, "nosuch:1")


def test_any_libc_will_do_since_nothing_is_compiled_for_it() -> None:
    alpine = BaseProbe((3, 12), "x86_64", ("", ""), frozenset(AGENT.required_tools))
    assert alpine.missing_for(AGENT) == []


def test_the_remembered_id_is_given_only_for_the_current_sources(tmp_path: Path) -> None:
    """`warden exec` runs this id without asking the engine, so it must be a well-formed
    image id recorded for exactly these inputs; anything else means a lookup."""
    current = inputs_hash(BASH)
    good = "sha256:" + "ab" * 32
    hints.remember(tmp_path, BASH, current, "warden-bash:222222222222", good)
    assert hints.hinted_id(BASH, current, tmp_path) == good
    assert hints.hinted_id(BASH, "older inputs", tmp_path) is None
    for bad in ("sha256:" + "ab" * 31, "warden-bash:222222222222", "sha256:" + "AB" * 32, ""):
        hints.remember(tmp_path, BASH, current, "warden-bash:222222222222", bad or None)
        assert hints.hinted_id(BASH, current, tmp_path) is None, bad


def test_the_runtime_is_never_run_by_a_remembered_id(tmp_path: Path) -> None:
    """`warden exec --image runtime` is refused by `SandboxImages.get`; a hint naming the
    runtime's id (any project-image run leaves one) must not take a way around that."""
    from orchestrator.images.choice import SandboxImages
    from orchestrator.images.hashing import KINDS

    for name in ("runtime", "bash"):
        hints.remember(tmp_path, KINDS[name], inputs_hash(KINDS[name]), f"warden-{name}:1",
                       "sha256:" + "cd" * 32)  # fmt: skip
    images = SandboxImages(FakeClient(FakeAPI([], set())), tmp_path)  # type: ignore[arg-type]
    assert images.remembered("runtime") is None
    found = images.remembered("bash")
    assert found is not None and found.ref == "sha256:" + "cd" * 32 and found.remembered
    with pytest.raises(ConfigError, match="runtime"):
        images.get("runtime", runner=False)
