"""The Dockerfile the engine is given for a dev container build: written by warden
from the workspace's, so that nothing the engine does for the build can reach a
network, whatever the workspace's Dockerfile spells.

The engine's classic builder reaches the host's network in exactly two places:
`ADD <url>` (the daemon downloads it, on the host's network, whatever the
build's `--network`) and an image it does not have (`FROM`, `COPY --from`: it
pulls). Build steps themselves run in the holder's network namespace
(`images.buildbox`). So the Dockerfile warden hands the engine has:

- **no `ADD`**: each is written as `COPY` with the same flags and arguments.
  `COPY` never downloads (a source that expands to a URL, through `ARG`, `ENV`
  or anything else, is an error of the engine's) and never unpacks an archive
  (the daemon would unpack it outside any step's limits); unpack with `RUN tar`.
- **no image name**: every `FROM` and `COPY --from` names a stage of the same
  Dockerfile or the local image's id (64 hex digits, which the engine never reads
  as a name to pull), resolved and inspected here;
  an image that is not present is refused (warden never pulls), and so is one
  that carries `ONBUILD` triggers (the engine would run them in this build).
- **no `ONBUILD`**, **no here-documents**: refused (the classic builder does not
  know here-documents, so their lines would be read as instructions).
- one instruction per line, as Docker's own parser (the `dockerfile` package
  wraps BuildKit's) joined it, and the file's `escape` directive; the result is
  parsed again and checked to hold the properties above before it is used.

The classic builder is asked for explicitly (`version=1`): it ignores `# syntax`
lines, so no frontend image is ever fetched.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.errors import ConfigError
from orchestrator.images.base_image import image_id
from orchestrator.untrusted_text import printable

if TYPE_CHECKING:
    from docker import DockerClient

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://|^git@")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_DIRECTIVE = re.compile(r"^#\s*([A-Za-z][A-Za-z0-9]*)\s*=\s*(.+?)\s*$")
_IMAGE_ID = re.compile(r"^[0-9a-f]{64}$")
_KEYWORD = re.compile(r"^(\s*)([A-Za-z]+)")
_FROM_FLAG = re.compile(r"--from=(\S+)")
ADD_NOTE = (
    "{line}: `ADD` is built as `COPY` (dev container builds never download and never "
    "unpack archives outside a step): a local archive is copied as it is; unpack it "
    "with `RUN tar`"
)


@dataclass(frozen=True)
class EngineDockerfile:
    """What the engine builds, and what warden changed on the way (one line each)."""

    text: str
    notes: tuple[str, ...] = ()


def engine_dockerfile(
    client: DockerClient, text: str, args: dict[str, str], where: str
) -> EngineDockerfile:
    """The Dockerfile to give the engine for the workspace's `text` (see the module
    doc), built with `args`. ConfigError naming the line and the fix for what warden
    refuses to build."""
    commands = _parse(text, where)
    escape = _escape(text)
    variables: dict[str, str] = {}
    stages: set[str] = set()
    lines: list[str] = [f"# escape={escape}"] if escape != "\\" else []
    notes: list[str] = []
    seen_from = False
    count = 0
    for command in commands:
        line = f"{where}: Dockerfile line {command.start_line}"
        name = command.cmd.upper()
        _refuse_shapes(command, name, line)
        original: str = command.original
        if name == "ARG" and not seen_from:
            for item in command.value:
                key, _, default = item.partition("=")
                variables[key] = args.get(key, default)
        elif name == "FROM":
            seen_from = True
            original = _from_line(client, command, variables, stages, line)
            stages.add(str(count))  # `COPY --from=0` names the first stage
            count += 1
        elif name in ("ADD", "COPY"):
            original = _copy_line(client, command, name, stages, line)
            if name == "ADD":
                notes.append(ADD_NOTE.format(line=line))
        lines.append(original)
    result = "\n".join(lines) + "\n"
    _verify(result, stages, where)
    return EngineDockerfile(result, tuple(notes))


def _parse(text: str, where: str) -> Any:
    import dockerfile  # type: ignore[import-not-found]  # a compiled module without stubs

    try:
        return dockerfile.parse_string(text)
    except dockerfile.GoParseError as exc:
        raise ConfigError(f"{where}: its Dockerfile does not parse: {exc}") from exc


def _escape(text: str) -> str:
    """The `escape` parser directive (`\\` unless the file's leading directives say `` ` ``)."""
    for raw in text.splitlines():
        found = _DIRECTIVE.match(raw)
        if found is None:
            break
        if found.group(1).lower() == "escape" and found.group(2) == "`":
            return "`"
    return "\\"


def _refuse_shapes(command: Any, name: str, line: str) -> None:
    if name == "ONBUILD":
        raise ConfigError(
            f"{line}: `ONBUILD` is not built in dev containers (its triggers would run in "
            "a later build, where no check sees them); remove it"
        )
    if command.heredocs or "\n" in command.original:
        raise ConfigError(
            f"{line}: here-documents (`<<EOF`) are not built in dev containers (the "
            "engine's offline builder does not know them); write the file into the build "
            "context and COPY it, or use RUN printf"
        )
    if name == "ADD" and any(
        flag.startswith(("--checksum", "--keep-git-dir")) for flag in command.flags
    ):
        raise ConfigError(
            f"{line}: `ADD --checksum` / `--keep-git-dir` are for downloads, and dev "
            "container builds are offline; put the file in the build context and COPY it"
        )
    if name == "ADD" and any(_URL.match(source) for source in command.value[:-1]):
        raise ConfigError(
            f"{line}: `ADD` of a URL or git repository makes the engine download it on "
            "the host's network, and dev container builds are offline; put the file in "
            "the build context and COPY it"
        )


def _from_line(
    client: DockerClient, command: Any, variables: dict[str, str], stages: set[str], line: str
) -> str:
    ref = _substitute(command.value[0], variables, line)
    target = _local(client, ref, stages, line, "FROM")
    stage = ""
    if len(command.value) >= 3 and command.value[1].upper() == "AS":
        stage = command.value[2]
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]*", stage):
            raise ConfigError(f"{line}: stage name {printable(stage, 60)!r} is not valid")
    if stage:
        stages.add(stage.lower())
        return f"FROM {target} AS {stage}"
    return f"FROM {target}"


