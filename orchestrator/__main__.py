"""`python -m orchestrator`: the `warden` command.

May import: `cli`.
"""

from orchestrator.cli import main

main()
