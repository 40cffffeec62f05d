"""cachewatch_client.fingerprint.divergence: where two requests stop sharing a prefix."""

import copy

from hypothesis import given, settings

from cachewatch_client.fingerprint import (
    BYTES_PER_TOKEN,
    HintCode,
    Rendering,
    explain_divergence,
    fingerprint,
    serialize_request,
)
from tests.client.fingerprint.helpers import (
    SYSTEM,
    TOOLS_14,
    Body,
    assert_points_at_difference,
    openai_request,
    request_bodies,
)


@settings(max_examples=200, deadline=None)
@given(a=request_bodies(), b=request_bodies())
def test_explaining_any_two_requests_never_fails(a: Body, b: Body) -> None:
    """None exactly when one request's full blocks are a prefix of the other's."""
    found = explain_divergence(a, b)
    ha, hb = (fingerprint(x, block_size=1)["block_hashes"] for x in (a, b))
    n = min(len(serialize_request(a)), len(serialize_request(b))) // BYTES_PER_TOKEN
    if found is None:
        assert ha[:n] == hb[:n]
    else:
        assert_points_at_difference(found)
        str(found)
        assert explain_divergence(a, copy.deepcopy(a)) is None


def test_reordered_keys_are_caught_on_the_json_as_sent() -> None:
    """Fingerprints hash both alike; the provider renders the schema as sent."""
    reordered = copy.deepcopy(TOOLS_14)
    parameters = reordered[5]["function"]["parameters"]
    reordered[5]["function"]["parameters"] = dict(reversed(parameters.items()))
    a, b = openai_request(), openai_request(tools=reordered)
    assert fingerprint(a) == fingerprint(b)
    found = explain_divergence(a, b)
    assert found is not None and found.hint is not None
    assert found.hint.code is HintCode.REORDERED_KEYS
    assert found.path == "tools[5].function.parameters"
    assert "provider sees different bytes" in found.hint.message
    assert_points_at_difference(found)


def test_no_divergence_when_one_request_extends_the_other() -> None:
    first = openai_request()
    turn = [
        *first["messages"][1:],
        {"role": "assistant", "content": "It ships tomorrow."},
        {"role": "user", "content": "Thanks!"},
    ]
    second = openai_request(messages=turn)
    assert explain_divergence(first, second) is None
    assert explain_divergence(second, first) is None
    assert explain_divergence(first, copy.deepcopy(first)) is None
    # equivalent forms render alike: string content against one text block
    blocks = openai_request(system=[{"type": "text", "text": SYSTEM}])
    assert explain_divergence(first, blocks) is None


def test_a_part_present_on_one_side_only() -> None:
    found = explain_divergence(
        openai_request(response_format={"type": "json_object"}), openai_request()
    )
    assert found is not None
    assert (found.part, found.part_b, found.part_index) == ("response_format", "system", 1)
    assert "A has `response_format` where B has `system`" in str(found)


# ------------------------------------------------------------ only in rendering


def test_a_part_differing_only_in_whitespace_is_said_to_differ_only_in_rendering() -> None:
    a, b = openai_request(system=SYSTEM + "\n"), openai_request(system=SYSTEM + "\n\n")
    found = explain_divergence(a, b)
    assert found is not None and found.hint is not None
    assert found.rendering == (Rendering.WHITESPACE,)
    assert found.hint.code is HintCode.WHITESPACE  # the hint still says what to change
    text = str(found)
    assert (
        "`system` differs only in rendering (whitespace and newlines): the same prompt "
        "rendered two ways"
    ) in text
    assert "render it through one code path" in text
    assert "no known anti-pattern" not in text
    assert found.to_dict()["rendering"] == ("whitespace",)


def test_whitespace_first_and_a_word_later_is_a_difference_of_content() -> None:
    """The hint explains the first difference; the rendering verdict is the part's."""
    shared = "Answer every question about the order, its delivery and its invoice"
    a = openai_request(system=f"Be brief.\n{shared} in English.")
    b = openai_request(system=f"Be brief.\n\n{shared} in French.")
    found = explain_divergence(a, b)
    assert found is not None and found.hint is not None
    assert found.hint.code is HintCode.WHITESPACE
    assert found.rendering is None
    assert "only in rendering" not in str(found)


def test_reordered_keys_as_sent_differ_only_in_rendering() -> None:
    reordered = copy.deepcopy(TOOLS_14)
    reordered[2]["function"] = dict(reversed(reordered[2]["function"].items()))
    found = explain_divergence(openai_request(), openai_request(tools=reordered))
    assert found is not None and found.hint is not None
    assert found.hint.code is HintCode.REORDERED_KEYS
    assert found.rendering == (Rendering.KEY_ORDER,)
    assert "`tools` differs only in rendering (JSON key order)" in str(found)


def call(arguments: str) -> Body:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    turns = [
        {"role": "user", "content": "Book it."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
    ]
    return openai_request(messages=turns)


def test_no_content_hint_for_a_part_that_differs_only_in_rendering() -> None:
    """Tool call arguments in another key order: the date moved, it did not change,
    so a `timestamp` hint would be wrong."""
    found = explain_divergence(
        call('{"b": 1, "a": "2026-01-05"}'), call('{"a":"2026-01-05","b":1}')
    )
    assert found is not None
    assert found.rendering == (Rendering.KEY_ORDER,)
    assert found.hint is None
    assert "`message[1]` differs only in rendering (JSON key order)" in str(found)
    assert "no known anti-pattern" not in str(found)
    changed = explain_divergence(
        call('{"b": 1, "a": "2026-01-05"}'), call('{"b": 1, "a": "2026-01-06"}')
    )
    assert changed is not None and changed.hint is not None
    assert changed.hint.code is HintCode.TIMESTAMP and changed.rendering is None


@settings(max_examples=100, deadline=None)
@given(a=request_bodies(), b=request_bodies())
def test_rendering_only_exactly_when_the_part_shares_norm_hash(a: Body, b: Body) -> None:
    found = explain_divergence(a, b)
    if found is None or found.part != found.part_b:
        return
    sa, sb = fingerprint(a)["segments"], fingerprint(b)["segments"]
    same_norm = sa[found.part_index]["norm_hash"] == sb[found.part_index]["norm_hash"]
    assert (found.rendering is not None) == same_norm
