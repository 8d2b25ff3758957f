"""Admission past max_concurrent_total: tasks queue first come first served in a
bounded queue (a full queue refuses, saying which caps), report how long they
waited, leave the queue when stopped, and a nested task runs on its waiting
parent's slot so parents waiting for children cannot deadlock the queue."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.runtime.admission import AdmissionQueue, QueueFullError


async def test_fifo_order_and_waited_time() -> None:
    queue = AdmissionQueue(slots=2, queue_limit=5)
    first, second = queue.take(), queue.take()
    assert not first.queued and not second.queued
    third, fourth = queue.take(), queue.take()
    assert third.queued and third.position == 0 and fourth.position == 1
    order: list[str] = []

    async def run(name: str, ticket: object) -> None:
        assert await queue.wait(ticket)  # type: ignore[arg-type]
        order.append(name)

    waiting = [asyncio.create_task(run("third", third)), asyncio.create_task(run("fourth", fourth))]
    await asyncio.sleep(0.05)
    assert order == [] and queue.running == 2 and queue.waiting == 2
    queue.release(first)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert order == ["third"] and queue.running == 2
    queue.release(second)
    await asyncio.gather(*waiting)
    assert order == ["third", "fourth"]
    assert third.waited_s >= 0.05
    queue.release(third)
    queue.release(fourth)
    queue.release(fourth)  # twice is harmless
    assert queue.running == 0 and queue.waiting == 0


async def test_a_full_queue_refuses_before_the_task_exists() -> None:
    queue = AdmissionQueue(slots=1, queue_limit=1)
    queue.take()
    queue.take()
    with pytest.raises(QueueFullError, match=r"max_concurrent_total cap \(1\).*queue is full"):
        queue.take()


async def test_a_stopped_task_leaves_the_queue_without_running() -> None:
    queue = AdmissionQueue(slots=1, queue_limit=3)
    running = queue.take()
    stopped, next_one = queue.take(), queue.take()
    queue.withdraw(stopped)
    assert not await queue.wait(stopped)
    queue.release(stopped)
    queue.release(running)
    assert await queue.wait(next_one) and queue.running == 1


async def test_a_cancelled_waiter_gives_its_place_up() -> None:
    queue = AdmissionQueue(slots=1, queue_limit=3)
    running = queue.take()
    cancelled = queue.take()
    waiter = asyncio.create_task(queue.wait(cancelled))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    queue.release(cancelled)
    assert queue.waiting == 0
    queue.release(running)
    assert queue.running == 0


async def test_nested_tasks_run_on_the_parents_slot_and_cannot_deadlock() -> None:
    queue = AdmissionQueue(slots=1, queue_limit=3)
    parent = queue.take()
    child = queue.take(parent)  # the parent waits for it: it borrows the slot
    assert not child.queued and await queue.wait(child)
    sibling = queue.take(parent)  # a second concurrent child queues like anyone
    assert sibling.queued
    grandchild = queue.take(child)
    assert not grandchild.queued
    queue.release(grandchild)
    queue.release(child)
    assert not parent.lent and queue.running == 1
    # The parent ends while a child still runs: the slot passes on when the child ends.
    late_child = queue.take(parent)
    queue.release(parent)
    assert queue.running == 1 and not sibling._turn.done()  # type: ignore[union-attr]
    queue.release(late_child)
    assert await queue.wait(sibling) and queue.running == 1
