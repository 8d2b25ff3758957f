"""The run itself, one module per idea:

- what a task is: `tasks` (input, status, live context, result), `caps` (the
  limits on tasks and `TaskManagerConfig`), `protocols` (what the manager needs:
  `PermissionGate`, `EventSink`, `ImageResolver`);
- running tasks: `manager` (`TaskManager`), `admission` (slots and the queue),
  `sandbox` (each sandbox's spec, identity and limits), `pool` (warm sandboxes),
  `briefing` (what a runner is told; a resumed session's history), `worktrees`
  (`isolation: worktree`: working copies, the reviewed apply), `host` (the
  broker's view of the host), `gate` (the permission gate), `outcome` (how a task
  ended), `records` (its rows and events), `background` (results waiting for
  their parent), `model_errors`;
- the run around them: `parent` and `parent_tools` (the parent's loop and its
  tools), `events` (the run's event log), `session` (wiring one run together).

May import: `config`, `errors`, `jsontypes`, `labels`, `owner`, `behavior`, `event_sink`,
`agents`, `apply`, `backend`, `broker`, `egress`, `images`, `permissions`, `store`, `results`,
`tracing`, `workspace`, `lifecycle`, and `sandbox_tools.wire`. Only `commands` and `api`
import `runtime`.
"""
