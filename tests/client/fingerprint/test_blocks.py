"""cachewatch_client.fingerprint.blocks: segments, token counts and chained block hashes."""

import copy
import hashlib
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cachewatch_client.fingerprint import (
    BYTES_PER_TOKEN,
    MAX_BLOCKS,
    MAX_SEGMENTS,
    canonical_json,
    explain_divergence,
    fingerprint,
    serialize_request,
)
from service.ingest.records import segment_row
from tests.client.fingerprint.helpers import (
    SYSTEM,
    Body,
    anthropic_request,
    assert_points_at_difference,
    char_tokenizer,
    openai_request,
    record,
    request_bodies,
)


def test_a_golden_fingerprint_pins_the_algorithm() -> None:
    """Changing the serialization or hashing breaks the continuity of every stored
    fingerprint: it must be deliberate (with a new version tag). The expected values
    are derived here from the documented algorithm, and pinned."""
    fields = fingerprint({"model": "m", "system": "You are terse.", "messages": []})
    text = '[{"content":[{"text":"You are terse.","type":"text"}],"role":"system"}]'

    def blake(data: bytes, person: bytes) -> bytes:
        return hashlib.blake2b(data, digest_size=8, person=person).digest()

    segment = blake(text.encode(), b"cw-segment")
    norm = blake(text.encode(), b"cw-norm")  # the text is already in normal form
    stream = f"system\n{text}\n".encode()
    seed = blake(b"cachewatch-fingerprint-v1|bytes/4|128", b"cw-seed")
    block = blake(seed + stream, b"cw-block")
    prefix = blake(b"system\x00" + segment, b"cw-prefix")
    tokens = math.ceil(len(stream) / 4)
    assert fields == {
        "segments": [
            {"name": "system", "hash": segment.hex(), "tokens": tokens, "norm_hash": norm.hex()}
        ],
        "block_size": 128,
        "block_hashes": [block.hex()],
        "prefix_hash": prefix.hex(),
        "prefix_tokens": tokens,
    }
    pinned = ("bbdeb6e16f528577", "5531cfb82cf83ae2", "f8b43d49d345f428", "94d85305c7642006", 20)
    assert (segment.hex(), norm.hex(), block.hex(), prefix.hex(), tokens) == pinned


def prefix_leaves(body: Body) -> list[tuple[tuple[Any, ...], str]]:
    """Paths to the prefix's free-text leaves (names, descriptions, system text),
    and the part each belongs to."""
    leaves: list[tuple[tuple[Any, ...], str]] = []
    for i, t in enumerate(body.get("tools", [])):
        inner = ("tools", i, "function") if "function" in t else ("tools", i)
        leaves += [((*inner, "name"), "tools"), ((*inner, "description"), "tools")]
    if "response_format" in body:
        path = ("response_format", "json_schema", "schema", "description")
        leaves.append((path, "response_format"))
    system = ("system",) if "system" in body else ("messages", 0, "content")
    leaves.append((system, "system"))
    return leaves


def get_in(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        value = value[key]
    return value


def set_in(value: Any, path: tuple[Any, ...], new: Any) -> None:
    get_in(value, path[:-1])[path[-1]] = new


def without_parts_from(body: Body, part: str) -> Body:
    """The body with only the parts rendered before `part`."""
    order = ["tools", "response_format", "system"]
    kept = {k: body[k] for k in order[: order.index(part)] if k in body}
    return {"model": body["model"], **kept}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=request_bodies(), data=st.data())
def test_changing_any_prefix_part_changes_the_hashes_from_its_block_on(
    body: Body, data: st.DataObject
) -> None:
    path, part = data.draw(st.sampled_from(prefix_leaves(body)))
    old = get_in(body, path)
    at = data.draw(st.integers(0, len(old)))
    char = data.draw(st.characters(codec="utf-8"))
    changed = copy.deepcopy(body)
    replace = data.draw(st.booleans()) and at < len(old) and old[at] != char
    set_in(changed, path, old[:at] + char + old[at + (1 if replace else 0) :])

    block_size = 4
    a, b = fingerprint(body, block_size=block_size), fingerprint(changed, block_size=block_size)
    assert a["prefix_hash"] != b["prefix_hash"]
    seg_a = {s["name"]: s["hash"] for s in a["segments"]}
    seg_b = {s["name"]: s["hash"] for s in b["segments"]}
    assert [n for n in seg_a if seg_a[n] != seg_b.get(n)] == [part]

    # The serialization of the earlier parts is untouched, so are their blocks.
    stream_a, stream_b = serialize_request(body), serialize_request(changed)
    earlier = serialize_request(without_parts_from(body, part))
    assert stream_a.startswith(earlier) and stream_b.startswith(earlier)
    first = next(i for i, (x, y) in enumerate(zip(stream_a, stream_b, strict=False)) if x != y)
    assert first >= len(earlier)
    block = first // (block_size * BYTES_PER_TOKEN)
    hashes_a, hashes_b = a["block_hashes"], b["block_hashes"]
    assert hashes_a[:block] == hashes_b[:block]
    assert all(x != y for x, y in zip(hashes_a[block:], hashes_b[block:], strict=False))
    assert len(hashes_a) > block and len(hashes_b) > block

    found = explain_divergence(body, changed)
    assert found is not None and found.part == part
    assert_points_at_difference(found)

    # Exact token blocks behave alike: blocks wholly inside earlier parts stay equal.
    ta = fingerprint(body, tokenizer=char_tokenizer, block_size=block_size)
    tb = fingerprint(changed, tokenizer=char_tokenizer, block_size=block_size)
    assert ta["prefix_hash"] != tb["prefix_hash"]
    earlier_tokens = sum(s["tokens"] for s in ta["segments"][: list(seg_a).index(part)])
    kept = earlier_tokens // block_size
    assert ta["block_hashes"][:kept] == tb["block_hashes"][:kept]
    diverged = [x != y for x, y in zip(ta["block_hashes"], tb["block_hashes"], strict=False)]
    assert True in diverged and all(diverged[diverged.index(True) :])


