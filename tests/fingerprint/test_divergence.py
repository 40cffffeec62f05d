"""service.fingerprint.divergence: where two requests stop sharing a prefix."""

import copy

from hypothesis import given, settings

from service.fingerprint import (
    BYTES_PER_TOKEN,
    HintCode,
    explain_divergence,
    fingerprint,
    serialize_request,
)
from tests.fingerprint.helpers import (
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
