"""Where warden's shipped files that are not Python modules live: the image build
inputs (`Dockerfile.agent`, `images/`, the runner's source `sandbox_tools/`) and the
policies (`policies/`).

From a source checkout (an editable install) they are the checkout's own files. A
wheel carries copies under `orchestrator/_shipped/` with the same relative layout
(pyproject.toml's `force-include`), found through `importlib.resources`, so an image
built from an installed wheel has the same content-addressed tag as one built from the
checkout it was made from.

May import: `errors` only.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

from orchestrator.errors import ShippedFilesMissingError

SHIPPED_DIR = "_shipped"
"""The folder of the `orchestrator` package that holds the shipped files in a wheel."""
MARKERS = ("Dockerfile.agent", "images", "policies", "sandbox_tools")
"""What a root of shipped files must hold."""


def _complete(root: Path) -> bool:
    return all((root / name).exists() for name in MARKERS)


@functools.cache
def shipped_root() -> Path:
    """The directory holding `Dockerfile.agent`, `images/`, `policies/` and `sandbox_tools/`.

    Raises:
        ShippedFilesMissingError: an installation without them (a wheel built without
            the force-include, or a zip import), naming the fix.
    """
    checkout = Path(__file__).resolve().parents[1]
    if _complete(checkout):
        return checkout
    packaged = resources.files("orchestrator").joinpath(SHIPPED_DIR)
    if isinstance(packaged, Path) and _complete(packaged):
        return packaged
    raise ShippedFilesMissingError(
        f"warden's shipped files ({', '.join(MARKERS)}) are neither in the checkout "
        f"{checkout} nor in the installed package ({packaged}); reinstall warden from its "
        "wheel or a source checkout (`pip install ./warden`), not from a zip or a partial copy"
    )