def _copy_line(client: DockerClient, command: Any, name: str, stages: set[str], line: str) -> str:
    original: str = command.original
    for flag in command.flags:
        if flag.startswith("--from="):
            ref = flag[len("--from=") :]
            target = _local(client, ref, stages, line, f"{name} --from")
            original = _FROM_FLAG.sub(f"--from={target}".replace("\\", "\\\\"), original, 1)
    if name == "ADD":
        found = _KEYWORD.match(original)
        assert found is not None and found.group(2).upper() == "ADD"
        original = f"{found.group(1)}COPY{original[found.end() :]}"
    return original


def _substitute(value: str, variables: dict[str, str], line: str) -> str:
    def one(match: re.Match[str]) -> str:
        key = match.group(1) or match.group(3)
        if variables.get(key):
            return variables[key]
        if match.group(2) is not None:
            return match.group(2)
        raise ConfigError(f"{line}: `FROM` uses ${key}, which has no value; give it a default")

    return _VARIABLE.sub(one, value)


def _local(client: DockerClient, ref: str, stages: set[str], line: str, what: str) -> str:
    """`ref` as the engine is to see it: a stage's name, `scratch`, or the id of a
    local image without ONBUILD triggers."""
    if ref.lower() in stages or ref == "scratch":
        return ref.lower() if ref.lower() in stages else ref
    found = image_id(client, ref) if "$" not in ref else None
    if found is None:
        raise ConfigError(
            f"{line}: `{what} {printable(ref, 100)}` is not an image present locally, and "
            "dev container builds never pull (no network, no registry); build or load it "
            "first (`docker load`), or use a local image"
        )
    triggers = _onbuild(client, found)
    if triggers:
        raise ConfigError(
            f"{line}: the image {printable(ref, 100)} carries ONBUILD triggers "
            f"({printable('; '.join(triggers), 200)}), which the engine would run in this "
            "build unchecked; base the dev container on an image without them"
        )
    # The bare hex id: the engine finds a local image by it, and cannot mistake it
    # for a name to pull (it refuses 64-hex names) should the image go meanwhile.
    return found.removeprefix("sha256:")


def _onbuild(client: DockerClient, found: str) -> list[str]:
    attrs: dict[str, Any] = getattr(client.images.get(found), "attrs", None) or {}
    config = attrs.get("Config") or {}
    return [str(trigger) for trigger in config.get("OnBuild") or []]


def _verify(text: str, stages: set[str], where: str) -> None:
    """What the engine will parse holds the module's promises (else a bug of warden's,
    reported as a refusal rather than built)."""
    problems: list[str] = []
    for raw in text.splitlines():
        if raw.rstrip(" \t").endswith(("\\", "`")) and not raw.startswith("# escape="):
            problems.append(f"a line continues onto the next: {printable(raw, 80)!r}")

    def known(ref: str) -> bool:
        return ref in stages or ref == "scratch" or bool(_IMAGE_ID.match(ref))

    for command in _parse(text, where):
        name = command.cmd.upper()
        if name in ("ADD", "ONBUILD") or command.heredocs:
            problems.append(f"line {command.start_line} is {name}")
        if name == "FROM" and not known(command.value[0]):
            problems.append(f"line {command.start_line} names {command.value[0]!r}")
        for flag in command.flags:
            if flag.startswith("--from=") and not known(flag[len("--from=") :]):
                problems.append(f"line {command.start_line} copies from {flag!r}")
    if problems:
        raise ConfigError(
            f"{where}: warden could not write a Dockerfile for the engine that fetches "
            f"nothing ({json.dumps(problems)[:300]}); simplify the Dockerfile (one "
            "instruction per line), or build the image yourself and name it in `image`"
        )
