"""`warden mcp`: warden's sandboxes behind any MCP client (Claude Code, an IDE, a
program), on the official `mcp` SDK, over stdio or streamable HTTP on 127.0.0.1.

- `tools`: the `Task`, `TaskOutput` and `TaskStop` tools (the parent tool's inputs
  and results) and the agent-type listing, answered from a `api.WardenRun`;
- `elicit`: questions ("ask") as MCP elicitation, falling back to the run's
  other approver when the client cannot answer;
- `runs`: one warden run per MCP session, ended (tasks stopped, containers gone,
  results written) when the session ends;
- `server`: the low-level SDK server, the stdio and HTTP transports, the HTTP
  secret and Host/Origin checks;
- `front` and `listing`: the stdio wire, which answers `initialize` and lists the
  tools (`listing`: their schemas, from pydantic alone) before the SDK and the run
  are loaded, then hands the stream to the SDK server; a client that goes away ends
  the session quietly;
- `keeper`: over stdio, the spawned process forks the one that holds the session, so
  a client that kills it as it closes (Claude Code) does not cut the session's end.

May import: `api`, `config`, `errors`, `jsontypes`, `permissions`, `results`,
`runtime.parent_tools`, `runtime.tasks`, `ui.question_text`, `untrusted_text`,
`apply.changeset` and `apply.render` (an apply review as elicitation).
"""
