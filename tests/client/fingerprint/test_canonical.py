"""cachewatch_client.fingerprint.canonical: canonical, stable fingerprints across processes."""

import base64
import json
import os
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from cachewatch_client.fingerprint import (
    IMAGE_TOKENS,
    IMAGE_TOKENS_LOW,
    fingerprint,
)
from tests.client.fingerprint.helpers import (
    TOOLS_14,
    Body,
    char_tokenizer,
    openai_request,
    request_bodies,
    run_python,
    shuffled_keys,
)


def test_fingerprints_are_identical_across_processes_and_hash_seeds() -> None:
    """The schema's properties come from a set, whose order follows PYTHONHASHSEED:
    the dict orders differ between processes, the fingerprints must not."""
    code = """
import json
from cachewatch_client.fingerprint import fingerprint
keys = {"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"}
props = {k: {"type": "string", "description": "the " + k} for k in keys}
tools = [{"type": "function", "function": {"name": "lookup",
          "parameters": {"type": "object", "properties": props}}}]
body = {"model": "m", "tools": tools,
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}
print(json.dumps({"order": list(props), "fields": fingerprint(body)}))
"""
    runs = [json.loads(run_python(code, env={"PYTHONHASHSEED": str(s)})) for s in range(6)]
    assert len({tuple(r["order"]) for r in runs}) > 1, "the seeds did not change dict order"
    assert all(r["fields"] == runs[0]["fields"] for r in runs)
    assert len(runs[0]["fields"]["block_hashes"]) >= 1


def test_reordering_tools_changes_the_fingerprint_but_reordering_keys_does_not() -> None:
    base = fingerprint(openai_request())
    reordered = fingerprint(openai_request(tools=TOOLS_14[::-1]))
    assert reordered["prefix_hash"] != base["prefix_hash"]
    assert reordered["block_hashes"][0] != base["block_hashes"][0]
    rekeyed = openai_request(tools=[dict(reversed(t.items())) for t in TOOLS_14])
    assert fingerprint(rekeyed) == base


@settings(max_examples=150, deadline=None)
@given(body=request_bodies(), seed=st.integers(0, 2**32))
def test_dict_key_order_never_changes_a_fingerprint(body: Body, seed: int) -> None:
    other = shuffled_keys(body, random.Random(seed))
    assert fingerprint(other) == fingerprint(body)
    assert fingerprint(other, tokenizer=char_tokenizer, block_size=8) == fingerprint(
        body, tokenizer=char_tokenizer, block_size=8
    )


def test_an_inline_image_counts_as_an_image_not_as_its_base64() -> None:
    data = "data:image/png;base64," + base64.b64encode(os.urandom(300_000)).decode()

    def with_image(detail: str, url: str = data) -> Body:
        part = {"type": "image_url", "image_url": {"url": url, "detail": detail}}
        content = [{"type": "text", "text": "What is this?"}, part]
        return openai_request(tools=[], messages=[{"role": "user", "content": content}])

    low, high = fingerprint(with_image("low")), fingerprint(with_image("high"))
    tokens_low, tokens_high = low["segments"][-1]["tokens"], high["segments"][-1]["tokens"]
    assert tokens_low < 200
    # "high" is one byte longer than "low"
    assert tokens_high - tokens_low in (IMAGE_TOKENS - IMAGE_TOKENS_LOW + d for d in (0, 1))
    other = data[:-8] + "AAAAAAAA"  # another image of the same size
    assert (
        fingerprint(with_image("low", other))["segments"][-1]["hash"]
        != (low["segments"][-1]["hash"])
    )
