"""service.fingerprint: canonical, stable, local fingerprints, and divergence hints."""

import base64
import copy
import hashlib
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.fingerprint import (
    BYTES_PER_TOKEN,
    IMAGE_TOKENS,
    IMAGE_TOKENS_LOW,
    MAX_BLOCKS,
    MAX_SEGMENTS,
    Divergence,
    HintCode,
    canonical_json,
    explain_divergence,
    fingerprint,
    part_names,
    serialize_request,
)
from service.ingest.records import UsageRecordIn

ROOT = Path(__file__).resolve().parent.parent
Body = dict[str, Any]

# ----------------------------------------------------------------- request builders


def tool(i: int) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": f"tool_{i:02d}",
            "description": f"Looks up record kind {i} in the company directory.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "what to find"}},
                "required": ["query"],
            },
        },
    }


TOOLS_14 = [tool(i) for i in range(14)]
SYSTEM = "You are the assistant of the support team.\nAnswer in English, briefly."


def openai_request(system: Any = SYSTEM, **extra: Any) -> Body:
    messages = extra.pop(
        "messages", [{"role": "user", "content": "Where is my order?"}]
    )  # after the system message
    return {
        "model": "gpt-4.1-mini",
        "tools": extra.pop("tools", TOOLS_14),
        "messages": [{"role": "system", "content": system}, *messages],
        **extra,
    }


def anthropic_request(system: Any = SYSTEM, **extra: Any) -> Body:
    tools = [
        {"name": t["function"]["name"], "input_schema": t["function"]["parameters"]}
        for t in TOOLS_14
    ]
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 512,
        "system": system,
        "tools": tools,
        "messages": extra.pop("messages", [{"role": "user", "content": "Where is my order?"}]),
        **extra,
    }


def record(fields: Any) -> UsageRecordIn:
    required = {
        "request_id": "r-1",
        "ts": "2026-01-05T10:00:00Z",
        "service": "assistant",
        "model": "m",
        "prompt_tokens": 4000,
        "cached_tokens": 0,
    }
    return UsageRecordIn.model_validate({**required, **fields})


def run_python(code: str, *flags: str, env: dict[str, str] | None = None) -> str:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    done = subprocess.run(
        [sys.executable, *flags, "-c", code],
        cwd=ROOT,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


# ------------------------------------------------------------ standard library only

HEAVY = ("pydantic", "numpy", "sqlalchemy", "polars", "typer", "fastapi", "orjson", "httpx")


def test_the_module_imports_with_only_the_standard_library_on_the_path() -> None:
    """-S: no site-packages at all; only the module's own folder is added."""
    code = f"""
import importlib.util, json, sys
sys.path.insert(0, {str(ROOT / "service")!r})
assert importlib.util.find_spec("pydantic") is None, "site-packages leaked into sys.path"
import fingerprint
fields = fingerprint.fingerprint({{"model": "m", "system": "s", "messages": []}})
print(json.dumps(fields["segments"]))
"""
    out = run_python(code, "-S", "-P")
    assert json.loads(out)[0]["name"] == "system"


def test_importing_it_from_the_package_loads_no_server_dependency() -> None:
    code = f"""
import sys
import service.fingerprint
print(sorted(m for m in {HEAVY!r} if m in sys.modules))
"""
    assert run_python(code).strip() == "[]"


# ------------------------------------------------------------------- canonical form


def test_segments_follow_the_providers_rendering_order() -> None:
    body = openai_request(
        response_format={"type": "json_object"},
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "bye"},
        ],
    )
    names = ["tools", "response_format", "system", "message[0]", "message[1]", "message[2]"]
    assert [s["name"] for s in fingerprint(body)["segments"]] == names
    assert part_names(anthropic_request()) == ["tools", "system", "message[0]"]
    no_tools = openai_request(tools=[])
    assert part_names(no_tools) == ["system", "message[0]"]


def test_openai_and_anthropic_forms_of_one_conversation_name_the_same_parts() -> None:
    """A system message equals a top-level `system`; string content equals one text
    block; `cache_control` is no prompt text."""
    openai = fingerprint(openai_request(tools=[]))
    anthropic = fingerprint(anthropic_request() | {"tools": []})
    assert openai["segments"] == anthropic["segments"]
    blocks = anthropic_request(
        system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    )
    assert fingerprint(blocks) == fingerprint(anthropic_request())


