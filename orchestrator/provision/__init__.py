"""Getting a Docker engine onto this host when there is none (`warden doctor
--fix`): host facts, the fix plan, apt-get and a detached dockerd.

May import: `errors`, `backend.connect`. Connecting to an engine that is already
there lives in `backend.connect`.
"""
