"""Finding the content blocks of one type at any depth of a Messages API request.

A document or an image can sit anywhere a content block can (a message, a tool
result, a search result), so the broker's budget and the scripted model's billing
walk the whole request for them. The walk is bounded by the number of objects it
visits, so a request built to be deep or wide costs a bounded time; the forwarding
check has refused any request with more objects before this runs.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator


def sourced_blocks(
    value: object,
    block_type: str,
    max_objects: int,
    source_kinds: Collection[str] | None = None,
) -> Iterator[dict[str, object]]:
    """The `source` of every block of type `block_type` at any depth of `value` (of
    every source kind, or only those in `source_kinds`), visiting at most
    `max_objects` objects. A found block's insides are not walked further; any other
    block (another kind of source, no `source` object) is walked like the rest."""
    stack: list[object] = [value]
    while stack and max_objects > 0:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            max_objects -= 1
            source = item.get("source")
            if (
                item.get("type") == block_type
                and isinstance(source, dict)
                and (source_kinds is None or source.get("type") in source_kinds)
            ):
                yield source
                continue
            stack.extend(item.values())
