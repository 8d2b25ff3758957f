"""What a person sees on a terminal: the live task tree (`progress`) and the
approval prompt (`approval_prompt.TerminalApprover`, its text in `question_text`;
an apply review's paged diff in `review_prompt`).
Container text is made safe to print by `orchestrator.untrusted_text`, which
every package uses.

May import: `config`, `errors`, `behavior`, `untrusted_text`, `results`,
`permissions.approvers` (the questions a prompt shows), `apply.changeset` and
`apply.render` (an apply review and how its diff reads), rich.
"""
