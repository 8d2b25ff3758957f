"""What an engine error says once warden has shortened it for a message."""

from __future__ import annotations

from docker.errors import APIError

from orchestrator.backend import classify

RUNC_FAILURE = (
    "failed to create shim task: OCI runtime create failed: runc create failed: unable to "
    "start container process: error during container init: error mounting "
    '"/run/warden-pins/pin-16421-y7u1mtyz" to rootfs at "/workspace/.git": mount '
    "/run/warden-pins/pin-16421-y7u1mtyz:/workspace/.git (via /proc/self/fd/6), flags: "
    "0x5001: no such file or directory: unknown\nsecond line"
)


def test_a_long_engine_message_keeps_what_failed_and_why() -> None:
    text = classify.explain(APIError("500 Server Error", explanation=RUNC_FAILURE))
    assert len(text) <= classify.EXPLANATION_CHARS
    assert text.startswith("failed to create shim task: OCI runtime create failed")
    assert text.endswith("no such file or directory: unknown")
    assert "second line" not in text


def test_a_short_message_is_shown_whole_and_an_empty_one_by_its_kind() -> None:
    assert classify.explain(APIError("x", explanation="No such image: a:b")) == "No such image: a:b"
    assert classify.explain(ValueError("")) == "ValueError"


def test_a_final_5xx_is_told_by_words_anywhere_in_a_long_message() -> None:
    """A 5xx whose message says the container is gone is not retried, even when those
    words sit in the part of a long message that `explain` leaves out."""
    long_final = "x" * 250 + " No such container: abc " + "y" * 250
    error = APIError("500 Server Error", response=_Answered(500), explanation=long_final)
    assert "No such container" not in classify.explain(error)
    assert not classify.is_transient(error)
    assert classify.is_transient(
        APIError("500 Server Error", response=_Answered(500), explanation="x" * 600)
    )


class _Answered:
    """Just enough of a `requests.Response` for `APIError.status_code`."""

    def __init__(self, status_code: int) -> None:
        self.status_code = status_code