def test_a_golden_fingerprint_pins_the_algorithm() -> None:
    """Changing the serialization or hashing breaks the continuity of every stored
    fingerprint: it must be deliberate (with a new version tag). The expected values
    are derived here from the documented algorithm, and pinned."""
    fields = fingerprint({"model": "m", "system": "You are terse.", "messages": []})
    text = '[{"content":[{"text":"You are terse.","type":"text"}],"role":"system"}]'

    def blake(data: bytes, person: bytes) -> bytes:
        return hashlib.blake2b(data, digest_size=8, person=person).digest()

    segment = blake(text.encode(), b"cw-segment")
    stream = f"system\n{text}\n".encode()
    seed = blake(b"cachewatch-fingerprint-v1|bytes/4|128", b"cw-seed")
    block = blake(seed + stream, b"cw-block")
    prefix = blake(b"system\x00" + segment, b"cw-prefix")
    tokens = math.ceil(len(stream) / 4)
    assert fields == {
        "segments": [{"name": "system", "hash": segment.hex(), "tokens": tokens}],
        "block_size": 128,
        "block_hashes": [block.hex()],
        "prefix_hash": prefix.hex(),
        "prefix_tokens": tokens,
    }
    pinned = ("bbdeb6e16f528577", "f8b43d49d345f428", "94d85305c7642006", 20)
    assert (segment.hex(), block.hex(), prefix.hex(), tokens) == pinned


