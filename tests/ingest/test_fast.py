"""The msgspec fast path against the pydantic path it shortcuts.

The property: for any body, `split_records` + `_validate` give what they gave
before the fast path (orjson per line, then `UsageRecordIn` + `to_row`): the same
items, the same accept/reject decision, the identical row as stored (compared by
repr, so 1 vs 1.0 vs True and -0.0 vs 0.0 count) and the same error
text, request_id and verbatim bytes for a rejected record.

Records are random JSON *text*, not `orjson.dumps` output, so they also carry what
only text can: ints beyond 64 bits (orjson makes them floats), number literals
like 1e400, escapes (also in keys), duplicate keys, stray whitespace, invalid
UTF-8, lone surrogates and raw control characters."""

import os
import random
from datetime import datetime
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from service.ingest import fast
from service.ingest.body import BodyItem, UndecodableBody, split_records
from service.ingest.records import (
    MAX_TOKENS,
    UsageRecordIn,
    format_validation_error,
    received_context,
    to_row,
)
from service.repository import usage_row_values
from service.services.ingestion import _request_id_of, _validate
from service.usage_row import TEXT_FIELD_NAMES, TEXT_FIELDS, TEXT_FIELDS_BY_NAME, USAGE_COLUMNS

RECEIVED_US = 1_764_410_400_000_000
# A deeper run: CACHEWATCH_FAST_PATH_EXAMPLES=20000 pytest tests/ingest/test_fast.py
SETTINGS = settings(
    max_examples=int(os.environ.get("CACHEWATCH_FAST_PATH_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)

# --- the pipeline as it was before the fast path (the reference) -------------

_WHITESPACE = b" \t\r\n"


def reference_split(data: bytes) -> list[tuple[int, Any, bytes | None, str | None]]:
    """`split_records` before the fast path: (index, value, raw, error) per item."""
    text = data.lstrip(_WHITESPACE).removeprefix(b"\xef\xbb\xbf").lstrip(_WHITESPACE)
    if not text:
        raise UndecodableBody("empty body")
    if text.startswith(b"["):
        try:
            values = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise UndecodableBody(
                f"body starts as a JSON array but is not valid JSON: {exc}"
            ) from None
        return [(i, value, None, None) for i, value in enumerate(values)]
    if text.startswith(b"{"):
        try:
            return [(0, orjson.loads(text), text, None)]
        except orjson.JSONDecodeError:
            pass
    items: list[tuple[int, Any, bytes | None, str | None]] = []
    for line in text.split(b"\n"):
        line = line.removesuffix(b"\r")
        if not line.strip(_WHITESPACE):
            continue
        try:
            items.append((len(items), orjson.loads(line), line, None))
        except orjson.JSONDecodeError as exc:
            items.append((len(items), None, line, f"line is not valid JSON: {exc}"))
    if all(error for *_, error in items):
        first = items[0][3] if items else "no content"
        raise UndecodableBody(f"body is not JSON, a JSON array or NDJSON ({first})")
    return items


def reference_validate(value: Any) -> tuple[tuple[Any, ...] | None, str | None]:
    """pydantic's row, as the storage takes it (`usage_row_values`)."""
    if not isinstance(value, dict):
        return None, "a record must be a JSON object"
    try:
        validated = UsageRecordIn.model_validate(value, context=received_context(RECEIVED_US))
        row = to_row(validated, RECEIVED_US)
    except ValidationError as exc:
        return None, format_validation_error(exc)
    return usage_row_values(row), None


Outcome = list[tuple[Any, ...]] | str


def reference_outcome(body: bytes) -> Outcome:
    try:
        items = reference_split(body)
    except UndecodableBody as exc:
        return f"undecodable: {exc}"
    out: list[tuple[Any, ...]] = []
    for index, value, raw, error in items:
        row, reason = (None, error) if error is not None else reference_validate(value)
        if row is not None:
            out.append((index, "accepted", repr(row)))
        else:
            verbatim = raw if raw is not None else orjson.dumps(value)
            out.append((index, "rejected", reason, _request_id_of(value), verbatim))
    return out


def current_outcome(body: bytes) -> Outcome:
    try:
        items = split_records(body)
    except UndecodableBody as exc:
        return f"undecodable: {exc}"
    out: list[tuple[Any, ...]] = []
    for item in items:
        row, reason = _validate(item, RECEIVED_US)
        if row is not None:
            out.append((item.index, "accepted", repr(row)))
        else:
            out.append(
                (item.index, "rejected", reason, _request_id_of(item.value), item.verbatim())
            )
    return out


# --- JSON text with what orjson.dumps never writes ---------------------------


class Lit:
    """A JSON number literal written as is (1e400, -0, 18446744073709551616...)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Lit({self.text})"


class BadStr:
    """A JSON string whose content is these bytes: invalid for orjson."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def __repr__(self) -> str:
        return f"BadStr({self.raw!r})"


_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b"}


def _u_escape(char: str, rnd: random.Random) -> str:
    code = ord(char)
    if code > 0xFFFF:  # a surrogate pair
        code -= 0x10000
        units = [0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF)]
    else:
        units = [code]
    text = "".join(f"\\u{unit:04x}" for unit in units)
    return text.upper().replace("\\U", "\\u") if rnd.random() < 0.3 else text


def _encode_str(value: str, rnd: random.Random, out: bytearray) -> None:
    parts = ['"']
    escape_rate = rnd.choice([0.0, 0.0, 0.1, 0.5])
    for char in value:
        if char in _SHORT_ESCAPES and rnd.random() < 0.7:
            parts.append(_SHORT_ESCAPES[char])
        elif char in '"\\' or ord(char) < 0x20 or rnd.random() < escape_rate:
            parts.append(_u_escape(char, rnd))
        elif char == "/" and rnd.random() < 0.5:
            parts.append("\\/")
        else:
            parts.append(char)
    parts.append('"')
    out += "".join(parts).encode()


def _ws(rnd: random.Random) -> bytes:
    return rnd.choice([b"", b"", b"", b"", b" ", b"\t", b"  ", b"\r"])


def encode(value: Any, rnd: random.Random, out: bytearray, duplicates: bool = True) -> None:
    if value is None:
        out += b"null"
    elif value is True or value is False:
        out += b"true" if value else b"false"
    elif isinstance(value, int):
        out += str(value).encode()
    elif isinstance(value, float):
        out += repr(value).encode()  # finite only: e.g. 1e+16, -0.0, 5e-324
    elif isinstance(value, Lit):
        out += value.text.encode()
    elif isinstance(value, BadStr):
        out += b'"' + value.raw + b'"'
    elif isinstance(value, str):
        _encode_str(value, rnd, out)
    elif isinstance(value, list):
        out += b"[" + _ws(rnd)
        for i, element in enumerate(value):
            if i:
                out += b"," + _ws(rnd)
            encode(element, rnd, out, duplicates)
        out += _ws(rnd) + b"]"
    elif isinstance(value, dict):
        pairs = list(value.items())
        if rnd.random() < 0.3:
            rnd.shuffle(pairs)
        entries: list[tuple[str, Any]] = []
        for key, element in pairs:
            if duplicates and rnd.random() < 0.04:  # an earlier duplicate: the last wins
                entries.append((key, rnd.choice([-1, "x", None, 1.5, True, [], 7])))
            entries.append((key, element))
        if duplicates and entries and rnd.random() < 0.03:  # a later one overrides
            entries.append((rnd.choice(entries)[0], rnd.choice([0, "", None, 3, 2.0])))
        out += b"{" + _ws(rnd)
        for i, (key, element) in enumerate(entries):
            if i:
                out += b"," + _ws(rnd)
            _encode_str(key, rnd, out)
            out += _ws(rnd) + b":" + _ws(rnd)
            encode(element, rnd, out, duplicates)
        out += _ws(rnd) + b"}"
    else:
        raise TypeError(value)


def to_line(value: Any, rnd: random.Random, duplicates: bool = True) -> bytes:
    out = bytearray(_ws(rnd).replace(b"\r", b""))
    encode(value, rnd, out, duplicates)
    out += _ws(rnd)
    return bytes(out)


# --- records: mostly plausible, often slightly wrong -------------------------

BIG_INTS = [
    2**31,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    2**70,
    10**30,
    -1,
    -(2**63),
    -(2**63) - 1,
    -(2**64),
]
LITERALS = [
    "1e400",
    "-1e400",
    "1e-400",
    "1.0",
    "-0",
    "-0.0",
    "0.0",
    "1E2",
    "5e0",
    "0.5e1",
    "18446744073709551616",
    "18446744073709551615",
    "9223372036854775808",
    "-9223372036854775809",
    "1" + "0" * 400,
    "123456789012345678901234567890.5",
    "1714564800.123456789",
    "1e17",
    "100000000000.0",
]
BAD_STRINGS = [
    b"\xff",
    b"a\xed\xa0\x80",
    b"\\ud800",
    b"x\\udc00",
    b"\x01",
    b"\x00",
    b"\\x",
    b"\xc3",
]
CHARS = st.sampled_from(
    ["a", "Z", "0", "-", " ", "/", '"', "\\", "\n", "\x00", "\x1f", "\x7f", "é", "€", "😀"]
)

ints = st.one_of(st.integers(0, 3000), st.integers(-3, 3), st.sampled_from(BIG_INTS), st.integers())
finite_floats = st.floats(allow_nan=False, allow_infinity=False)
literals = st.sampled_from(LITERALS).map(Lit)
bad_strings = st.sampled_from(BAD_STRINGS).map(BadStr)


def texts(min_size: int = 0, max_size: int = 8) -> st.SearchStrategy[str]:
    return st.text(
        alphabet=CHARS | st.characters(exclude_categories=["Cs"]),  # Cs: not in JSON
        min_size=min_size,
        max_size=max_size,
    )


# Lengths at the limits (1-100, 1-200, <= 200), in code points, astral ones too.
sized_texts = st.sampled_from([0, 1, 99, 100, 101, 199, 200, 201]).flatmap(
    lambda n: st.text(alphabet=CHARS, min_size=n, max_size=n)
)
scalars = st.one_of(st.none(), st.booleans(), ints, finite_floats, texts(), literals)
json_values = st.recursive(
    scalars | bad_strings,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(texts(max_size=4), children, max_size=3)
    ),
    max_leaves=6,
)


def field(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the field's kind of value, sometimes anything at all."""
    return st.one_of(valid, valid, valid, json_values)


names = field(st.one_of(texts(1, 12), sized_texts))
labels = field(st.one_of(st.none(), texts(), sized_texts))
counts = field(
    st.one_of(
        st.integers(0, 5000),
        ints,
        st.none(),
        st.booleans(),
        st.just(1.0),
        finite_floats,
        st.sampled_from(["12", "1"]),
        literals,
    )
)
millis = field(
    st.one_of(
        st.integers(0, 10**6), st.floats(0, 1e6), st.just(-0.0), ints, finite_floats, literals
    )
)
rfc3339 = st.builds(
    lambda moment, sep, zone: moment.isoformat(sep=sep) + zone,
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
    st.sampled_from(["T", " ", "t"]),
    st.sampled_from(["", "Z", "z", "+00:00", "+05:30", "-14:00", "+2400", " "]),
)
timestamps = field(
    st.one_of(
        rfc3339,
        st.integers(0, 10**20),
        st.sampled_from([10**11, 10**11 + 1, 10**14, 10**14 + 1, 10**17, 10**17 + 1]),
        st.floats(-10, 1e21),
        st.booleans(),
        st.sampled_from(["yesterday", "2026-13-01", "2026-11-29", "1970-01-01T00:00:00"]),
        literals,
    )
)
hash_values = st.one_of(
    st.integers(0, 10**6), ints, texts(max_size=12), sized_texts, st.booleans(), finite_floats
)
block_hashes = field(
    st.one_of(
        st.lists(hash_values, max_size=20),
        st.lists(st.integers(0, 10**6), max_size=20),
        st.sampled_from([8191, 8192, 8193]).map(lambda n: list(range(n))),
    )
)
segment = field(
    st.fixed_dictionaries(
        {"name": names, "hash": hash_values, "tokens": counts},
        optional={"norm_hash": st.none() | hash_values, "extra": json_values},
    )
)
segments = field(
    st.one_of(
        st.lists(segment, max_size=3),
        st.sampled_from([1024, 1025]).map(lambda n: [{"name": "s", "hash": "h", "tokens": 1}] * n),
    )
)
attribute_values = st.one_of(
    texts(), st.booleans(), ints, finite_floats, st.none(), st.lists(ints, max_size=1), literals
)
attributes = field(
    st.one_of(
        st.dictionaries(texts(max_size=6), attribute_values, max_size=5),
        st.sampled_from([31, 32, 33]).map(lambda n: {f"k{i}": i for i in range(n)}),
    )
)
usage_counts = st.one_of(
    st.integers(0, 10_000),
    st.none(),
    st.booleans(),
    st.integers(-5, -1),
    st.sampled_from(BIG_INTS),
    finite_floats,
    st.just("7"),
)
details = st.one_of(
    st.none(),
    st.fixed_dictionaries({}, optional={"cached_tokens": usage_counts, "audio_tokens": ints}),
    json_values,
)
usages = st.one_of(
    st.fixed_dictionaries(  # OpenAI Chat Completions, vLLM, SGLang
        {"prompt_tokens": usage_counts},
        optional={
            "completion_tokens": usage_counts,
            "total_tokens": usage_counts,
            "prompt_tokens_details": details,
        },
    ),
    st.fixed_dictionaries(  # OpenAI Responses
        {"input_tokens_details": details},
        optional={"input_tokens": usage_counts, "output_tokens": usage_counts},
    ),
    st.fixed_dictionaries(  # Anthropic Messages
        {},
        optional={
            "input_tokens": usage_counts,
            "output_tokens": usage_counts,
            "cache_read_input_tokens": usage_counts,
            "cache_creation_input_tokens": usage_counts,
            "cache_creation": st.fixed_dictionaries(
                {}, optional={"ephemeral_1h_input_tokens": usage_counts}
            )
            | json_values,
        },
    ),
    st.fixed_dictionaries(  # Bedrock Converse
        {"inputTokens": usage_counts},
        optional={
            "outputTokens": usage_counts,
            "cacheReadInputTokens": usage_counts,
            "cacheWriteInputTokens": usage_counts,
            "cacheDetails": st.lists(
                st.fixed_dictionaries(
                    {"ttl": st.sampled_from(["1h", "5m", 1])},
                    optional={"inputTokens": usage_counts},
                )
                | json_values,
                max_size=2,
            )
            | json_values,
        },
    ),
    st.fixed_dictionaries(  # DeepSeek
        {"prompt_cache_hit_tokens": usage_counts},
        optional={"prompt_tokens": usage_counts, "completion_tokens": usage_counts},
    ),
    json_values,
)
# Gemini's usageMetadata, in either spelling (and under either key: FIELDS).
gemini_usages = st.one_of(
    st.fixed_dictionaries(
        {"promptTokenCount": usage_counts},
        optional={"cachedContentTokenCount": usage_counts, "candidatesTokenCount": usage_counts},
    ),
    st.fixed_dictionaries(
        {"prompt_token_count": usage_counts},
        optional={
            "cached_content_token_count": usage_counts,
            "candidates_token_count": usage_counts,
        },
    ),
    json_values,
)
ttls = field(
    st.one_of(
        st.integers(-2, 3),
        st.floats(0, 1e7),
        st.sampled_from([3600, 86_400, 2_592_000, 2_592_001, 2_592_000.5]),
        st.none(),
        st.booleans(),
        st.just("3600"),
        literals,
    )
)

# field -> (strategy, percent of records that carry it)
FIELDS: dict[str, tuple[st.SearchStrategy[Any], int]] = {
    "request_id": (names, 95),
    "ts": (timestamps, 95),
    "service": (names, 95),
    "model": (names, 95),
    "prompt_tokens": (counts, 85),
    "cached_tokens": (counts, 50),
    "completion_tokens": (counts, 30),
    "ttft_ms": (millis, 30),
    "latency_ms": (millis, 20),
    "replica": (labels, 30),
    "deploy": (labels, 20),
    "session_id": (labels, 20),
    "cache_key": (labels, 15),
    "tenant": (labels, 15),
    "block_size": (counts, 30),
    "block_hashes": (block_hashes, 30),
    "prefix_hash": (names, 20),
    "prefix_tokens": (counts, 20),
    "segments": (segments, 15),
    "attributes": (attributes, 20),
    "usage": (usages, 25),
    "cache_write_tokens": (counts, 20),
    "cache_ttl_s": (ttls, 20),
    "provider": (labels, 20),
    "scenario": (labels, 20),
    "usageMetadata": (gemini_usages, 8),
    "usage_metadata": (gemini_usages, 8),
}


@st.composite
def records(draw: st.DrawFn) -> dict[str, Any]:
    record: dict[str, Any] = {}
    for name, (strategy, percent) in FIELDS.items():
        if draw(st.integers(0, 99)) < percent:
            record[name] = draw(strategy)
    prompt = record.get("prompt_tokens")
    if type(prompt) is int and 0 <= prompt < 2**63 and draw(st.booleans()):
        record["cached_tokens"] = draw(st.integers(0, prompt))
        if draw(st.booleans()):
            record["cache_write_tokens"] = draw(st.integers(0, prompt - record["cached_tokens"]))
    if "block_hashes" in record and draw(st.integers(0, 3)):
        record["block_size"] = draw(st.integers(1, 4096))
    if "prefix_hash" in record and draw(st.booleans()):
        record["prefix_tokens"] = draw(st.integers(0, 4096))
    if draw(st.integers(0, 3)) == 0:  # unknown fields
        record.update(draw(st.dictionaries(texts(max_size=6), json_values, max_size=2)))
    return record


# --- valid records, which the fast path covers --------------------------------

valid_counts = st.integers(0, MAX_TOKENS) | st.integers(0, 10_000)
# At most 4 segments: their tokens together stay within MAX_TOKENS.
valid_segment_tokens = st.integers(0, MAX_TOKENS // 4) | st.integers(0, 10_000)
# Accepted times: from 1970 (as written) to the day after RECEIVED_US.
valid_rfc3339 = st.builds(
    lambda moment, sep, zone: moment.isoformat(sep=sep) + zone,
    st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2025, 11, 29)),
    st.sampled_from(["T", " "]),
    st.sampled_from(["", "Z", "z", "+00:00", "+05:30", "-14:00"]),
)
RECEIVED_S = RECEIVED_US // 10**6
valid_epochs = st.one_of(
    st.integers(0, RECEIVED_S),
    st.floats(0, RECEIVED_S),
    st.integers(10**11 + 1, RECEIVED_S * 1000),
    st.integers(10**14 + 1, RECEIVED_US),
    st.integers(10**17 + 1, RECEIVED_US * 1000),
)
# What orjson can write (no Lit, no BadStr): values of unknown fields.
plain_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | finite_floats | texts(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(texts(max_size=4), children, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def valid_records(draw: st.DrawFn) -> dict[str, Any]:
    """Valid records using every field (counts within int64): the fast path takes them."""
    prompt = draw(valid_counts)
    record: dict[str, Any] = {
        "request_id": draw(texts(1, 200)),
        "ts": draw(st.one_of(valid_rfc3339, valid_epochs)),
        "service": draw(texts(1, 100)),
        "model": draw(texts(1, 200)),
    }
    optional: dict[str, st.SearchStrategy[Any]] = {
        "prompt_tokens": st.just(prompt),
        "cached_tokens": st.integers(0, prompt),
        "completion_tokens": valid_counts | st.none(),
        "ttft_ms": st.floats(0, 1e9) | st.integers(0, 10**9) | st.none(),
        "latency_ms": st.floats(0, 1e9) | st.integers(0, 10**9) | st.none(),
        "replica": texts(0, 200) | st.none(),
        "deploy": texts(0, 200) | st.none(),
        "session_id": texts(0, 200) | st.none(),
        "cache_key": texts(0, 200) | st.none(),
        "tenant": texts(0, 200) | st.none(),
        "cache_ttl_s": st.floats(1e-6, 2_592_000) | st.integers(1, 2_592_000) | st.none(),
        "provider": texts(1, 50) | st.none(),
        "scenario": texts(1, 100) | st.none(),
        "attributes": st.dictionaries(
            texts(max_size=6),
            texts() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | finite_floats,
            max_size=32,
        ),
        "segments": st.lists(
            st.fixed_dictionaries(
                {
                    "name": texts(1, 200),
                    "hash": texts(0, 200) | st.integers(-(2**63), 2**64 - 1),
                    "tokens": valid_segment_tokens,
                },
                optional={
                    "norm_hash": texts(0, 200) | st.integers(-(2**63), 2**64 - 1) | st.none()
                },
            ),
            max_size=4,
        ),
    }
    for name, strategy in optional.items():
        if draw(st.booleans()):
            record[name] = draw(strategy)
    if "prompt_tokens" in record and draw(st.booleans()):
        record["cache_write_tokens"] = draw(
            st.integers(0, record["prompt_tokens"] - record.get("cached_tokens", 0))
        )
    if draw(st.booleans()):
        record["block_size"] = draw(st.integers(1, 4096))
        record["block_hashes"] = draw(
            st.lists(texts(0, 200) | st.integers(-(2**63), 2**64 - 1), max_size=40)
        )
    if draw(st.booleans()):
        record["prefix_hash"] = draw(texts(1, 200).filter(lambda t: "\x00" not in t))
        record["prefix_tokens"] = draw(valid_counts)
    for name in ("request_id", "service", "model", "replica", "deploy", "session_id"):
        if isinstance(record.get(name), str):
            record[name] = record[name].replace("\x00", "0")
    for name in ("cache_key", "tenant", "provider", "scenario"):
        if isinstance(record.get(name), str):
            record[name] = record[name].replace("\x00", "0")
    if "prompt_tokens" not in record or draw(st.integers(0, 3)) == 0:
        for name in ("prompt_tokens", "cached_tokens", "cache_write_tokens"):
            record.pop(name, None)
        key, usage = draw(valid_usages)
        record[key] = usage
    return record


small = st.integers(0, 10_000)
_valid_usage_objects = st.one_of(
    st.fixed_dictionaries(
        {"prompt_tokens": st.just(20_000)},
        optional={
            "completion_tokens": small,
            "prompt_tokens_details": st.none()
            | st.fixed_dictionaries(
                {},
                optional={"cached_tokens": small | st.none(), "cache_write_tokens": small},
            ),
        },
    ),
    st.fixed_dictionaries(
        {"input_tokens": st.just(10_000), "input_tokens_details": st.just({"cached_tokens": 5})},
        optional={"output_tokens": small},
    ),
    st.fixed_dictionaries(
        {"input_tokens": small, "cache_read_input_tokens": small},
        optional={
            "cache_creation_input_tokens": small | st.none(),
            "output_tokens": small,
            "cache_creation": st.fixed_dictionaries(
                {}, optional={"ephemeral_1h_input_tokens": small | st.none()}
            ),
        },
    ),
    st.fixed_dictionaries(
        {"inputTokens": small, "outputTokens": small},
        optional={
            "cacheReadInputTokens": small,
            "cacheWriteInputTokens": small,
            "cacheDetails": st.lists(
                st.fixed_dictionaries({"ttl": st.sampled_from(["1h", "5m"]), "inputTokens": small}),
                max_size=2,
            ),
        },
    ),
    st.fixed_dictionaries(
        {"prompt_tokens": st.just(10_000), "prompt_cache_hit_tokens": small},
        optional={"completion_tokens": small, "prompt_cache_miss_tokens": small},
    ),
)
_valid_gemini = st.one_of(
    st.fixed_dictionaries(
        {"promptTokenCount": st.just(10_000)},
        optional={"cachedContentTokenCount": small, "candidatesTokenCount": small},
    ),
    st.fixed_dictionaries(
        {"prompt_token_count": st.just(10_000)},
        optional={"cached_content_token_count": small, "candidates_token_count": small},
    ),
)
# (the record's key, the object)
valid_usages = st.one_of(
    st.tuples(st.just("usage"), _valid_usage_objects),
    st.tuples(st.sampled_from(["usageMetadata", "usage_metadata"]), _valid_gemini),
)


@st.composite
def near_valid_records(draw: st.DrawFn) -> dict[str, Any]:
    """A valid record with up to two fields dropped or set to adversarial values."""
    record = draw(valid_records())
    for _ in range(draw(st.integers(0, 2))):
        name = draw(st.sampled_from(list(FIELDS)))
        if draw(st.integers(0, 3)) == 0:
            record.pop(name, None)
        else:
            record[name] = draw(FIELDS[name][0])
    if draw(st.integers(0, 4)) == 0:  # unknown fields
        record.update(draw(st.dictionaries(texts(max_size=6), json_values, max_size=2)))
    if draw(st.integers(0, 2)) == 0:
        record.update(draw(at_a_limit))
    if draw(st.integers(0, 3)) == 0:  # what only the cross-field checks catch
        mutation = draw(st.integers(0, 5))
        if mutation == 0 and type(record.get("prompt_tokens")) is int:
            record["cached_tokens"] = record["prompt_tokens"] + draw(st.integers(0, 1))
        elif mutation == 5 and type(record.get("prompt_tokens")) is int:
            cached = record.get("cached_tokens", 0)
            cached = cached if type(cached) is int else 0
            record["cache_write_tokens"] = (
                record["prompt_tokens"] - cached + draw(st.integers(0, 1))
            )
        elif mutation == 1:
            record.pop("block_size", None)
            record.pop("prefix_tokens", None)
        elif mutation == 2:
            name = draw(st.sampled_from(TEXT_FIELD_NAMES))
            record[name] = draw(texts(0, 5)) + "\x00"
        elif mutation == 3:
            record["ts"] = draw(st.sampled_from(["2026-11-29T25:00:00Z", "x" * 65, -1, 1e300]))
        else:
            record["prefix_hash"] = draw(texts(1, 5))
    return record


def _sized(n: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=st.sampled_from(["a", "é", "😀", " "]), min_size=n, max_size=n)


def _limit(n: int) -> st.SearchStrategy[int]:
    """At the limit or one over (or, for a minimum of 1, empty)."""
    return st.sampled_from([0, 1] if n == 1 else [n, n + 1])


# prefix_hash needs prefix_tokens: below.
_TEXT_LIMITS = {f.name: f.max_length for f in TEXT_FIELDS if f.name != "prefix_hash"}
_NON_EMPTY = [f.name for f in TEXT_FIELDS if f.min_length and f.name != "prefix_hash"]
_PREFIX_HASH = TEXT_FIELDS_BY_NAME["prefix_hash"]
# Fields that, at or just past one of their limits, replace a record's own.
at_a_limit = st.one_of(
    st.sampled_from(list(_TEXT_LIMITS.items())).flatmap(
        lambda item: _limit(item[1]).flatmap(_sized).map(lambda text: {item[0]: text})
    ),
    st.sampled_from(_NON_EMPTY).map(lambda name: {name: ""}),
    st.sampled_from([0, 1, _PREFIX_HASH.max_length, _PREFIX_HASH.max_length + 1])
    .flatmap(_sized)
    .map(lambda text: {"prefix_hash": text, "prefix_tokens": 1}),
    st.sampled_from([200, 201])
    .flatmap(_sized)
    .map(lambda text: {"block_size": 1, "block_hashes": [1, text]}),
    _limit(8192).map(lambda n: {"block_size": 1, "block_hashes": list(range(n))}),
    _limit(32).map(lambda n: {"attributes": {f"k{i}": i for i in range(n)}}),
    _limit(1024).map(lambda n: {"segments": [{"name": "s", "hash": 1, "tokens": 1}] * n}),
    st.tuples(st.sampled_from([0, 1, 200, 201]), st.sampled_from([200, 201])).flatmap(
        lambda sizes: st.tuples(_sized(sizes[0]), _sized(sizes[1])).map(
            lambda texts: {"segments": [{"name": texts[0], "hash": texts[1], "tokens": 1}]}
        )
    ),
    st.sampled_from([0, 200, 201])
    .flatmap(_sized)
    .map(lambda text: {"segments": [{"name": "s", "hash": 1, "tokens": 1, "norm_hash": text}]}),
)


lines = st.builds(
    to_line,
    st.one_of(near_valid_records(), near_valid_records(), records(), json_values),
    st.randoms(use_true_random=True),
)


@SETTINGS
@given(st.lists(lines, min_size=1, max_size=4), st.booleans())
def test_any_body_gives_what_the_pydantic_path_gave(body_lines: list[bytes], crlf: bool) -> None:
    ndjson = (b"\r\n" if crlf else b"\n").join(body_lines)
    assert current_outcome(ndjson) == reference_outcome(ndjson)
    # The same records as a JSON array and (the first) as a single object: the
    # dict path (msgspec.convert) instead of decoding lines.
    array = b"[" + b",".join(body_lines) + b"]"
    assert current_outcome(array) == reference_outcome(array)
    assert current_outcome(body_lines[0]) == reference_outcome(body_lines[0])


@SETTINGS
@given(lines)
def test_the_fast_path_alone_never_accepts_what_pydantic_refuses(line: bytes) -> None:
    """Line by line, below split_records (a one-line body is parsed as a single
    object): the fast record, when there is one, is orjson-valid JSON and its
    row is pydantic's row."""
    record = fast.decode_line(line)
    try:
        expected, _ = reference_validate(orjson.loads(line))
    except orjson.JSONDecodeError:
        expected = None
    accepted = "accepted" if expected is not None else "rejected"
    if record is None:
        event(f"{accepted} by pydantic, declined by decode_line")
        return
    value = orjson.loads(line)  # never raises: decode_line implies valid JSON
    row = fast.record_values(record, RECEIVED_US)
    event(f"{accepted} by pydantic, {'rejected' if row is None else 'accepted'} by record_values")
    if row is not None:
        assert repr(row) == repr(expected)
    converted = fast.convert_value(value)
    if converted is None:
        # orjson reads an integer beyond 64 bits (a block hash below -2**63) as a
        # float, where the line decoder kept it whole: only then may the dict path
        # decline (the record then goes to pydantic, which decides).
        assert value != msgspec.json.decode(line)
        return
    assert repr(fast.record_values(converted, RECEIVED_US)) == repr(row)


# --- the fast path does cover what it should ---------------------------------


@SETTINGS
@given(valid_records(), st.randoms(use_true_random=True))
def test_valid_records_take_the_fast_path_with_pydantics_row(
    record: dict[str, Any], rnd: random.Random
) -> None:
    line = to_line(record, rnd, duplicates=False)
    expected, error = reference_validate(orjson.loads(line))
    assert error is None, error
    decoded = fast.decode_line(line)
    assert decoded is not None
    assert repr(fast.record_values(decoded, RECEIVED_US)) == repr(expected)


@SETTINGS
@given(
    valid_records(),
    st.dictionaries(texts(1, 6).filter(lambda k: k not in FIELDS), plain_values, min_size=1),
)
def test_unknown_fields_take_the_dict_path(record: dict[str, Any], unknown: dict[str, Any]) -> None:
    line = orjson.dumps({**record, **unknown})
    value = orjson.loads(line)
    expected, _ = reference_validate(value)
    assert fast.decode_line(line) is None  # unknown fields: not on the line path
    item = split_records(line + b"\n" + line)[0]
    converted = fast.convert_value(item.value)
    assert converted is not None
    assert repr(fast.record_values(converted, RECEIVED_US)) == repr(expected)


# --- the cases that made the design ------------------------------------------

BASE = b'"request_id": "r", "ts": 1714564800, "service": "s", "model": "m"'


def line_of(fields: bytes) -> bytes:
    return b"{" + BASE + b", " + fields + b"}"


@pytest.mark.parametrize(
    "fields",
    [
        # orjson decodes ints beyond [-2**63, 2**64 - 1] as floats: pydantic refuses.
        b'"prompt_tokens": 18446744073709551616',
        b'"prompt_tokens": 5, "block_size": 1, "block_hashes": [18446744073709551616]',
        b'"prompt_tokens": 5, "block_size": 1, "block_hashes": [-9223372036854775809]',
        b'"prompt_tokens": 5, "segments": [{"name": "n", "hash": 18446744073709551616,'
        b' "tokens": 1}]',
        b'"prompt_tokens": 5, "segments": [{"name": "n", "hash": 1, "tokens": 1,'
        b' "norm_hash": 18446744073709551616}]',
        b'"prompt_tokens": 5, "segments": [{"name": "n", "hash": 1, "tokens": 1,'
        b' "norm_hash": -9223372036854775809}]',
        b'"prompt_tokens": 5, "ttft_ms": 18446744073709551616',
        b'"prompt_tokens": 5, "attributes": {"a": 18446744073709551616}',
        # msgspec skips unknown fields without orjson's checks.
        b'"prompt_tokens": 5, "extra": "\xff"',
        b'"prompt_tokens": 5, "extra": "\xed\xa0\x80"',
        b'"prompt_tokens": 5, "extra": 1e400',
        b'"prompt_tokens": 5, "extra": ' + b"[" * 2000 + b"]" * 2000,
        b'"prompt_tokens": 5, "segments": [{"name": "n", "hash": "h", "tokens": 1, "x": "\xff"}]',
        b'"usage": {"prompt_tokens": 5, "x": "\xff"}',
        b'"usage": {"prompt_tokens": 5, "x": 1e400}',
        # Every usage object is JSON to orjson, also one that is not read.
        b'"usageMetadata": {"promptTokenCount": 5, "x": "\xff"}',
        b'"usage": {"prompt_tokens": 5}, "usage_metadata": {"x": 1e400}',
        b'"prompt_tokens": 5, "usage_metadata": ' + b"[" * 1100 + b"]" * 1100,
        b'"prompt_tokens": 5, "cache_ttl_s": 1e400',
        # msgspec raises RecursionError skipping a deep `usage`; orjson's limit is 1024.
        b'"prompt_tokens": 5, "usage": ' + b"[" * 1100 + b"]" * 1100,
        b'"prompt_tokens": 5, "usage": ' + b"[" * 100_000,
        # A lone surrogate is no string for either.
        b'"prompt_tokens": 5, "replica": "\\ud800"',
    ],
)
def test_json_that_orjson_reads_differently(fields: bytes) -> None:
    line = line_of(fields)
    body = line + b"\n" + line
    assert current_outcome(body) == reference_outcome(body)
    record = fast.decode_line(line)
    assert record is None or fast.record_values(record, RECEIVED_US) is None


@pytest.mark.parametrize(
    ("fields", "column", "expected"),
    [
        # uint64 hashes above int64 are keyed like strings (hash_key), on the fast path.
        (b'"block_size": 1, "block_hashes": [18446744073709551615, 7]', "block_hashes", None),
        (b'"segments": [{"name": "n", "hash": 18446744073709551615, "tokens": 1}]', "segments",
         [{"name": "n", "hash": 2**64 - 1, "tokens": 1}]),
        (b'"segments": [{"name": "n", "hash": 1, "tokens": 1, "norm_hash": 18446744073709551615}]',
         "segments", [{"name": "n", "hash": 1, "tokens": 1, "norm_hash": 2**64 - 1}]),
        # A null norm_hash is not sent: the segment is stored without one.
        (b'"segments": [{"name": "n", "hash": "h", "tokens": 1, "norm_hash": null}]', "segments",
         [{"name": "n", "hash": "h", "tokens": 1}]),
        # The last of duplicate keys wins, as in orjson.
        (b'"replica": "a", "replica": "b"', "replica", "b"),
        (b'"ttft_ms": 1, "ttft_ms": 2.5', "ttft_ms", 2.5),
        (b'"ttft_ms": 3', "ttft_ms", 3),  # an int stays an int
        (b'"ttft_ms": -0.0', "ttft_ms", -0.0),
        (b'"attributes": {"a": 1, "b": true, "c": 1.5, "d": "x"}', "attributes",
         {"a": 1, "b": True, "c": 1.5, "d": "x"}),
        (b'"replica": "\\u00e9\\ud83d\\ude00"', "replica", "é😀"),
        (b'"usage": ' + b"[" * 900 + b"]" * 900, "prompt_tokens", 5),  # JSON to both
    ],
)  # fmt: skip
def test_fast_rows(fields: bytes, column: str, expected: Any) -> None:
    line = line_of(b'"prompt_tokens": 5, ' + fields)
    record = fast.decode_line(line)
    assert record is not None
    row = fast.record_values(record, RECEIVED_US)
    reference, _ = reference_validate(orjson.loads(line))
    assert row is not None and repr(row) == repr(reference)
    if expected is not None:
        value = dict(zip(USAGE_COLUMNS, row, strict=True))[column]
        if column in ("segments", "attributes"):  # stored as JSON text
            value = orjson.loads(value)
        assert repr(value) == repr(expected)


@pytest.mark.parametrize(
    "fields",
    [
        b'"prompt_tokens": 9223372036854775808',  # above int64: pydantic's path
        b'"prompt_tokens": 5, "cached_tokens": 6',
        b'"prompt_tokens": 5, "block_hashes": [1]',
        b'"prompt_tokens": 5, "prefix_hash": "p"',
        b'"prompt_tokens": 5, "service": "a\\u0000b"',
        b'"prompt_tokens": 5, "ts": "yesterday"',
        b'"prompt_tokens": null, "usage": {"prompt_tokens": 5}',
        b'"prompt_tokens": 5, "ttft_ms": -1, "ttft_ms": 2.5',  # msgspec checks both
        b'"usage": {"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 6}}',
        b'"usage": {"input_tokens": 5, "cache_read_input_tokens": true}',
        b'"usage": {"prompt_tokens": 18446744073709551616}',
    ],
)
def test_declined_records_are_decided_by_pydantic(fields: bytes) -> None:
    line = line_of(fields)
    body = line + b"\n" + line
    assert current_outcome(body) == reference_outcome(body)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (b'"cache_write_tokens": -1', "cache_write_tokens: Input should be greater than or equal"),
        (b'"cache_write_tokens": null', "cache_write_tokens: Input should be a valid integer"),
        (b'"cache_write_tokens": "3"', "cache_write_tokens: Input should be a valid integer"),
        (b'"cache_write_tokens": 9223372036854775808',
         "cache_write_tokens: 9223372036854775808 is over"),
        (b'"cached_tokens": 2, "cache_write_tokens": 4',
         "cache_write_tokens must not exceed prompt_tokens - cached_tokens"),
        (b'"cache_ttl_s": 0', "cache_ttl_s: Input should be greater than 0"),
        (b'"cache_ttl_s": -0.5', "cache_ttl_s: Input should be greater than 0"),
        (b'"cache_ttl_s": 2592000.5', "cache_ttl_s: Input should be less than or equal to 2592000"),
        (b'"cache_ttl_s": "300"', "cache_ttl_s: must be a number of seconds, not the string '300'"),
        (b'"cache_ttl_s": true', "cache_ttl_s"),
        (b'"provider": ""', "provider: String should have at least 1 character"),
        (b'"provider": "' + b"p" * 51 + b'"', "provider: String should have at most 50 characters"),
        (b'"provider": ["openai"]', "provider: Input should be a valid string"),
        (b'"provider": "a\\u0000b"', "provider must not contain NUL characters"),
        (b'"scenario": ""', "scenario: String should have at least 1 character"),
        (b'"scenario": "' + b"s" * 101 + b'"', "scenario: String should have at most 100"),
        (b'"scenario": 7', "scenario: Input should be a valid string"),
        (b'"scenario": "a\\u0000b"', "scenario must not contain NUL characters"),
        (b'"usage": {"input_tokens": 1, "cache_read_input_tokens": -1}',
         "usage.cache_read_input_tokens must be a whole number >= 0 or null, not -1"),
        (b'"usage": {"inputTokens": 1, "cacheWriteInputTokens": 1,'
         b' "cacheDetails": [{"ttl": "1h", "inputTokens": 1.5}]}',
         "usage.cacheDetails[0].inputTokens must be a whole number >= 0 or null, not 1.5"),
    ],
)  # fmt: skip
def test_bad_new_fields_are_declined_and_pydantic_says_why(fields: bytes, message: str) -> None:
    line = line_of(b'"prompt_tokens": 5, ' + fields)
    record = fast.decode_line(line)
    assert record is None or fast.record_values(record, RECEIVED_US) is None
    converted = fast.convert_value(orjson.loads(line))
    assert converted is None or fast.record_values(converted, RECEIVED_US) is None
    body = line + b"\n" + line
    outcome = current_outcome(body)
    assert outcome == reference_outcome(body)
    assert isinstance(outcome, list) and outcome[0][1] == "rejected"
    assert message in outcome[0][2]


def test_a_fast_line_decodes_its_value_only_when_asked() -> None:
    line = line_of(b'"prompt_tokens": 5, "usage": {"completion_tokens": 3}')
    item = split_records(line + b"\n" + line)[0]
    assert isinstance(item, BodyItem) and item.record is not None
    assert item.value == orjson.loads(line)
    row, error = _validate(item, RECEIVED_US)
    assert error is None and row is not None
    stored = dict(zip(USAGE_COLUMNS, row, strict=True))
    assert (stored["prompt_tokens"], stored["cached_tokens"], stored["completion_tokens"]) == (
        5,
        0,
        3,
    )


def test_an_integer_beyond_64_bits_in_an_array_goes_to_pydantic() -> None:
    """orjson reads -2**63 - 1 as a float, so the dict path declines the record, and
    so does the line path (the array is keyed as the line is decoded); the answer
    is pydantic's either way."""
    line = (
        b'{"request_id":"r","ts":73,"service":"s","model":"m","prompt_tokens":1,'
        b'"block_hashes":[-9223372036854775809]}'
    )
    value = orjson.loads(line)
    assert fast.convert_value(value) is None and fast.decode_line(line) is None
    for body in (line, b"[" + line + b"]"):
        assert current_outcome(body) == reference_outcome(body)
