#!/bin/sh
# Runs as root inside the build stage of every warden image, with no network.
# Installs the sandbox_tools package (standard library only: nothing
# third-party is installed) under /opt/warden, makes it importable for any uid,
# removes every copy of pip the base may have, and adds the unprivileged user.
# Expects the build context under /build (see the Dockerfiles).
set -eu

lib=/opt/warden/lib    # sandbox_tools from the source tree
uid=1000
gid=1000

say() { echo "setup-image: $*"; }

mkdir -p "$lib"
cp -R /build/sandbox_tools "$lib/sandbox_tools"
find "$lib" -name '__pycache__' -prune -exec rm -rf {} +
# The root file system is read-only at run time: compile now so imports are fast.
python3 -m compileall -q "$lib" >/dev/null

# A .pth file in the interpreter's own site-packages keeps the runner importable
# even under `python3 -I` or an environment that resets PYTHONPATH.
site_dir=$(python3 -c 'import site; print(site.getsitepackages()[0])')
mkdir -p "$site_dir"
printf '%s\n' "$lib" >"$site_dir/warden.pth"

# The runner must start with the standard library alone (no site-packages).
python3 -S -c "import sys; sys.path.insert(0, '$lib'); import sandbox_tools.runner" \
  || { say "sandbox_tools does not import with the standard library alone" >&2; exit 1; }

say "removing pip and ensurepip from the image"
python3 - <<'PY'
import glob
import os
import shutil
import sys

# Every directory Python imports from (the .pth above already applies).
roots = [p for p in sys.path if p and os.path.isdir(p)]
for root in roots:
    for pattern in ("pip", "pip-*.dist-info", "pip-*.egg-info", "ensurepip"):
        for path in glob.glob(os.path.join(root, pattern)):
            shutil.rmtree(path, ignore_errors=True)
PY
for dir in /usr/local/bin /usr/bin; do
  rm -f "$dir"/pip "$dir"/pip3 "$dir"/pip3.* "$dir"/easy_install*
done
if python3 -c 'import pip' 2>/dev/null || python3 -c 'import ensurepip' 2>/dev/null; then
  say "pip or ensurepip is still importable" >&2
  exit 1
fi

# The unprivileged default user. At run time containers run as the workspace
# owner's uid, which may have no passwd entry: HOME is /tmp for everyone.
if ! grep -q "^[^:]*:[^:]*:$gid:" /etc/group; then
  echo "warden:x:$gid:" >>/etc/group
fi
if ! grep -q "^[^:]*:[^:]*:$uid:" /etc/passwd; then
  echo "warden:x:$uid:$gid:warden sandbox user:/tmp:/bin/bash" >>/etc/passwd
fi
mkdir -p /workspace

# Documentation is not needed in a sandbox.
rm -rf /usr/share/doc/* /usr/share/man/* /usr/share/info/* /var/cache/apt/* /var/lib/apt/lists/*
say "done"
