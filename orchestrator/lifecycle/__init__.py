"""What happens when an owner (`orchestrator.owner`: who owns a run or a container)
dies: recovering a crashed run's containers and records (`recovery`), removing a
dead owner's broker socket directories (`socket_dirs`) and the temporary files of
Write/Edit calls its sandboxes were killed in (`leftovers`), and turning
SIGTERM/SIGHUP/SIGINT into an orderly stop (`interrupts`).

May import: `config`, `errors`, `exit_codes`, `labels`, `owner`, `backend`, `store`. Kept
free of `runtime` so `warden cleanup` and `warden exec` stay light.
"""
