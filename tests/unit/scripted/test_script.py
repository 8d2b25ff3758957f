"""Scripts load from YAML and JSON, refuse invalid shapes with the file and field
named, fill placeholders from the request, and `python -m orchestrator.scripted`
serves a script file on loopback."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import anthropic
import pytest

from orchestrator.scripted import Script, ScriptError
from orchestrator.scripted.script import MAX_PLACEHOLDER_CHARS, RequestView
from tests.conftest import warden_env

DEMO_YAML = """\
conversations:
  - name: parent
    match: {has_tool: Task}
    turns:
      - content:
          - {type: text, text: "I will delegate."}
          - type: tool_use
            name: Task
            input:
              description: Summarise
              prompt: "Summarise README.md"
              subagent_type: general-purpose
      - content:
          - {type: text, text: "The subagent said: {last_tool_result}"}
  - name: summariser
    match: {prompt_contains: README}
    turns:
      - delay_s: 0.01
        content: [{type: tool_use, name: Read, input: {file_path: /workspace/README.md}}]
      - content: [{type: text, text: "README has {turn} turns behind it"}]
        usage: {input_tokens: 7, output_tokens: 3}
"""


def test_yaml_and_json_scripts_load_the_same(tmp_path: Path) -> None:
    yaml_path = tmp_path / "demo.yaml"
    yaml_path.write_text(DEMO_YAML)
    script = Script.load(yaml_path)
    json_path = tmp_path / "demo.json"
    json_path.write_text(json.dumps(script.model_dump()))
    assert Script.load(json_path) == script
    assert script.conversations[0].turns[0].effective_stop_reason == "tool_use"
    assert script.conversations[0].turns[1].effective_stop_reason == "end_turn"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("conversations: []", "conversations"),
        ("conversations: [{name: a, turns: [{}]}]", "needs `content` blocks or an `error`"),
        ("conversations: [{name: a, turns: [{content: [{type: image}]}]}]", "type"),
        ("conversations: [{name: a, turns: [{content: []}], colour: red}]", "colour"),
        (
            "conversations: [{name: a, turns: [{error: {status: 529, times: 1}}]}]",
            "needs `content` for after",
        ),
        (
            "conversations: [{name: a, turns: [{error: {status: 400}}]},"
            " {name: a, turns: [{error: {status: 400}}]}]",
            "repeated: ['a']",
        ),
        ("conversations: [unclosed", "not valid"),
    ],
)
def test_invalid_scripts_name_file_and_field(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScriptError) as caught:
        Script.load(path)
    assert str(path) in str(caught.value)
    assert expected in str(caught.value)


def test_missing_script_file_is_a_script_error(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match="cannot read script"):
        Script.load(tmp_path / "absent.yaml")


def test_placeholders_read_the_request_and_announce_truncation() -> None:
    long_result = "r" * (MAX_PLACEHOLDER_CHARS + 10)
    view = RequestView(
        {
            "system": [{"type": "text", "text": "You are helpful."}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "first prompt"}]},
                {"role": "assistant", "content": "calling"},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "a", "content": "one"},
                        {
                            "type": "tool_result",
                            "tool_use_id": "b",
                            "content": [{"type": "text", "text": long_result}],
                        },
                    ],
                },
            ],
        }
    )
    assert view.system == "You are helpful."
    assert view.fill("{prompt} @ {turn}") == "first prompt @ 1"
    assert view.fill("{tool_results}").startswith("one\n\nrrr")
    filled = view.fill("{last_tool_result}")
    assert filled.endswith("[... 10 more characters truncated]")
    assert view.fill_value({"a": ["{turn}", 3]}) == {"a": ["1", 3]}
    assert RequestView({"messages": []}).fill("{last_tool_result}") == "(no tool result)"


def test_standalone_server_serves_a_script_file(tmp_path: Path) -> None:
    path = tmp_path / "demo.yaml"
    path.write_text(DEMO_YAML)
    record = tmp_path / "rec.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.scripted", str(path), "--record", str(record)],
        stdout=subprocess.PIPE,
        text=True,
        env=warden_env(),
    )
    try:
        assert proc.stdout is not None
        first_line = proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:\d+", first_line)
        assert found, first_line
        with anthropic.Anthropic(base_url=found.group(0), api_key="x", max_retries=0) as client:
            reply = client.messages.create(
                model="m",
                max_tokens=10,
                messages=[
                    {"role": "user", "content": "Summarise README.md"},
                    {"role": "assistant", "content": "reading"},
                    {"role": "user", "content": "go on"},
                ],
            )
        assert reply.content[0].type == "text"
        assert reply.content[0].text == "README has 1 turns behind it"
        assert (reply.usage.input_tokens, reply.usage.output_tokens) == (7, 3)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
    assert proc.returncode == 0
    assert json.loads(record.read_text())["conversation"] == "summariser"
