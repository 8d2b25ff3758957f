"""A run's trace as a collector receives it: a local OTLP/HTTP receiver decodes the
protobuf warden's exporter sends and finds OpenTelemetry's generative-AI span names
and attributes, the task tree's parent links, the CI job's `TRACEPARENT` continued
and `OTEL_SERVICE_NAME` honoured; a collector that does not answer costs the run one
warning line and nothing else."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from orchestrator.config import Settings
from tests.conftest import run_warden
from tests.integration.harness import PARENT_MATCH, task, text, tool

pytestmark = pytest.mark.integration

CI_TRACE, CI_SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"


class Receiver(ThreadingHTTPServer):
    requests: list[ExportTraceServiceRequest]


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.server.requests.append(request)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver(("127.0.0.1", 0), _Handler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "script.yaml"
    conversations = [
        {"name": "parent", "match": PARENT_MATCH,
         "turns": [{"content": [task("WORKER", "bash")]}, {"content": [text("done")]}]},
        {"name": "worker", "match": {"prompt_contains": "WORKER"},
         "turns": [{"content": [tool("Bash", command="echo hi")]}, {"content": [text("ok")]}]},
    ]  # fmt: skip
    path.write_text(yaml.safe_dump({"conversations": conversations}))
    return path


def _attrs(span: object) -> dict[str, object]:
    out: dict[str, object] = {}
    for kv in span.attributes:  # type: ignore[attr-defined]
        value = kv.value
        kind = value.WhichOneof("value")
        out[kv.key] = (
            [v.string_value for v in value.array_value.values]
            if kind == "array_value"
            else getattr(value, kind)
        )
    return out


def test_a_collector_receives_the_runs_genai_trace_inside_the_ci_jobs_trace(
    settings: Settings, workspace: Path, tmp_path: Path, receiver: Receiver
) -> None:
    proc = run_warden(
        settings, "run", "go", "--replay", str(_script(tmp_path)), "--workspace", str(workspace),
        "--permission-mode", "bypassPermissions", "--json",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{receiver.server_address[1]}",
        TRACEPARENT=f"00-{CI_TRACE}-{CI_SPAN}-01", OTEL_SERVICE_NAME="nightly-agents",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    spans, services = [], set()
    for request in receiver.requests:
        for rs in request.resource_spans:
            services |= {kv.value.string_value for kv in rs.resource.attributes if kv.key == "service.name"}
            for ss in rs.scope_spans:
                spans.extend(ss.spans)
    assert services == {"nightly-agents"}
    by_name = {s.name: s for s in spans}
    assert {s.trace_id.hex() for s in spans} == {CI_TRACE}
    run = by_name["invoke_agent parent"]
    assert run.parent_span_id.hex() == CI_SPAN
    call = by_name["execute_tool Task"]
    worker = by_name["invoke_agent bash"]
    bash = by_name["execute_tool Bash"]
    assert call.parent_span_id == run.span_id and worker.parent_span_id == call.span_id
    assert bash.parent_span_id == worker.span_id
    assert by_name["container start"].parent_span_id == worker.span_id
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert {s.parent_span_id for s in chats} == {run.span_id, worker.span_id}
    for chat in chats:
        attrs = _attrs(chat)
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.provider.name"] == "anthropic"
        assert isinstance(attrs["gen_ai.usage.input_tokens"], int)
        assert attrs["gen_ai.response.finish_reasons"] in (["end_turn"], ["tool_use"])
        assert attrs["gen_ai.request.model"] and attrs["gen_ai.response.id"]
    assert _attrs(worker)["gen_ai.agent.name"] == "bash"
    assert _attrs(bash)["gen_ai.tool.name"] == "Bash"
    assert result["status"] == "completed"


def test_a_collector_that_does_not_answer_costs_one_warning(
    settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    with socket.socket() as s:  # a port on loopback that nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = run_warden(
        settings, "run", "go", "--replay", str(_script(tmp_path)), "--workspace", str(workspace),
        "--permission-mode", "bypassPermissions",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "done"
    warnings = [line for line in proc.stderr.splitlines() if "traces could not be sent" in line]
    assert len(warnings) == 1
    assert "Traceback" not in proc.stderr and "opentelemetry" not in proc.stderr.lower()
