"""One module per `warden` subcommand, imported only when that subcommand runs.

May import: everything (only `cli` imports `commands`).
"""