def test_tokens_approximate_four_bytes_each_and_blocks_cover_the_stream() -> None:
    body = openai_request()
    fields = fingerprint(body)
    stream = serialize_request(body)
    assert sum(s["tokens"] for s in fields["segments"]) == pytest.approx(
        len(stream) / BYTES_PER_TOKEN, abs=len(fields["segments"])
    )
    system_json = canonical_json(
        [{"role": "system", "content": [{"type": "text", "text": SYSTEM}]}]
    )
    system = next(s for s in fields["segments"] if s["name"] == "system")
    assert system["tokens"] == math.ceil(len(f"system\n{system_json}\n".encode()) / 4)
    assert len(fields["block_hashes"]) == math.ceil(len(stream) / (128 * BYTES_PER_TOKEN))
    assert fields["prefix_tokens"] == sum(
        s["tokens"] for s in fields["segments"] if s["name"] in ("tools", "system")
    )


def test_a_tokenizer_gives_exact_token_blocks() -> None:
    calls: list[str] = []

    def words(text: str) -> list[int]:
        calls.append(text)
        return [len(w) for w in text.split(" ")]

    body = openai_request()
    fields = fingerprint(body, tokenizer=words, block_size=16)
    total = sum(s["tokens"] for s in fields["segments"])
    assert total == sum(len(text.split(" ")) for text in calls)
    assert len(fields["block_hashes"]) == math.ceil(total / 16)
    assert fields["block_hashes"] != fingerprint(body, block_size=16)["block_hashes"]


def test_the_engines_own_ids_give_the_blocks_and_the_body_the_segments() -> None:
    """`prompt_ids`: blocks of the ids the engine prefills (its chat template, which
    may put the tools after the system text), segments still of the body."""
    body = openai_request()
    ids = list(range(1000, 1100))
    fields = fingerprint(body, block_size=16, prompt_ids=ids)
    assert len(fields["block_hashes"]) == math.ceil(len(ids) / 16)
    assert fields["segments"] == fingerprint(body, block_size=16)["segments"]
    assert fields["block_hashes"] != fingerprint(body, block_size=16)["block_hashes"]
    # the same ids hash alike whatever the body; a change at id 40 keeps blocks 0-1
    other = fingerprint(openai_request(system="another"), block_size=16, prompt_ids=ids)
    assert other["block_hashes"] == fields["block_hashes"]
    changed = fingerprint(body, block_size=16, prompt_ids=[*ids[:40], 7, *ids[41:]])
    assert changed["block_hashes"][:2] == fields["block_hashes"][:2]
    assert all(
        a != b for a, b in zip(changed["block_hashes"][2:], fields["block_hashes"][2:], strict=True)
    )
    # an appended turn extends the chain: every earlier full block is kept
    longer = fingerprint(body, block_size=16, prompt_ids=[*ids, *range(50)])
    assert longer["block_hashes"][: len(ids) // 16] == fields["block_hashes"][: len(ids) // 16]


# ------------------------------------------------------------- contract records


@pytest.mark.parametrize(
    "body",
    [openai_request(response_format={"type": "json_object"}), anthropic_request()],
    ids=["openai", "anthropic"],
)
def test_the_fields_validate_as_a_contract_record(body: Body) -> None:
    fields = fingerprint(body)
    stored = record(fields)
    assert stored.block_hashes == fields["block_hashes"]
    assert stored.prefix_hash == fields["prefix_hash"]
    assert stored.segments is not None
    assert [segment_row(s) for s in stored.segments] == fields["segments"]  # norm_hash too
    assert record(fingerprint(body, tokenizer=char_tokenizer)).block_size == 128


def test_huge_requests_stay_within_the_record_limits() -> None:
    turns = [{"role": "user", "content": f"turn {i}"} for i in range(MAX_SEGMENTS + 50)]
    body = openai_request(system="x" * 50_000, messages=turns)
    fields = fingerprint(body, block_size=1)
    assert len(fields["block_hashes"]) == MAX_BLOCKS
    assert len(fields["segments"]) == MAX_SEGMENTS
    record(fields)
    bare = fingerprint({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert "prefix_hash" not in bare  # no tools, schema nor system: no static start
    record(bare)
