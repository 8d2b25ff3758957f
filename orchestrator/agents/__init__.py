"""Subagent definitions: what one is (`definition`), the built-in agents and the
registry that merges them with Claude Code agent files (`registry`), and reading
those files leniently, as Claude Code does (`files`).

May import: `config`, `errors`, `permissions` (for modes and settings files), `sandbox_tools.wire`
(tool names). Never imports `runtime` or `backend`.
"""
