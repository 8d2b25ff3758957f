"""Locks in how a project image's environment is kept from warden's process and
given back to its commands: every image key empty for warden's process, the values
carried apart, restored only into keys the host emptied."""

from __future__ import annotations

import json

from orchestrator.images.project import ProjectImage
from sandbox_tools import image_env
from sandbox_tools.wire import IMAGE_ENV_VARIABLE


def test_the_host_empties_every_image_key_but_path_and_carries_the_values() -> None:
    image = ProjectImage(
        ref="p", image_id="sha256:x", bash="/bin/bash", user="",
        env=(("PATH", "/opt/bin:/usr/bin"), ("LD_PRELOAD", "/w/hook.so"), ("GCONV_PATH", "/w"),
             ("PYTHONPATH", "/w/py")),
    )  # fmt: skip
    env = image.sandbox_env()
    assert env["LD_PRELOAD"] == env["GCONV_PATH"] == env["PYTHONPATH"] == ""
    assert "PATH" not in env  # the engine keeps the image's PATH
    assert json.loads(env[IMAGE_ENV_VARIABLE])["LD_PRELOAD"] == "/w/hook.so"


def test_restore_fills_only_the_emptied_keys_and_drops_the_carrier() -> None:
    carried = {"LD_PRELOAD": "/w/hook.so", "HOME": "/root", "TOOL": "x"}
    environ = {
        "LD_PRELOAD": "",
        "HOME": "/tmp",
        "TOOL": "",
        IMAGE_ENV_VARIABLE: json.dumps(carried),
    }
    image_env.restore(environ)
    assert environ == {"LD_PRELOAD": "/w/hook.so", "HOME": "/tmp", "TOOL": "x"}


def test_restore_without_or_with_a_broken_carrier_changes_nothing() -> None:
    environ = {"A": ""}
    image_env.restore(environ)
    environ[IMAGE_ENV_VARIABLE] = "{not json"
    image_env.restore(environ)
    assert environ == {"A": ""}
