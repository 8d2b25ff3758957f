"""The local web page of a run (`warden run --ui`, `warden ui`): the live task
tree, pending questions (answered like the terminal's), each task's events and
transcript, and the audit. Served by aiohttp on warden's own event loop, on
127.0.0.1 by default, behind a per-server secret in the URL, with Host and
Origin checks and a strict Content-Security-Policy (`guard`). Every string that
came from a container is made visible with `untrusted_text` on the server and
put on the page with `textContent` only (`static/app.js`).

May import: `config`, `untrusted_text`, `ui`, `permissions.approvers`, `store`,
`results`, `apply.changeset` and `apply.render` (an apply review's diff view),
aiohttp.
"""
