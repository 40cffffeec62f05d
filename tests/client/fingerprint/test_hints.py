"""cachewatch_client.fingerprint.hints: the anti-pattern a divergence looks like."""

import random

from cachewatch_client.fingerprint import (
    HintCode,
    explain_divergence,
)
from tests.client.fingerprint.helpers import (
    SYSTEM,
    TOOLS_14,
    Body,
    assert_points_at_difference,
    openai_request,
    system_pair,
)


def test_the_same_14_tools_in_another_order() -> None:
    shuffled = TOOLS_14[:]
    random.Random(7).shuffle(shuffled)
    found = explain_divergence(openai_request(), openai_request(tools=shuffled))
    assert found is not None and found.hint is not None
    assert found.hint.code is HintCode.REORDERED_TOOLS
    assert found.part == "tools" and found.part_index == 0
    assert "14 tools" in found.hint.message
    assert_points_at_difference(found)


def test_a_system_prompt_ending_in_one_newline_against_two() -> None:
    found = explain_divergence(*system_pair(SYSTEM + "\n", SYSTEM + "\n\n"))
    assert found is not None and found.hint is not None
    assert found.hint.code is HintCode.WHITESPACE and found.part == "system"
    assert "\\n" in found.excerpt_b
    assert_points_at_difference(found)


def test_an_image_with_detail_low_against_high() -> None:
    def ask(detail: str) -> Body:
        image = {"url": "https://example.com/cat.png", "detail": detail}
        content = [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": image},
        ]
        return openai_request(messages=[{"role": "user", "content": content}])

    found = explain_divergence(ask("low"), ask("high"))
    assert found is not None and found.hint is not None
    assert found.hint.code is HintCode.IMAGE_DETAIL
    assert found.path == "message[0].content[1].image_url.detail"
    assert '"low"' in found.excerpt_a and '"high"' in found.excerpt_b
    assert '("low" vs "high")' in found.hint.message
    unset = ask("low")
    del unset["messages"][1]["content"][1]["image_url"]["detail"]
    found = explain_divergence(ask("low"), unset)
    assert found is not None and found.hint is not None
    assert found.hint.code is HintCode.IMAGE_DETAIL
    assert '("low" vs (absent))' in found.hint.message


def test_an_earlier_message_replaced_by_a_summary() -> None:
    question = "I would like to plan a two week trip to Japan in spring, with a focus on food."
    plan = "Here is a plan. " + "Day 1: arrive in Tokyo and walk around Shinjuku. " * 10
    later = [
        {"role": "user", "content": "Could we add two days in Hiroshima?"},
        {"role": "assistant", "content": "Yes: go there from Kyoto by shinkansen."},
    ]
    summary = {
        "role": "user",
        "content": "Summary of the conversation so far: a food-focused two-week spring "
        "trip to Japan was planned day by day, starting in Tokyo.",
    }
    earlier = [{"role": "user", "content": question}, {"role": "assistant", "content": plan}]
    a = openai_request(messages=[*earlier, *later])
    b = openai_request(messages=[summary, *later, {"role": "user", "content": "And the budget?"}])
    found = explain_divergence(a, b)
    assert found is not None and found.hint is not None
    assert found.hint.code is HintCode.REWRITTEN_HISTORY
    assert found.part == "message[0]"
    assert "Summary" in found.excerpt_b


def test_a_signed_image_url_with_another_query() -> None:
    def ask(url: str) -> Body:
        content = [{"type": "image_url", "image_url": {"url": url}}]
        return openai_request(messages=[{"role": "user", "content": content}])

    found = explain_divergence(
        ask("https://cdn.example.com/a.png?sig=9f8e&exp=1767607867"),
        ask("https://cdn.example.com/a.png?sig=77aa&exp=1767609999"),
    )
    assert found is not None and found.hint is not None
    assert found.hint.code is HintCode.URL_QUERY
