"""The in-container side of warden: the subagent runner and its tools.

This package runs inside the sandbox. It depends on the wire contract
(`sandbox_tools.wire`) and the anthropic SDK, never on `orchestrator`.
"""
