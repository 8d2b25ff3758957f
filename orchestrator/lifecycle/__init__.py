"""Who owns what, and what happens when an owner dies: owner labels and pid
liveness (`owner`), recovering a crashed run's containers and records
(`recovery`), removing a dead owner's broker socket directories
(`socket_dirs`), and turning SIGTERM/SIGHUP/SIGINT into an orderly stop
(`interrupts`).

May import: `config`, `errors`, `exit_codes`, `labels`, `backend`, `store`. Kept free of
`runtime` so `warden cleanup` and `warden exec` stay light.
"""
