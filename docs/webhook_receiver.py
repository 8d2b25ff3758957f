"""A webhook receiver for warden's approval questions and apply reviews: the worked
example of docs/webhook.md. Standard library only; copy it and put your own `answer_for` in it
(post to a chat, open a ticket, page someone; answer when they do).

    WARDEN_WEBHOOK_SECRET=... python3 webhook_receiver.py --port 8099 \
        --allow 'make test' --person ci-bot

It checks every request's signature and timestamp, takes each question once (a
redelivered one, same `question_id`, is acknowledged and dropped), answers on the
question's `answer_url`, signed the same way, and prints what warden tells it.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_SKEW_S = 300  # refuse signatures this far from our clock (replays)
MAX_BODY_BYTES = 16 * 1024 * 1024  # a review of many paths is a few MiB


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verified(secret: bytes, timestamp: str | None, signature: str | None, body: bytes) -> bool:
    if not timestamp or not signature or not timestamp.isdigit():
        return False
    if abs(time.time() - int(timestamp)) > MAX_SKEW_S:
        return False
    return hmac.compare_digest(sign(secret, timestamp, body), signature)


def post_signed(url: str, doc: dict[str, object], secret: bytes) -> tuple[int, str]:
    body = json.dumps(doc).encode()
    timestamp = str(int(time.time()))
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Warden-Timestamp": timestamp,
            "Warden-Signature": sign(secret, timestamp, body),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def answer_for(question: dict[str, object], args: argparse.Namespace) -> dict[str, object] | None:
    """Your policy (or your person). Here: allow Bash commands listed with --allow,
    deny everything else with a reason; None to leave it unanswered (--silent; with
    --leave-others, whatever is not allowed is left to the other channels)."""
    if args.silent:
        return None
    tool_input = question["tool_input"]
    command = tool_input.get("command") if isinstance(tool_input, dict) else None
    if question["tool_name"] == "Bash" and command in args.allow:
        return {"behavior": "allow", "scope": "once"}
    if args.leave_others:  # a person on another channel (the terminal, the page) decides
        return None
    return {"behavior": "deny", "reason": f"{args.person} allows only: {', '.join(args.allow)}"}


def review_for(review: dict[str, object], args: argparse.Namespace) -> dict[str, object] | None:
    """Your policy for a subagent's change set (`--review`): apply it, keep it aside
    with a reason, or leave it to a person on another channel. A real one would read
    `change_set.changes` (paths, kinds, modes, each change's `notes`) and `diff`."""
    if args.silent or args.review == "leave":
        return None
    if args.review == "allow":
        return {"behavior": "allow", "scope": "once"}
    return {"behavior": "deny", "reason": f"{args.person} does not apply changes unseen"}


def answer(question: dict[str, object], args: argparse.Namespace, secret: bytes) -> None:
    review = question["type"] == "warden.apply.review"
    decision = review_for(question, args) if review else answer_for(question, args)
    if decision is None:
        return
    doc = {
        "type": "warden.approval.answer",
        "version": 1,
        "question_id": question["question_id"],
        # Binds the answer to exactly that input (for a review: the change set's sha256).
        "input_hash": question["input_hash"],
        "person": args.person,
        **decision,
    }
    status, reply = post_signed(str(question["answer_url"]), doc, secret)
    print(f"answered {question['question_id']}: {decision['behavior']} -> {status} {reply}")


def make_handler(args: argparse.Namespace, secret: bytes) -> type[BaseHTTPRequestHandler]:
    seen: set[str] = set()
    failures = {"left": args.fail_first}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                return self._reply(413)
            body = self.rfile.read(length)
            headers = self.headers
            if not verified(secret, headers["Warden-Timestamp"], headers["Warden-Signature"], body):
                print("refused a request with a bad signature")
                return self._reply(401)
            doc = json.loads(body)
            with lock:
                if failures["left"] > 0:  # pretend to be briefly down: warden retries
                    failures["left"] -= 1
                    return self._reply(503)
                if doc["type"] in ("warden.approval.question", "warden.apply.review"):
                    first = doc["question_id"] not in seen
                    seen.add(doc["question_id"])
            if doc["type"] == "warden.approval.withdrawn":
                print(f"withdrawn {doc['question_id']}: {doc['behavior']} by {doc['decided_by']}")
            elif doc["type"] == "warden.approval.question":
                print(
                    f"question {doc['question_id']} ({'new' if first else 'again'}): "
                    f"{doc['tool_name']} {json.dumps(doc['tool_input'])}"
                )
                if first:  # answer later, off this request: a person takes their time
                    threading.Thread(target=answer, args=(doc, args, secret)).start()
            elif doc["type"] == "warden.apply.review":
                change_set = doc["change_set"]
                # Paths are what a subagent wrote: print the escaped form warden made.
                paths = ", ".join(c["path_shown"] for c in change_set["changes"])
                print(f"review {doc['question_id']}: change set {change_set['sha256']}: {paths}")
                if first:
                    threading.Thread(target=answer, args=(doc, args, secret)).start()
            self._reply(202)

        def _reply(self, status: int) -> None:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:  # one line per event is printed above
            pass

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8099, help="0: any free port")
    parser.add_argument("--allow", action="append", default=[], help="a Bash command to allow")
    parser.add_argument("--person", default="webhook-bot", help="who answers, for the audit")
    parser.add_argument("--silent", action="store_true", help="take questions, never answer")
    parser.add_argument(
        "--leave-others", action="store_true", help="answer only --allow commands, never deny"
    )
    parser.add_argument(
        "--review",
        choices=["allow", "deny", "leave"],
        default="deny",
        help="what to answer an apply review (leave: to the other channels)",
    )
    parser.add_argument("--fail-first", type=int, default=0, help="answer 503 this many times")
    args = parser.parse_args()
    secret = os.environ["WARDEN_WEBHOOK_SECRET"].encode()
    server = ThreadingHTTPServer((args.host, args.port), make_handler(args, secret))
    print(f"listening on http://{args.host}:{server.server_address[1]}/", flush=True)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    server.serve_forever()


if __name__ == "__main__":
    main()