def test_fingerprints_are_identical_across_processes_and_hash_seeds() -> None:
    """The schema's properties come from a set, whose order follows PYTHONHASHSEED:
    the dict orders differ between processes, the fingerprints must not."""
    code = """
import json
from service.fingerprint import fingerprint
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


# ------------------------------------------------------------------ hypothesis

TEXT = st.text(st.characters(codec="utf-8"), max_size=120)
NAMES = st.from_regex(r"[a-z][a-z_]{0,11}", fullmatch=True)


@st.composite
def request_bodies(draw: st.DrawFn) -> Body:
    """OpenAI or Anthropic bodies; the system prompt is never empty, so every body
    has a prefix."""
    anthropic = draw(st.booleans())
    tools = []
    for _ in range(draw(st.integers(0, 4))):
        schema = {"type": "object", "properties": {draw(NAMES): {"description": draw(TEXT)}}}
        definition = {"name": draw(NAMES), "description": draw(TEXT)}
        if anthropic:
            tools.append({**definition, "input_schema": schema})
        else:
            tools.append({"type": "function", "function": {**definition, "parameters": schema}})
    body: Body = {"model": "m"}
    if tools:
        body["tools"] = tools
    if not anthropic and draw(st.booleans()):
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "out", "schema": {"description": draw(TEXT)}},
        }
    system = "S" + draw(TEXT)
    roles = draw(st.lists(st.sampled_from(["user", "assistant"]), max_size=3))
    messages = [{"role": r, "content": draw(TEXT)} for r in roles]
    if anthropic:
        body |= {"system": system, "messages": messages}
    else:
        body["messages"] = [{"role": "system", "content": system}, *messages]
    return body


def shuffled_keys(value: Any, rnd: random.Random) -> Any:
    if isinstance(value, dict):
        keys = list(value)
        rnd.shuffle(keys)
        return {k: shuffled_keys(value[k], rnd) for k in keys}
    if isinstance(value, list):
        return [shuffled_keys(v, rnd) for v in value]
    return value


def char_tokenizer(text: str) -> list[int]:
    return [ord(c) for c in text]


@settings(max_examples=150, deadline=None)
@given(body=request_bodies(), seed=st.integers(0, 2**32))
def test_dict_key_order_never_changes_a_fingerprint(body: Body, seed: int) -> None:
    other = shuffled_keys(body, random.Random(seed))
    assert fingerprint(other) == fingerprint(body)
    assert fingerprint(other, tokenizer=char_tokenizer, block_size=8) == fingerprint(
        body, tokenizer=char_tokenizer, block_size=8
    )


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


# ------------------------------------------------------------------ token counts


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
    assert [s.name for s in stored.segments] == [s["name"] for s in fields["segments"]]
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


# ----------------------------------------------------------- explain_divergence


def assert_points_at_difference(found: Divergence) -> None:
    a, b, c = found.excerpt_a, found.excerpt_b, found.caret
    assert a[:c] == b[:c]
    assert a[c : c + 1] != b[c : c + 1]


def system_pair(a: str, b: str) -> tuple[Body, Body]:
    return openai_request(system=a), openai_request(system=b)


def test_a_timestamp_in_the_system_prompt() -> None:
    a, b = system_pair(
        "Current time: 2026-01-05 10:31:07 UTC.\n" + SYSTEM,
        "Current time: 2026-01-05 10:32:44 UTC.\n" + SYSTEM,
    )
    found = explain_divergence(a, b)
    assert found is not None and found.hint is not None
    assert found.hint.code is HintCode.TIMESTAMP
    assert (found.part, found.path) == ("system", "system[0].content[0].text")
    assert "10:31:07" in found.excerpt_a and "10:32:44" in found.excerpt_b
    assert_points_at_difference(found)
    tools_tokens = fingerprint(a)["segments"][0]["tokens"]
    assert tools_tokens < found.shared_tokens < tools_tokens + 30
    assert "timestamp" in str(found) and "`system`" in str(found)


def test_a_date_in_an_anthropic_system_prompt() -> None:
    a = anthropic_request(system="Today is Monday, January 5, 2026. " + SYSTEM)
    b = anthropic_request(system="Today is Tuesday, January 6, 2026. " + SYSTEM)
    found = explain_divergence(a, b)
    assert found is not None and found.hint is not None
    assert found.hint.code is HintCode.TIMESTAMP and found.part == "system"


def test_the_same_14_tools_in_another_order() -> None:
    shuffled = TOOLS_14[:]
    random.Random(7).shuffle(shuffled)
    found = explain_divergence(openai_request(), openai_request(tools=shuffled))
    assert found is not None and found.hint is not None
    assert found.hint.code is HintCode.REORDERED_TOOLS
    assert found.part == "tools" and found.part_index == 0
    assert "14 tools" in found.hint.message
    assert_points_at_difference(found)


def test_a_json_schema_with_another_request_id_const() -> None:
    def schema(request_id: str) -> dict[str, Any]:
        properties = {"requestId": {"type": "string", "const": request_id}, "answer": {}}
        return {
            "type": "json_schema",
            "json_schema": {
                "name": "reply",
                "schema": {"type": "object", "properties": properties},
            },
        }

    found = explain_divergence(
        openai_request(response_format=schema("3f2b1c4e-9a8b-4c7d-8e6f-5a4b3c2d1e0f")),
        openai_request(response_format=schema("7d1e2f3a-4b5c-4d6e-8f70-1a2b3c4d5e6f")),
    )
    assert found is not None and found.hint is not None
    assert found.hint.code is HintCode.REQUEST_ID
    assert found.part == "response_format"
    assert found.path == "response_format.json_schema.schema.properties.requestId.const"
    # an id that looks like nothing special is still named by its key
    short = explain_divergence(
        openai_request(response_format=schema("r1")), openai_request(response_format=schema("r2"))
    )
    assert short is not None and short.hint is not None
    assert short.hint.code is HintCode.REQUEST_ID


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


UUID_A, UUID_B = "8f3a2c1d-1b2c-4d5e-9f00-aa11bb22cc33", "0c1d2e3f-4a5b-4c6d-8e7f-0123456789ab"


@pytest.mark.parametrize(
    ("a", "b", "code"),
    [
        (f"Request ID: {UUID_A}.", f"Request ID: {UUID_B}.", HintCode.REQUEST_ID),
        ("Customer: alice@example.com.", "Customer: bob@example.org.", HintCode.USER_DATA),
        (
            "You work for Acme Corp. Be brief.",
            "You work for Globex Inc. Be brief.",
            HintCode.USER_DATA,
        ),
        ("Epoch: 1767607867. Be brief.", "Epoch: 1767607999. Be brief.", HintCode.TIMESTAMP),
        ("Be brief.  Be kind.", "Be brief. Be kind.", HintCode.WHITESPACE),
        ("Answer briefly.", "Answer in detail, with examples and references.", None),
    ],
)
def test_values_filled_into_the_system_prompt(a: str, b: str, code: HintCode | None) -> None:
    found = explain_divergence(*system_pair(a, b))
    assert found is not None and found.part == "system"
    assert (found.hint.code if found.hint else None) == code
    if code is None:
        assert "no known anti-pattern" in str(found)


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
