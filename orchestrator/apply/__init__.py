"""Reviewed apply: a subagent with `isolation: worktree` writes to its own working
copy, and what it changed reaches the shared workspace only as a change set that
policy and a person have seen.

`changeset` is the vocabulary (a `FileChange`, a `ChangeSet` and its hash, the
`ContentStore` the reviewed bytes live in, an `ApplyDecision`, the `ApplyReview`
question the approvers are asked); the other modules of the package make working
copies, compute change sets on the host without following what a sandbox could
swap, decide them with the run's policy and merge them into the workspace.
`render` (how a change set reads to a person) belongs to the channels' side.

May import: `config`, `owner`, `behavior`, `event_sink`, `labels`, `permissions`, `workspace`, `store`, `untrusted_text`, `backend`.
"""
