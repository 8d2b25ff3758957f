"""`warden doctor --fix` decides without side effects: an answering engine means
nothing is done; a dead engine is started only by root (installing docker.io on
Debian first), and otherwise the user is told exactly what to run. None of these
tests touches the real engine."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from orchestrator.backend.connect import EngineInfo
from orchestrator.commands import doctor as doctor_module
from orchestrator.errors import EngineUnavailableError
from orchestrator.images import ImageState
from orchestrator.provision.engine import FixPlan, HostFacts, plan_fix

UP = EngineInfo(True, "20.10.24", "1.41", ("runc",), "runc")
DOWN = EngineInfo(False, error="the Docker engine does not answer")


def facts(**overrides: Any) -> HostFacts:
    values: dict[str, Any] = {
        "engine_answers": False,
        "is_root": True,
        "is_debian": True,
        "dockerd_installed": True,
        "dockerd_running": False,
        "debootstrap_installed": True,
    }
    values.update(overrides)
    return HostFacts(**values)


def test_an_answering_engine_needs_nothing() -> None:
    assert plan_fix(facts(engine_answers=True)).nothing_to_do
    assert plan_fix(facts(engine_answers=True, is_root=False, is_debian=False)).nothing_to_do


def test_an_answering_engine_only_gets_debootstrap_when_missing() -> None:
    plan = plan_fix(facts(engine_answers=True, debootstrap_installed=False))
    assert plan == FixPlan(install=("debootstrap",))


def test_root_on_debian_without_dockerd_installs_and_starts_it() -> None:
    plan = plan_fix(facts(dockerd_installed=False, debootstrap_installed=False))
    assert plan.install == ("docker.io", "debootstrap")
    assert plan.start_dockerd
    assert plan.wait_for_engine
    assert plan.refusal is None


def test_installed_but_stopped_dockerd_is_only_started() -> None:
    plan = plan_fix(facts())
    assert plan == FixPlan(start_dockerd=True, wait_for_engine=True)


def test_a_dockerd_that_is_still_starting_is_waited_for_not_started_twice() -> None:
    assert plan_fix(facts(dockerd_running=True)) == FixPlan(wait_for_engine=True)


def test_not_root_is_refused_with_the_command_to_run() -> None:
    plan = plan_fix(facts(is_root=False))
    assert plan.refusal is not None
    assert "sudo warden doctor --fix" in plan.refusal
    assert not (plan.install or plan.start_dockerd)


def test_not_debian_without_dockerd_is_refused_with_the_install_guide() -> None:
    plan = plan_fix(facts(is_debian=False, dockerd_installed=False))
    assert plan.refusal is not None
    assert "docs.docker.com/engine/install" in plan.refusal


def test_a_remote_docker_host_is_never_replaced_by_a_local_engine() -> None:
    plan = plan_fix(facts(docker_host="tcp://10.0.0.5:2375"))
    assert plan.refusal is not None
    assert "DOCKER_HOST" in plan.refusal
    assert not plan.start_dockerd


@pytest.fixture
def no_side_effects(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("doctor tried to change the host")

    monkeypatch.setattr(doctor_module, "apply_fix", refuse)


def test_doctor_fix_with_engine_up_does_nothing_and_succeeds(
    monkeypatch: pytest.MonkeyPatch, no_side_effects: None
) -> None:
    monkeypatch.setattr(doctor_module, "host_facts", lambda: facts(engine_answers=True))
    monkeypatch.setattr(doctor_module, "engine_info", lambda: (UP, object()))
    monkeypatch.setattr(
        "orchestrator.images.image_status",
        lambda client: [ImageState("agent", "missing", None, "not built; run x")],
    )
    result = CliRunner().invoke(doctor_module.doctor, ["--fix", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["actions"] == []
    assert report["engine"]["version"] == "20.10.24"
    assert any("gVisor" in note and "not enforced" in note.lower() for note in report["notes"])


def test_doctor_shows_the_warm_pool_settings_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, no_side_effects: None
) -> None:
    monkeypatch.setattr(doctor_module, "engine_info", lambda: (DOWN, None))
    monkeypatch.setenv("WARDEN_WARM_POOL_MAX", "3")
    monkeypatch.setenv("WARDEN_WARM_POOL_MEMORY", "1g")
    report = json.loads(CliRunner().invoke(doctor_module.doctor, ["--json"]).output)
    assert report["pool"]["max_ready"] == 3 and report["pool"]["min_ready"] == 1
    assert report["pool"]["memory_budget_bytes"] == 1024**3
    assert "growing on bursts to 3" in report["pool"]["summary"]
    assert "2 sandbox(es) at 512 MiB each" in report["pool"]["summary"]
    text = CliRunner().invoke(doctor_module.doctor, []).output
    assert "pool:     warm pool: 1 ready per image" in text


def test_doctor_fix_not_root_fails_naming_the_fix(
    monkeypatch: pytest.MonkeyPatch, no_side_effects: None
) -> None:
    monkeypatch.setattr(doctor_module, "host_facts", lambda: facts(is_root=False))
    monkeypatch.setattr(doctor_module, "engine_info", lambda: (DOWN, None))
    monkeypatch.setattr(doctor_module, "apply_fix", _real_apply_fix_refusal_only)
    result = CliRunner().invoke(doctor_module.doctor, ["--fix"])
    assert result.exit_code == 1
    assert "sudo warden doctor --fix" in result.output


def test_doctor_without_fix_reports_missing_images_as_a_problem(
    monkeypatch: pytest.MonkeyPatch, no_side_effects: None
) -> None:
    monkeypatch.setattr(doctor_module, "engine_info", lambda: (UP, object()))
    monkeypatch.setattr(
        "orchestrator.images.image_status",
        lambda client: [ImageState("bash", "stale", "warden-bash:0", "sources changed; run x")],
    )
    result = CliRunner().invoke(doctor_module.doctor, [])
    assert result.exit_code == 1
    assert "image bash" in result.output


def _real_apply_fix_refusal_only(plan: FixPlan, log: Any) -> list[str]:
    from orchestrator.provision.engine import apply_fix

    assert plan.refusal is not None, "only a refusal may reach apply_fix in this test"
    return apply_fix(plan, log)


def test_apply_fix_starts_dockerd_detached_and_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in dockerd (a script): started in its own session, logging to the log
    file, and `--fix` returns once the engine answers."""
    from orchestrator.provision import engine

    marker = tmp_path / "started"
    fake = tmp_path / "dockerd"
    # Written whole, then renamed: the test never reads a marker the shell has only
    # created (on a loaded machine it did, and read "" as the pid).
    fake.write_text(
        "#!/bin/sh\necho fake dockerd running\n"
        f"echo $$ > {marker}.tmp && mv {marker}.tmp {marker}\nexec sleep 60\n"
    )
    fake.chmod(0o755)
    log_file = tmp_path / "log" / "dockerd.log"
    monkeypatch.setattr(engine, "DOCKERD", fake)
    monkeypatch.setattr(engine, "DOCKERD_LOG", log_file)

    def connect(timeout_s: float = 0) -> object:
        if not marker.exists():
            raise EngineUnavailableError("not yet")
        return object()

    monkeypatch.setattr(engine, "connect", connect)
    lines: list[str] = []
    try:
        done = engine.apply_fix(FixPlan(start_dockerd=True, wait_for_engine=True), lines.append)
    finally:
        if marker.exists():
            os.kill(int(marker.read_text()), signal.SIGKILL)  # the stand-in we started
    assert any(str(fake) in action for action in done)
    assert done[-1].startswith("engine answered after")
    assert "fake dockerd running" in log_file.read_text()
    assert str(log_file) in lines[0]


