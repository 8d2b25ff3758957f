"""Locks in that warden works as a plain package: the wheel built from this tree,
installed (not editable) into a fresh virtual environment, carries everything warden
reads at run time (image build inputs, the runner, policies, the demo, web assets),
so `warden doctor` finds the images this tree built under the same tags and
`warden demo` runs the offline demo from any directory."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

STEP_TIMEOUT_S = 600


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
        timeout=STEP_TIMEOUT_S, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), "."],
        REPO_ROOT, dict(os.environ),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (built,) = out.glob("warden_sandbox-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh environment with the wheel installed; its third-party packages come from
    this test's environment (a path entry, not this tree), so no index is needed."""
    env_dir = tmp_path_factory.mktemp("env")
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        env_dir, dict(os.environ),
    ).stdout.strip()  # fmt: skip
    # Every site-packages dir this test sees (the test environment's, and any it chains
    # to); none holds warden itself (an editable install's path file there is not read).
    deps = [p for p in sys.path if p.endswith("site-packages")] or [sysconfig.get_paths()["purelib"]]
    (Path(purelib) / "_test_dependencies.pth").write_text("\n".join(deps) + "\n")
    done = _run(
        [str(python), "-m", "pip", "install", "--no-deps", "--quiet", str(wheel)],
        env_dir, dict(os.environ),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return env_dir


def _clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "WARDEN_STATE_DIR": str(tmp_path / "state"), "CI": "true"}


def test_the_installed_wheel_runs_from_its_own_files(installed: Path, tmp_path: Path) -> None:
    python = installed / "bin" / "python"
    where = _run(
        [str(python), "-c", "import orchestrator.shipped as s; print(s.shipped_root())"],
        tmp_path, _clean_env(tmp_path),
    )  # fmt: skip
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(installed), where.stdout
    assert not Path(where.stdout.strip()).is_relative_to(REPO_ROOT)


def test_doctor_and_the_demo_work_from_the_installed_wheel(
    installed: Path, tmp_path: Path
) -> None:
    warden = str(installed / "bin" / "warden")
    env = _clean_env(tmp_path)
    doctor = _run([warden, "doctor", "--json"], tmp_path, env)
    assert doctor.returncode == 0, doctor.stdout[-3000:] + doctor.stderr[-3000:]
    # The images the checkout built are current for the wheel too: same inputs, same tags.
    assert '"state": "missing"' not in doctor.stdout and '"state": "stale"' not in doctor.stdout

    demo = _run([warden, "demo", "--workspace", "demo"], tmp_path, env)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert ": completed" in demo.stdout + demo.stderr
    assert (tmp_path / "demo" / "SUMMARY.md").is_file()
    assert (tmp_path / "demo" / "inventory.py").is_file()  # the denied rm -rf removed nothing
    # The shipped policies come with the wheel.
    policy = _run([warden, "policy", "explain", "--policy", "default", "Bash", "git status"],
                  tmp_path, env)  # fmt: skip
    assert policy.returncode == 0, policy.stderr
    assert "decision: ALLOW" in policy.stdout and str(installed) in policy.stdout
