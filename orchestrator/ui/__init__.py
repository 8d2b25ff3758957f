"""What a person sees on a terminal: the live task tree (`progress`) and the one
way container-written text is made safe to print (`untrusted_text`).

May import: `config`, `errors`, `results`, `permissions.approvers` (the
approval prompt), rich.
"""
