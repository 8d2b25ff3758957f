"""The run page answers only its own secret, Host and Origin: a request without the
secret, with another server's secret, from a foreign site (Origin, Sec-Fetch-Site)
or under a rebound host name gets nothing; one run's server knows no other run;
every answer carries the strict Content-Security-Policy; and the page will not
listen beyond loopback without TLS."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from orchestrator.jsontypes import input_hash
from orchestrator.permissions.approvers import ApprovalQuestion
from orchestrator.store import Store, TaskRecord
from orchestrator.web.approver import LocalQuestions, WebApprover
from orchestrator.web.guard import CSP, ListenConfig, UnsafeListenError, parse_listen
from orchestrator.web.server import PageServer

RUN_A, RUN_B = "run_a_1", "run_b_2"


def _store(tmp_path: Path) -> Store:
    store = Store.open(tmp_path / "warden.db")
    for run in (RUN_A, RUN_B):
        store.create_run(run, prompt=f"prompt of {run}", workspace="/w", model="m", pid=1)
        store.create_task(
            TaskRecord(task_id=f"sa_{run}", run_id=run, agent_type="bash", prompt="p")
        )
    return store


Servers = tuple[PageServer, PageServer, WebApprover]
"""Run A's page, run B's page, and run A's web approver."""


@pytest.fixture
async def servers(tmp_path: Path) -> AsyncIterator[Servers]:
    store = _store(tmp_path)
    approver = WebApprover()
    a = PageServer(store, LocalQuestions(approver), run_id=RUN_A)
    b = PageServer(store, LocalQuestions(WebApprover()), run_id=RUN_B)
    await a.start()
    await b.start()
    try:
        yield a, b, approver
    finally:
        await a.close()
        await b.close()
        store.close()


async def _get(url: str, **headers: str) -> tuple[int, bytes, dict[str, str]]:
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as r:
        return r.status, await r.read(), dict(r.headers)


def _origin(server: PageServer) -> str:
    return server.url.split("/s/")[0]


async def test_the_secret_opens_the_page_and_nothing_else_does(servers: Servers) -> None:
    a, b, _ = servers
    status, body, headers = await _get(a.url)
    assert status == 200 and b'<script src="app.js"' in body
    assert headers["Content-Security-Policy"] == CSP
    assert "'unsafe-inline'" not in CSP and "script-src 'self'" in CSP
    assert headers["Referrer-Policy"] == "no-referrer"
    status, body, _ = await _get(a.url + "api/runs")
    assert status == 200 and [r["run_id"] for r in json.loads(body)["runs"]] == [RUN_A]

    origin = _origin(a)
    other_secret = b.url.split("/s/")[1]
    for url in (
        origin + "/",
        origin + "/api/runs",
        origin + "/s/",
        origin + "/s/wrong/api/runs",
        origin + "/s/" + other_secret,  # run B's secret on run A's server
        origin + "/s/" + a.guard.secret[:-1] + "/api/runs",
    ):
        status, body, headers = await _get(url)
        assert (status, body) == (404, b""), url
        assert headers["Content-Security-Policy"] == CSP


async def test_one_runs_server_answers_nothing_of_another_run(servers: Servers) -> None:
    a, _, _ = servers
    for path in (
        f"api/runs/{RUN_B}/tree",
        f"api/runs/{RUN_B}/audit",
        f"api/runs/{RUN_B}/stream",
        f"api/runs/{RUN_B}/tasks/sa_{RUN_B}/events",
        f"api/runs/{RUN_A}/tasks/sa_{RUN_B}/events",  # B's task through A's run
        f"api/runs/{RUN_A}/tasks/sa_{RUN_B}/transcript",
    ):
        status, body, _ = await _get(a.url + path)
        assert status == 404 and b"run_b" not in body and b"prompt of" not in body, path
    status, body, _ = await _get(a.url + f"api/runs/{RUN_A}/tree")
    assert status == 200 and json.loads(body)["tasks"][0]["task_id"] == f"sa_{RUN_A}"


async def test_a_foreign_host_or_origin_gets_nothing(servers: Servers) -> None:
    a, _, _ = servers
    port = a.url.split(":")[2].split("/")[0]
    rebound = {"Host": f"evil.example:{port}"}
    assert (await _get(a.url + "api/runs", **rebound))[:2] == (421, b"")
    assert (await _get(a.url + "api/runs", Host="127.0.0.1:1"))[:2] == (421, b"")
    foreign = await _get(a.url + "api/runs", Origin="http://evil.example")
    assert foreign[:2] == (403, b"")
    cross = await _get(a.url + "api/runs", **{"Sec-Fetch-Site": "cross-site"})
    assert cross[:2] == (403, b"")
    # The link itself may be followed from another site (the page holds no data).
    followed = await _get(a.url, **{"Sec-Fetch-Site": "cross-site"})
    assert followed[0] == 200 and b"<script" in followed[1]
    assert (await _get(a.url + "api/runs", Host=f"localhost:{port}"))[0] == 200


async def test_an_answer_needs_this_servers_origin(servers: Servers) -> None:
    a, _, approver = servers
    q = ApprovalQuestion(
        task_id=f"sa_{RUN_A}", agent_type="bash", run_id=RUN_A, tool_name="Bash",
        tool_input={"command": "true"}, input_hash=input_hash("Bash", {"command": "true"}),
        asked_by="mode: default",
    )  # fmt: skip
    asking = asyncio.create_task(approver.approve(q))
    await asyncio.sleep(0)
    (qid,) = [p.qid for p in approver.pending()]
    url = a.url + f"api/runs/{RUN_A}/questions/{qid}"
    body = json.dumps({"choice": "once", "user": "alice"})
    json_type = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession() as session:
        for headers in (
            json_type,  # no Origin at all
            {**json_type, "Origin": "http://evil.example"},
            {**json_type, "Origin": "null"},
        ):
            async with session.post(url, data=body, headers=headers) as r:
                assert (r.status, await r.read()) == (403, b""), headers
        assert not asking.done()
        async with session.post(url, data=body, headers={**json_type, "Origin": _origin(a)}) as r:
            assert r.status == 200 and (await r.json())["answered_by"] == "web:alice"
    answer = await asking
    assert (answer.behavior, answer.scope, answer.decided_by) == ("allow", "once", "web:alice")


def test_the_page_never_listens_beyond_loopback_in_plain_http(tmp_path: Path) -> None:
    with pytest.raises(UnsafeListenError, match="--ui-tls-cert"):
        ListenConfig(host="0.0.0.0").check()
    with pytest.raises(UnsafeListenError):
        PageServer(_store(tmp_path), LocalQuestions(WebApprover()), listen=ListenConfig("10.1.2.3"))
    ListenConfig(host="127.0.0.1").check()
    ListenConfig(host="::1").check()
    assert parse_listen("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert parse_listen(":0") == ("127.0.0.1", 0)
    assert parse_listen("[::1]:9") == ("::1", 9)


def test_the_flags_refuse_a_plain_http_page_beyond_loopback() -> None:
    from click.testing import CliRunner

    from orchestrator.commands.resume import resume
    from orchestrator.commands.run import run
    from orchestrator.commands.ui import ui

    for command, args in (
        (run, ["--ui", "--ui-listen", "0.0.0.0:8443", "go"]),
        (resume, ["--ui", "--ui-listen", "192.0.2.1:8443", "sa_x", "go on"]),
        (ui, ["--ui-listen", "0.0.0.0"]),
    ):
        result = CliRunner().invoke(command, args)
        assert result.exit_code == 2, result.output
        assert "--ui-tls-cert and --ui-tls-key" in result.output
