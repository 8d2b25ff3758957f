"""The one place that decides whether a path is inside the workspace.

Every tool resolves its path arguments through `confine`, so the rule is the
same everywhere: resolve symlinks first, then check containment. A path that
escapes (by `..`, an absolute path elsewhere, a symlink, or a symlinked parent
directory) raises `PathOutsideWorkspaceError` with the same wording.
"""

from __future__ import annotations

import os
from pathlib import Path

from sandbox_tools.errors import PathOutsideWorkspaceError, ToolError


def confine(path: str, root: Path) -> Path:
    """Resolve `path` (absolute, or relative to `root`) and return it if inside `root`.

    `root` must already be resolved. The returned path has no symlinks in its
    existing components; components that do not exist yet are kept as given.

    Raises:
        PathOutsideWorkspaceError: the resolved path is not `root` or below it.
        ToolError: the path is empty or contains a NUL byte.
    """
    if not path:
        raise ToolError("the path is empty; give a file path inside the workspace")
    if "\0" in path:
        raise ToolError("the path contains a NUL byte")
    candidate = Path(os.path.expanduser(path))
    if not candidate.is_absolute():
        candidate = root / candidate
    try:
        resolved = candidate.resolve(strict=False)
    except (OSError, RuntimeError) as e:  # RuntimeError: symlink loop on 3.11
        raise ToolError(f"cannot resolve path {path!r}: {e}") from e
    if resolved != root and root not in resolved.parents:
        raise PathOutsideWorkspaceError(
            f"path {path!r} is outside the workspace {root}; "
            "only files under the workspace can be used"
        )
    return resolved
