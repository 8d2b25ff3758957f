"""Locks in that a dev container build fetches nothing, whatever the Dockerfile
spells: an `ADD` of a URL through `ARG`, `ENV` or build arguments, an `ONBUILD`
trigger (of a stage or of a local base image), `ADD --checksum`, here-documents
and a BuildKit `# syntax` line all fail with a clear error, and a local HTTP
server on 127.0.0.1 (the test's own) sees no request. Real engine, real builds."""

from __future__ import annotations

import http.server
import io
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.errors import ConfigError, ImageBuildError
from tests.integration.project_fixtures import cc_image, engine, throwaway_images
from tests.integration.test_devcontainer_builds import build, dockerfile, left_behind

pytestmark = pytest.mark.integration
__all__ = ["cc_image", "engine", "throwaway_images"]


class Watched:
    """An HTTP server on 127.0.0.1 that records every request it gets."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        seen = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(self.path)
                body = b"fetched\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_HEAD = do_GET

            def log_message(self, *args: Any) -> None:
                pass

        class Server(http.server.ThreadingHTTPServer):
            def process_request(self, request: Any, client_address: Any) -> None:
                seen.append(f"connection from {client_address}")  # before any byte
                super().process_request(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/payload"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def watched() -> Iterator[Watched]:
    server = Watched()
    try:
        yield server
    finally:
        server.close()


SPELLINGS = {
    "arg": ("ARG U={url}", "ADD ${{U}} /fetched"),
    "env": ("ENV U={url}", "ADD $U /fetched"),
    "build-arg-default": ("ARG U", "ADD ${{U:-{url}}} /fetched"),
    "syntax-line": ("ARG U={url}", "ADD ${{U}} /fetched"),
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_an_add_of_a_url_through_variables_fails_and_fetches_nothing(
    spelling: str, engine: Any, settings: Settings, workspace: Path, cc_image: str,
    watched: Watched,
) -> None:  # fmt: skip
    marker = uuid.uuid4().hex
    steps = [step.format(url=watched.url) for step in SPELLINGS[spelling]]
    text = dockerfile(cc_image, marker, *steps)
    if spelling == "syntax-line":
        text = "# syntax=docker/dockerfile:1\n" + text
    with pytest.raises(ImageBuildError) as failed:
        build(engine, settings, workspace, text, deadline_s=120)
    message = str(failed.value)
    assert "can't be a URL" in message and "never download" in message, message
    assert watched.requests == []
    assert left_behind(engine, marker) == []


REFUSED = {
    "onbuild-stage": (
        ["FROM {base} AS trigger", "ONBUILD ADD {url} /fetched", "FROM trigger"],
        "ONBUILD",
    ),
    "checksum": (
        ["FROM {base}", "ADD --checksum=sha256:" + "0" * 64 + " {url} /fetched"],
        "--checksum",
    ),
    "heredoc-body": (
        ["FROM {base}", "RUN <<CMD", "ADD {url} /fetched", "CMD"],
        "here-documents",
    ),
    "heredoc-copy": (["FROM {base}", "COPY <<EOF /made", "{url}", "EOF"], "here-documents"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_shapes_that_would_fetch_are_refused_before_the_build(
    case: str, engine: Any, settings: Settings, workspace: Path, cc_image: str,
    watched: Watched,
) -> None:  # fmt: skip
    lines, says = REFUSED[case]
    text = "\n".join(line.format(base=cc_image, url=watched.url) for line in lines) + "\n"
    with pytest.raises(ConfigError) as refused:
        build(engine, settings, workspace, text, deadline_s=120)
    assert says in str(refused.value) and "line" in str(refused.value)
    assert watched.requests == []


def test_a_local_base_image_with_onbuild_triggers_is_refused(
    engine: Any, settings: Settings, workspace: Path, cc_image: str, watched: Watched,
    throwaway_images: dict[str, str],
) -> None:  # fmt: skip
    # The test's own base image (built by the test, from a Dockerfile that fetches
    # nothing itself): it only records the trigger.
    tag = f"warden-test-onbuild:{uuid.uuid4().hex[:12]}"
    base = f"FROM {cc_image}\nONBUILD ADD {watched.url} /fetched\n".encode()
    engine.images.build(fileobj=io.BytesIO(base), tag=tag, labels=throwaway_images, rm=True)
    with pytest.raises(ConfigError) as refused:
        build(engine, settings, workspace, f"FROM {tag}\nRUN true\n", deadline_s=120)
    assert "ONBUILD triggers" in str(refused.value), refused.value
    assert watched.requests == []


def test_local_adds_copies_and_stages_still_build(
    engine: Any, settings: Settings, workspace: Path, cc_image: str,
    throwaway_images: dict[str, str],
) -> None:  # fmt: skip
    """What a dev container needs offline keeps working: `ARG` in `FROM`, a local
    `ADD` (copied, as `COPY`), stages and `COPY --from`."""
    text = (
        f"ARG BASE={cc_image}\nFROM ${{BASE}} AS first\nUSER 0\n"
        "ADD --chown=0:0 ./hello.txt /opt/hello.txt\nRUN cat /opt/hello.txt > /opt/seen\n"
        f"FROM {cc_image}\nCOPY --from=first /opt/seen /opt/seen\n"
        f"LABEL {next(iter(throwaway_images))}={next(iter(throwaway_images.values()))}\n"
    )
    (workspace / ".devcontainer").mkdir()
    (workspace / ".devcontainer/hello.txt").write_text("hello from the context\n")
    tag = build_in(engine, settings, workspace, text)
    output = engine.containers.run(
        tag, ["/opt/seen"], entrypoint=["cat"], remove=True, network_disabled=True
    )
    assert output == b"hello from the context\n"


def build_in(engine: Any, settings: Settings, workspace: Path, text: str) -> str:
    """`build` for a workspace whose .devcontainer directory already exists."""
    import json

    from orchestrator.runtime.run_images import prepare_run_images
    from tests.integration.project_fixtures import project_workspace

    folder = workspace / ".devcontainer"
    (folder / "devcontainer.json").write_text(json.dumps({"build": {"dockerfile": "Dockerfile"}}))
    (folder / "Dockerfile").write_text(text)
    project_workspace(workspace)
    resolver = prepare_run_images(engine, settings, workspace)
    assert resolver.run.devcontainer is not None
    return resolver.run.devcontainer
