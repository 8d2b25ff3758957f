"""Collect a self-contained Python runtime for project images (see Dockerfile).

Runs as root in the build stage, with the base image's own python3 and ldd and
no network. Usage: collect.py DEST SANDBOX_TOOLS_DIR. Writes DEST/manifest.json,
which the host reads to build the runner's command line.
"""

import compileall
import json
import os
import platform
import py_compile
import re
import shutil
import subprocess
import sys
import sysconfig

SKIPPED_STDLIB = {
    "__pycache__", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
    "pydoc_data", "site-packages", "dist-packages", "lib-dynload", "venv", "distutils",
}
"""Parts of the standard library a sandboxed runner never needs (nor installs with)."""
SKIPPED_EXTENSIONS = re.compile(
    r"^(_test|_ctypes_test|_xx|xx|_tkinter|_curses|readline|_dbm|_gdbm|nis|ossaudiodev|"
    r"audioop|_ssl|_hashlib|_sqlite3|_crypt|spwd)"
)
"""Extension modules left out: test modules, terminals, databases, TLS (the runner
talks to a Unix socket; hashlib falls back to its built-in digests)."""
LDD_LINE = re.compile(r"^\s*(\S+) => (\S+) \(")
LOADER_LINE = re.compile(r"^\s*(/\S+) \(")


def main(dest: str, sandbox_tools: str) -> None:
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    executable = os.path.realpath(sys.executable)
    stdlib = sysconfig.get_paths()["stdlib"]
    dynload = os.path.join(sysconfig.get_paths()["platstdlib"], "lib-dynload")
    lib = os.path.join(dest, "lib")
    pylib = os.path.join(lib, version)
    os.makedirs(os.path.join(dest, "bin"))
    os.makedirs(lib)
    shutil.copy2(executable, os.path.join(dest, "bin", version))

    def skip(directory: str, names: list[str]) -> list[str]:
        return [n for n in names if n in SKIPPED_STDLIB or n.startswith("config-") or n.endswith(".pyc")]

    shutil.copytree(stdlib, pylib, ignore=skip)
    os.makedirs(os.path.join(pylib, "lib-dynload"))
    objects = [executable]
    if os.path.isdir(dynload):
        for name in sorted(os.listdir(dynload)):
            if name.endswith(".so") and not SKIPPED_EXTENSIONS.match(name):
                target = os.path.join(pylib, "lib-dynload", name)
                shutil.copy2(os.path.join(dynload, name), target)
                objects.append(target)
    libraries, loader = {}, None
    for obj in objects:
        out = subprocess.run(["ldd", obj], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            found = LDD_LINE.match(line)
            if found:
                libraries[found.group(1)] = found.group(2)
                continue
            found = LOADER_LINE.match(line)
            if found:
                loader = found.group(1)
    if loader is None:
        sys.exit("collect: ldd named no dynamic loader for python3 (a static build?)")
    for name, path in libraries.items():
        shutil.copy2(os.path.realpath(path), os.path.join(lib, name))
    loader_name = os.path.basename(loader)
    shutil.copy2(os.path.realpath(loader), os.path.join(lib, loader_name))
    shutil.copytree(
        sandbox_tools,
        os.path.join(pylib, "sandbox_tools"),
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    # The mount is read-only: compile now. Unchecked hashes: valid whatever the mtimes.
    ok = compileall.compile_dir(
        pylib, quiet=1, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
    )
    if not ok:
        sys.exit("collect: compiling the runtime's standard library failed")
    for root, dirs, files in os.walk(dest):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
        for name in files:
            path = os.path.join(root, name)
            os.chmod(path, 0o755 if os.access(path, os.X_OK) else 0o644)
    manifest = {
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "executable": f"bin/{version}",
        "loader": f"lib/{loader_name}",
        "library_path": "lib",
        "machine": platform.machine(),
        "libraries": sorted(libraries),
    }
    with open(os.path.join(dest, "manifest.json"), "w") as out:
        json.dump(manifest, out, indent=1)
    # Prove it: the relocated interpreter, through its own loader, with the standard
    # library alone (-I -S), imports the runner.
    check = [
        os.path.join(dest, manifest["loader"]), "--library-path", lib,
        os.path.join(dest, manifest["executable"]), "-I", "-S", "-c",
        "import sys, sandbox_tools.runner; print(sys.prefix)",
    ]
    prefix = subprocess.run(check, capture_output=True, text=True, check=True).stdout.strip()
    if prefix != dest:
        sys.exit(f"collect: the runtime's prefix is {prefix!r}, not {dest!r}")
    print(f"collect: runtime in {dest}: {json.dumps(manifest)}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
