"""What a person sees on a terminal: the live task tree (`progress`). Container
text is made safe to print by `orchestrator.untrusted_text`, which every
package uses.

May import: `config`, `errors`, `untrusted_text`, `results`, `permissions.approvers` (the
approval prompt), rich.
"""
