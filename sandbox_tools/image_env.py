"""A project image's environment, kept away from warden's own process and given
back to the commands it runs.

The engine merges an image's `ENV` into every container's environment and offers
no way to drop a key, so the host sets each of the image's keys to an empty value
for warden's process (`orchestrator.images.choice`) and passes the real values in
`wire.IMAGE_ENV_VARIABLE`. The loader, the interpreter and the C library of warden's
runtime then start with nothing of the image's (`LD_PRELOAD=` preloads nothing);
`restore` runs after the seal is installed and puts the image's values back into
`os.environ`, where the Bash tool's commands inherit them: the project's toolchain
keeps its `PATH`, `LD_LIBRARY_PATH` and the rest. A key warden set itself (`HOME`)
is not empty and stays warden's. Standard library only.
"""

from __future__ import annotations

import json
import os

from sandbox_tools.wire import IMAGE_ENV_VARIABLE


def restore(environ: os._Environ[str] | dict[str, str] = os.environ) -> None:
    """Give the image's values back to the keys the host emptied; drop the carrier."""
    carried = environ.pop(IMAGE_ENV_VARIABLE, None)
    if not carried:
        return
    try:
        image = json.loads(carried)
    except ValueError:
        return
    if not isinstance(image, dict):
        return
    for key, value in image.items():
        if isinstance(key, str) and isinstance(value, str) and environ.get(key) == "":
            environ[key] = value
