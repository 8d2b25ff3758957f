"""One hook call's protocol: the shim that runs in a hook sandbox, the request the
host sends it, and how its reply is read (`runtime.hook_sandbox` runs the pool).

The reply is attacker-reachable text (the hook's command runs what the workspace
says): it is bounded before it is read (`reply_most`), and a missing, oversized or
malformed one is an error, never an allow."""

from __future__ import annotations

import base64
import binascii
import json

from orchestrator.permissions.hooks import SandboxedHookRun

SHIM_WAIT_S = 3600
"""How long a shim waits for its one request before it exits by itself."""
MAX_RESPONSE_OVERHEAD_BYTES = 4096
"""Room for the response's JSON around the two base64 streams."""

SHIM = r"""
import base64, json, socket, subprocess, sys, threading
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.settimeout(float(sys.argv[2]))
data = bytearray()
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
s.settimeout(None)
req = json.loads(data)
limit = req["limit"]
proc = subprocess.Popen(["sh", "-c", req["command"]], cwd=req["cwd"], stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=req["env"])
kept = {}
def drain(name, stream):
    buf, cut = bytearray(), False
    while True:
        chunk = stream.read1(65536)
        if not chunk:
            break
        room = limit - len(buf)
        cut = cut or len(chunk) > room
        buf += chunk[:max(room, 0)]
    kept[name] = (bytes(buf), cut)
readers = [threading.Thread(target=drain, args=(n, st)) for n, st in
           (("out", proc.stdout), ("err", proc.stderr))]
for t in readers:
    t.start()
try:
    proc.stdin.write(base64.b64decode(req["stdin"]))
    proc.stdin.close()
except OSError:
    pass
for t in readers:
    t.join()
code = proc.wait()
reply = {"exit": code}
for n in ("out", "err"):
    reply[n] = base64.b64encode(kept[n][0]).decode()
    reply[n + "_cut"] = kept[n][1]
s.sendall(json.dumps(reply).encode())
s.close()
"""
"""Runs inside a hook sandbox: one request in, one hook run, one reply out."""


def encode_request(command: str, cwd: str, env: dict[str, str], stdin: bytes, limit: int) -> bytes:
    """The one JSON document a waiting shim reads: run `command` in `cwd` with `env`,
    feed it `stdin`, keep at most `limit` bytes of each output stream."""
    request = {
        "command": command,
        "cwd": cwd,
        "env": env,
        "limit": limit,
        "stdin": base64.b64encode(stdin).decode(),
    }
    return json.dumps(request).encode()


def reply_most(limit: int) -> int:
    """The longest reply a shim keeping `limit` bytes per stream may send (base64 of
    both streams and the JSON around them)."""
    return 2 * (limit * 4 // 3 + 4) + MAX_RESPONSE_OVERHEAD_BYTES


def read_reply(raw: bytes, most: int, took: float) -> SandboxedHookRun:
    """The shim's reply; a missing, oversized or malformed one is an error (never an allow)."""
    if not raw:
        return SandboxedHookRun(
            error="its sandbox ended without an answer (killed, or out of memory)",
            duration_s=took,
        )
    if len(raw) > most:
        return SandboxedHookRun(error="its sandbox answered more than it may", duration_s=took)
    try:
        doc = json.loads(raw)
        code = doc["exit"]
        out = (base64.b64decode(doc["out"], validate=True), bool(doc["out_cut"]))
        err = (base64.b64decode(doc["err"], validate=True), bool(doc["err_cut"]))
    except (ValueError, KeyError, TypeError, binascii.Error):
        return SandboxedHookRun(error="its sandbox gave a malformed answer", duration_s=took)
    if not isinstance(code, int) or isinstance(code, bool):
        return SandboxedHookRun(error="its sandbox gave a malformed answer", duration_s=took)
    if code < 0:
        return SandboxedHookRun(error=f"killed by signal {-code} in its sandbox", duration_s=took)
    return SandboxedHookRun(exit_code=code, stdout=out, stderr=err, duration_s=took)
