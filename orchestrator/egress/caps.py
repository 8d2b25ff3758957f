"""The default per-task egress caps: plain numbers, read by the egress flags when the
CLI starts (`warden exec` must not import the meter for its help text) and by
`limits`, which enforces them."""

from __future__ import annotations

DEFAULT_MAX_BYTES_UP = 256 * 1024**2
"""Most bytes one task may send through the proxy (request bodies, TLS included)."""
DEFAULT_MAX_BYTES_DOWN = 2 * 1024**3
"""Most bytes one task may receive through the proxy."""
DEFAULT_MAX_CONNECTIONS = 2000
"""Most connections one task may open through the proxy over its life."""
DEFAULT_MAX_OPEN_CONNECTIONS = 64
"""Most connections one task may hold open at once, counted from their accept (a
connection that has sent nothing yet counts)."""
