"""The workspace as the host sees it: container output, never trusted.

`guard` decides what sandboxes may not write and builds the read-only mounts;
`report` lists what a run changed under paths the host or developer tools
execute, and `held_changes` puts back what it changed under those that ask;
`settings` reads warden's own keys (`warden.protect`, `warden.apply`); `beneath` opens what those
walks read without following a link a sandbox swapped in; `agent_memory` makes and
mounts an agent's writable memory directory and reads its index back the same way.

May import: `config`, `errors`, `setting_fields` (sizes), `backend` (mount models, the no-link walk), `images`
(the dev container as read once: trust covers its config and build context),
`permissions` (path patterns, settings documents), `store.records` (text limits), `untrusted_text`.
"""

from orchestrator.workspace.guard import ALWAYS_PROTECTED, ProtectedPathError, WorkspaceGuard

__all__ = ["ALWAYS_PROTECTED", "ProtectedPathError", "WorkspaceGuard"]
