"""What a run publishes: its events and its result document (`models`), built from
the store (`build`), and rendered as JUnit XML (`junit`) and a terminal summary
(`summary`). The JSON Schemas of `models` are what `warden schema` prints.

May import: `errors`, `exit_codes`, `backend.contract` (limits in a task's setup),
`store`, `lifecycle.recovery` (opening the store), `untrusted_text`.
"""
