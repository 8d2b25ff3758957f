#!/usr/bin/env bash
# warden's set-up for a user, from a checkout: the package in a virtual environment
# (.venv), a running Docker engine, and warden's sandbox images. Then `.venv/bin/warden
# demo` runs the offline demo. Idempotent: each step does nothing when its work is
# already done (a second run takes seconds).
#
# What it does not install: the test suite's tools (jq, Node.js and the pinned Claude
# Code CLI, Chromium, toolchain images). `.ci/setup` runs this script, then adds those.
#
# WARDEN_INSTALL_EDITABLE=1 (set by .ci/setup) installs the checkout editable, with the
# test dependencies; otherwise warden is installed as a plain package, as from its wheel.
set -euo pipefail
cd "$(dirname "$0")"

# warden goes into a virtual environment in the checkout, never into the system Python:
# Debian 12's python3 has no pip and refuses system-wide installs (PEP 668).
VENV="${WARDEN_VENV:-$PWD/.venv}"
if [ ! -x "$VENV/bin/python3" ] || ! "$VENV/bin/python3" -m pip --version >/dev/null 2>&1; then
  rm -rf "$VENV"
  if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
    rm -rf "$VENV"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "setup: installing python3-venv (Debian's python3 has no venv/ensurepip without it)" >&2
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
      python3 -m venv "$VENV"
    else
      echo "setup: cannot create a virtual environment with '$(command -v python3)'." >&2
      echo "setup: install your distribution's venv package (Debian/Ubuntu: python3-venv, as root) and run again." >&2
      exit 1
    fi
  fi
fi
export PATH="$VENV/bin:$PATH"

# Reinstall only when the package's declaration or the kind of install changed, or (a
# plain install copies the code) when a file it ships is newer than the last install.
if [ "${WARDEN_INSTALL_EDITABLE:-0}" = 1 ]; then
  what=(-e '.[test]'); kind="editable, with its test dependencies"
else
  what=(.); kind="as a package"
fi
stamp="$VENV/.warden-installed"
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $PWD $kind"
changed=""
if [ "${WARDEN_INSTALL_EDITABLE:-0}" != 1 ] && [ -f "$stamp" ]; then
  changed=$(find orchestrator sandbox_tools images policies Dockerfile.agent -newer "$stamp" \
    -type f -not -path '*/__pycache__/*' -print -quit 2>/dev/null || true)
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || [ -n "$changed" ] || ! command -v warden >/dev/null; then
  echo "setup: installing warden ($kind) into $VENV" >&2
  python3 -m pip install --quiet --disable-pip-version-check "${what[@]}"
  printf '%s\n' "$want" > "$stamp"
fi

# The engine: as root on Debian, installs docker.io (and debootstrap) if missing and
# starts dockerd; otherwise it says exactly what to do (the docker group, rootless Docker).
warden doctor --fix
# No registry is needed: the base is bootstrapped from Debian packages when none is
# present (drop --no-pull to try a registry first).
warden images build --no-pull
echo "setup: ready. The demo: $VENV/bin/warden demo (put $VENV/bin on PATH to type plain 'warden')" >&2
