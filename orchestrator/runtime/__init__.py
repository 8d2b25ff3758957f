"""The run itself: the parent's loop, the `Task` tool, task models and the manager
that starts each subagent's sandbox, the broker adapter that answers it, the warm
pool, the permission gate, admission, sessions and their events.

May import: `config`, `errors`, `labels`, `agents`, `backend`, `broker`,
`permissions`, `store`, `results`, `tracing`, `workspace`, `lifecycle`, `ui`,
`sandbox_tools.wire`. Nothing outside `commands`/`cli` imports `runtime` except
`results` (for the task models).
"""
