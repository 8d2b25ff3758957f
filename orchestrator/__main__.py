"""`python -m orchestrator`: the `warden` command.

May import: `launch`.
"""

from orchestrator.launch import main

main()