def test_apply_fix_reports_a_dockerd_that_dies_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.provision import engine

    fake = tmp_path / "dockerd"
    fake.write_text("#!/bin/sh\necho 'failed to start daemon: bad config'\nexit 1\n")
    fake.chmod(0o755)

    def never(timeout_s: float = 0) -> object:
        raise EngineUnavailableError("no")

    monkeypatch.setattr(engine, "DOCKERD", fake)
    monkeypatch.setattr(engine, "DOCKERD_LOG", tmp_path / "dockerd.log")
    monkeypatch.setattr(engine, "connect", never)
    monkeypatch.setattr(engine, "SOCKET_POLL_S", 0.05)
    plan = FixPlan(start_dockerd=True, wait_for_engine=True)
    with pytest.raises(EngineUnavailableError, match=r"exited right after.*bad config"):
        engine.apply_fix(plan, lambda line: None)


def test_apply_fix_gives_up_after_the_bounded_wait_pointing_at_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.provision import engine

    def never(timeout_s: float = 0) -> object:
        raise EngineUnavailableError("no")

    monkeypatch.setattr(engine, "connect", never)
    monkeypatch.setattr(engine, "SOCKET_WAIT_S", 0.3)
    monkeypatch.setattr(engine, "SOCKET_POLL_S", 0.05)
    monkeypatch.setattr(engine, "DOCKERD_LOG", tmp_path / "dockerd.log")
    with pytest.raises(EngineUnavailableError, match=r"did not answer within"):
        engine.apply_fix(FixPlan(wait_for_engine=True), lambda line: None)


@pytest.mark.parametrize(
    ("found", "ok", "says"),
    [(None, True, "warden's profile applied"), ("the engine ignored it", False, "NOT applied")],
)
def test_doctor_says_what_the_engine_does_with_warden_s_seccomp_profile(
    monkeypatch: pytest.MonkeyPatch, no_side_effects: None, found: str | None, ok: bool,
    says: str,
) -> None:  # fmt: skip
    probed: list[str] = []
    monkeypatch.setattr(doctor_module, "engine_info", lambda: (UP, object()))
    monkeypatch.setattr(
        "orchestrator.images.image_status",
        lambda client: [ImageState("bash", "current", "warden-bash:1", "ok")],
    )

    def probe(client: Any, image: str) -> str | None:
        probed.append(image)
        return found

    monkeypatch.setattr("orchestrator.backend.seccomp.probe", probe)
    result = CliRunner().invoke(doctor_module.doctor, ["--json"])
    report = json.loads(result.output)
    assert probed == ["warden-bash:1"]  # the probe runs in warden's current bash image
    assert says in report["seccomp"] and report["ok"] is ok
    assert ok or any("seccomp" in problem for problem in report["problems"])
