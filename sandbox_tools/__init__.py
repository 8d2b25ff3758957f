"""The in-container side of warden: the subagent runner and its tools.

This package runs inside the sandbox and uses only the Python standard library:
no model SDK, no HTTP client stack, no pydantic (the sandbox images carry
nothing else; see `images/README.md`). It depends on the wire contract
(`sandbox_tools.wire`, and `sandbox_tools.wire_answers` for what the host sends back),
never on `orchestrator`.

- `python -m sandbox_tools [--socket PATH] [--workspace DIR]` (`__main__`)
- `runner.run(socket_path, workspace) -> int`: spec, loop, result; the exit code
- `runner.AgentLoop`: the tool-use loop (permission, tools, events, checkpoints)
- `broker.BrokerClient`: JSON over HTTP on the broker socket (`http.client`)
- `outbox.Outbox`: events and checkpoints, sent in order in the background
- `tools.run_tool(name, input, ToolContext) -> ToolOutput`: Bash, Read, Write,
  Edit, Glob, Grep with Claude Code's names and inputs
- `paths.confine(path, root)`: the one function that keeps paths in the workspace
"""
