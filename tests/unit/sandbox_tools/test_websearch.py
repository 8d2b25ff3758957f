"""WebSearch's request and answer: the request carries the API's web search server
tool (with the model's allowed domains, never its blocked ones, which the API will
not take together and the host checks only as allowed domains); the answer lists
the result links, leaves out results from blocked domains and says so, reports a
search error, and ends with the model's text."""

from __future__ import annotations

from sandbox_tools.jsontypes import JSONObject
from sandbox_tools.tools import websearch


def test_the_request_names_the_server_tool_and_only_allowed_domains() -> None:
    request = websearch.search_request("m", "q", ["docs.test"])
    [tool] = request["tools"]  # type: ignore[misc]
    assert tool == {
        "type": websearch.WEB_SEARCH_TOOL_TYPE,
        "name": "web_search",
        "max_uses": websearch.MAX_SEARCHES,
        "allowed_domains": ["docs.test"],
    }
    assert "allowed_domains" not in websearch.search_request("m", "q", None)["tools"][0]  # type: ignore[index]


def test_the_answer_lists_links_without_blocked_domains() -> None:
    content: list[JSONObject] = [
        {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {"query": "q"}},
        {"type": "web_search_tool_result", "tool_use_id": "s1", "content": [
            {"type": "web_search_result", "url": "https://docs.test/a", "title": "A"},
            {"type": "web_search_result", "url": "https://ads.docs.test/b", "title": "B"},
        ]},
        {"type": "web_search_tool_result", "tool_use_id": "s2",
         "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"}},
        {"type": "text", "text": "A says hello."},
    ]  # fmt: skip
    assert websearch.answer("q", content, ["docs.test"]).splitlines() == [
        'Web search results for query: "q"',
        "",
        "Links:",
        "(search error: max_uses_exceeded)",
        "(2 result(s) from blocked_domains left out)",
        "",
        "A says hello.",
    ]
    assert "- B: https://ads.docs.test/b" in websearch.answer("q", content, ["other.test"])
