"""How `warden ui` (another process) reaches a live run's questions: through a
socket only this user can open, named in the run's directory, never through a
secret on disk; the answer is settled by the run's own approver (first answer
wins there too); a run without a live page, or an id that is not a run id, has
none. And the page itself can be served over TLS, its Origin check then https."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import ssl
import stat
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from orchestrator.jsontypes import JSONObject, input_hash
from orchestrator.permissions.approvers import ApprovalQuestion
from orchestrator.store import Store
from orchestrator.web.approver import (
    AlreadyAnsweredError,
    AnswerRequest,
    LocalQuestions,
    UnknownQuestionError,
    WebApprover,
)
from orchestrator.web.guard import ListenConfig
from orchestrator.web.link import LINK_FILE, RemoteQuestions, RunLink
from orchestrator.web.server import PageServer
from tests.json_shapes import arr, obj

RUN = "run_20260101000000_abcd"


def _question() -> ApprovalQuestion:
    tool_input: JSONObject = {"command": "make test"}
    return ApprovalQuestion(
        task_id="sa_x", agent_type="bash", run_id=RUN, tool_name="Bash", tool_input=tool_input,
        input_hash=input_hash("Bash", tool_input), asked_by="mode:default",
    )  # fmt: skip


async def test_another_process_answers_through_the_runs_socket(tmp_path: Path) -> None:
    (tmp_path / "runs" / RUN).mkdir(parents=True)
    approver = WebApprover()
    link = RunLink(approver, tmp_path, RUN)
    await link.start()
    remote = RemoteQuestions(tmp_path)
    try:
        pointer = tmp_path / "runs" / RUN / LINK_FILE
        sock = Path(pointer.read_text())
        assert stat.S_IMODE(pointer.stat().st_mode) == 0o600
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
        assert await remote.state(RUN) == {"open": [], "answered": []}

        asking = asyncio.create_task(approver.approve(_question()))
        await asyncio.sleep(0.01)
        (first,) = arr((await remote.state(RUN))["open"])
        shown = obj(first)
        assert "make test" in json.dumps(shown)
        request = AnswerRequest(choice="deny", user="alice", reason="not now")
        assert await remote.answer(RUN, str(shown["id"]), request) == "web:alice"
        answer = await asking
        assert (answer.behavior, answer.reason, answer.decided_by) == (
            "deny",
            "not now",
            "web:alice",
        )
        with pytest.raises(AlreadyAnsweredError, match="web:alice"):
            await remote.answer(RUN, str(shown["id"]), AnswerRequest(choice="once", user="bob"))
        with pytest.raises(UnknownQuestionError):
            await remote.answer(RUN, "q_unknown", AnswerRequest(choice="once", user="bob"))
        # Not a run id: never turned into a path.
        assert await remote.state("../../etc") == {"open": [], "answered": []}
    finally:
        await link.close()
    assert not (tmp_path / "runs" / RUN / LINK_FILE).exists() and not sock.exists()
    assert await remote.state(RUN) == {"open": [], "answered": []}
    with pytest.raises(UnknownQuestionError, match="no live page"):
        await remote.answer(RUN, "q_x", AnswerRequest(choice="once", user="bob"))


def _certificate(tmp_path: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = tmp_path / "page.pem", tmp_path / "page.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


async def test_the_page_over_tls(tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path)
    store = Store.open(tmp_path / "warden.db")
    store.create_run(RUN, prompt="p", workspace="/w", model="m", pid=1)
    listen = ListenConfig(host="127.0.0.1", tls_cert=cert, tls_key=key)
    trust = ssl.create_default_context(cafile=str(cert))
    async with PageServer(store, LocalQuestions(WebApprover()), listen=listen) as server:
        assert server.url.startswith("https://127.0.0.1:")
        origin = server.url.split("/s/")[0]
        async with aiohttp.ClientSession() as session:
            async with session.get(server.url + "api/runs", ssl=trust) as r:
                assert r.status == 200 and (await r.json())["runs"][0]["run_id"] == RUN
            post = server.url + f"api/runs/{RUN}/questions/q_x"
            # The https origin is this server's; the http one is another origin.
            for claimed, expected in ((origin.replace("https://", "http://"), 403), (origin, 400)):
                async with session.post(
                    post, data="{}", ssl=trust,
                    headers={"Origin": claimed, "Content-Type": "application/json"},
                ) as r:  # fmt: skip
                    assert r.status == expected, claimed
            with pytest.raises(aiohttp.ClientError):
                async with session.get(server.url.replace("https", "http") + "api/runs") as r:
                    await r.read()
    store.close()
