"""A session has at most one live continuation across processes: a claim held by a
live orchestrator's run is refused with a message naming the holding task, run and
pid; a dead owner's claim is taken over; the holder's own run may claim again; a
released claim frees the session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.errors import SessionBusyError
from orchestrator.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(tmp_path / "warden.db")
    for run_id, pid in (("run_live", os.getpid() + 1), ("run_other", os.getpid() + 2)):
        s.create_run(run_id, prompt="p", workspace="/w", model="m", pid=pid)
    return s


def test_a_live_holder_refuses_a_second_continuation(store: Store) -> None:
    store.claim_session("sa_s", "run_live", "sa_first", owner_dead=lambda run: False)
    with pytest.raises(SessionBusyError) as refused:
        store.claim_session("sa_s", "run_other", "sa_second", owner_dead=lambda run: False)
    text = str(refused.value)
    assert "already being continued by task sa_first of run run_live" in text
    assert f"warden pid {os.getpid() + 1}" in text and "warden stop sa_first" in text


def test_a_dead_holder_is_taken_over_and_a_release_frees_the_session(store: Store) -> None:
    store.claim_session("sa_s", "run_live", "sa_first", owner_dead=lambda run: False)
    store.claim_session("sa_s", "run_other", "sa_second", owner_dead=lambda run: True)
    store.release_session("sa_s", "sa_first")  # no longer the holder: nothing changes
    with pytest.raises(SessionBusyError, match="task sa_second of run run_other"):
        store.claim_session("sa_s", "run_live", "sa_third", owner_dead=lambda run: False)
    store.release_session("sa_s", "sa_second")
    store.claim_session("sa_s", "run_live", "sa_third", owner_dead=lambda run: False)


def test_an_ended_run_holds_nothing(store: Store) -> None:
    store.claim_session("sa_s", "run_live", "sa_first", owner_dead=lambda run: False)
    store.finish_run("run_live", "completed", "done")
    store.claim_session("sa_s", "run_other", "sa_second", owner_dead=lambda run: False)
