"""The in-container side of warden: the subagent runner and its tools.

This package runs inside the sandbox. It depends on the wire contract
(`sandbox_tools.wire`), pydantic and the anthropic SDK, never on `orchestrator`.

- `python -m sandbox_tools [--socket PATH] [--workspace DIR]` (`__main__`)
- `runner.run(socket_path, workspace) -> int`: spec, loop, result; the exit code
- `runner.AgentLoop`: the tool-use loop (permission, tools, events, checkpoints)
- `broker.BrokerClient` / `broker.model_client`: the two clients on the socket
- `tools.run_tool(name, input, ToolContext) -> ToolOutput`: Bash, Read, Write,
  Edit, Glob, Grep with Claude Code's names and inputs
- `paths.confine(path, root)`: the one function that keeps paths in the workspace
"""
