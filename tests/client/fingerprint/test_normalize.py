"""cachewatch_client.fingerprint.normalize: `norm_hash`, equal across renderings of one prompt,
different across contents, and stable across processes."""

import base64
import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachewatch_client.fingerprint import (
    Rendering,
    fingerprint,
    normalize,
    normalized_json,
    rendering_difference,
)
from cachewatch_client.fingerprint.parts import _request_parts
from tests.client.fingerprint.helpers import (
    SYSTEM,
    TEXT,
    TOOLS_14,
    Body,
    anthropic_request,
    openai_request,
    request_bodies,
    run_python,
)


def segment(body: Body, name: str) -> dict[str, Any]:
    [found] = [s for s in fingerprint(body)["segments"] if s["name"] == name]
    return dict(found)


def image_request(url: str, detail: str | None = "low", text: str = "What is this?") -> Body:
    image = {"url": url} if detail is None else {"url": url, "detail": detail}
    content = [{"type": "text", "text": text}, {"type": "image_url", "image_url": image}]
    return openai_request(messages=[{"role": "user", "content": content}])


def tool_call_request(arguments: str) -> Body:
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    turns = [
        {"role": "user", "content": "Look it up."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
    ]
    return openai_request(messages=turns)


CAT = "https://cdn.example.com/img/cat.png"
SIGNED_A = CAT + "?sig=9f8e77aa&exp=1767607867"
SIGNED_B = CAT + "?sig=0b1c2d3e&exp=1767609999#page=2"

# (A, B, the part that differs, the kind of rendering difference)
RENDERINGS: dict[str, tuple[Body, Body, str, Rendering]] = {
    "one trailing newline against two": (
        openai_request(system=SYSTEM + "\n"),
        openai_request(system=SYSTEM + "\n\n"),
        "system",
        Rendering.WHITESPACE,
    ),
    "tabs, double spaces and a leading blank line": (
        anthropic_request(system="You are terse.\tAnswer  in English."),
        anthropic_request(system="\n You are terse. Answer in English. "),
        "system",
        Rendering.WHITESPACE,
    ),
    "image detail low against high": (
        image_request(CAT, "low"),
        image_request(CAT, "high"),
        "message[0]",
        Rendering.IMAGE_DETAIL,
    ),
    "image detail against none": (
        image_request(CAT, "auto"),
        image_request(CAT, None),
        "message[0]",
        Rendering.IMAGE_DETAIL,
    ),
    "a signed image URL with another query string": (
        image_request(SIGNED_A),
        image_request(SIGNED_B),
        "message[0]",
        Rendering.URL_QUERY,
    ),
    "a signed URL inside text": (
        openai_request(system=f"Brand guide: {SIGNED_A} (read it first)."),
        openai_request(system=f"Brand guide: {SIGNED_B} (read it first)."),
        "system",
        Rendering.URL_QUERY,
    ),
    "tool call arguments in another key order": (
        tool_call_request('{"city": "Paris", "days": 3}'),
        tool_call_request('{"days":3,"city":"Paris"}'),
        "message[1]",
        Rendering.KEY_ORDER,
    ),
}


@pytest.mark.parametrize(("a", "b", "part", "kind"), RENDERINGS.values(), ids=list(RENDERINGS))
def test_two_renderings_of_one_prompt_share_norm_hash_and_differ_in_hash(
    a: Body, b: Body, part: str, kind: Rendering
) -> None:
    sa, sb = segment(a, part), segment(b, part)
    assert sa["hash"] != sb["hash"]
    assert sa["norm_hash"] == sb["norm_hash"]
    # Every other part is the same prompt, rendered the same way.
    others = [(s["name"], s["hash"], s["norm_hash"]) for s in fingerprint(a)["segments"]]
    assert [o for o in others if o[0] != part] == [
        (s["name"], s["hash"], s["norm_hash"])
        for s in fingerprint(b)["segments"]
        if s["name"] != part
    ]
    assert rendering_difference(_part_value(a, part), _part_value(b, part)) == (kind,)


def _part_value(body: Body, name: str) -> Any:
    [value] = [p.value for p in _request_parts(body) if p.name == name]
    return value


# (A, B, the part that differs): another word, a time, another image...
CONTENTS: dict[str, tuple[Body, Body, str]] = {
    "another word": (
        openai_request(system="You are terse. Answer in English."),
        openai_request(system="You are terse. Answer in French."),
        "system",
    ),
    "a timestamp": (
        openai_request(system=SYSTEM + "\nNow: 2026-01-05 10:31:07 UTC."),
        openai_request(system=SYSTEM + "\nNow: 2026-01-05 10:32:44 UTC."),
        "system",
    ),
    "words joined where there was whitespace": (
        openai_request(system="Answer in English."),
        openai_request(system="Answerin English."),
        "system",
    ),
    "another image path under the same host": (
        image_request(CAT + "?sig=1"),
        image_request("https://cdn.example.com/img/dog.png?sig=1"),
        "message[0]",
    ),
    "text after a signed URL": (
        openai_request(system=f"See {SIGNED_A} now."),
        openai_request(system=f"See {SIGNED_A} later."),
        "system",
    ),
    "a value after a URL inside embedded JSON": (
        tool_call_request(f'{{"url": "{SIGNED_A}", "city": "Paris"}}'),
        tool_call_request(f'{{"url": "{SIGNED_A}", "city": "Lyon"}}'),
        "message[1]",
    ),
    "tool call arguments with another value": (
        tool_call_request('{"city": "Paris", "days": 3}'),
        tool_call_request('{"city": "Paris", "days": 4}'),
        "message[1]",
    ),
    "the same tools in another order": (
        openai_request(),
        openai_request(tools=TOOLS_14[::-1]),
        "tools",
    ),
    "another inline image": (
        image_request("data:image/png;base64," + base64.b64encode(b"\x89PNG" * 200).decode()),
        image_request("data:image/png;base64," + base64.b64encode(b"\x89PNG" * 201).decode()),
        "message[0]",
    ),
}


@pytest.mark.parametrize(("a", "b", "part"), CONTENTS.values(), ids=list(CONTENTS))
def test_a_change_of_content_changes_both_hashes(a: Body, b: Body, part: str) -> None:
    sa, sb = segment(a, part), segment(b, part)
    assert sa["hash"] != sb["hash"]
    assert sa["norm_hash"] != sb["norm_hash"]
    assert rendering_difference(_part_value(a, part), _part_value(b, part)) is None


def test_detail_is_dropped_only_from_images() -> None:
    """A tool whose schema has a `detail` property is content, not an image's detail."""

    def with_detail(kind: str) -> Body:
        tool = {
            "type": "function",
            "function": {"name": "report", "parameters": {"type": "object", "detail": kind}},
        }
        return openai_request(tools=[tool])

    assert (
        segment(with_detail("full"), "tools")["norm_hash"]
        != (segment(with_detail("short"), "tools")["norm_hash"])
    )
    responses_image = {"type": "input_image", "image_url": CAT, "detail": "high"}
    assert normalize(responses_image) == {"type": "input_image", "image_url": CAT}


def test_the_normal_form_is_what_the_docstring_says() -> None:
    value = {
        "b": " Hello,\n\n\tworld  ",
        "a": [f"see {SIGNED_A}.", '{"y": [1, 2], "x": " a  b "}', "[not json"],
        "image": {"type": "image_url", "image_url": {"url": SIGNED_B, "detail": "high"}},
    }
    assert json.loads(normalized_json(value)) == {
        "a": [f"see {CAT}.", '{"x":"a b","y":[1,2]}', "[not json"],
        "b": "Hello, world",
        "image": {"image_url": {"url": CAT}, "type": "image_url"},
    }
    # Each kind can be left out, which is how a difference is named.
    only_spaces = frozenset({Rendering.WHITESPACE})
    assert normalize(value, only_spaces)["a"][0] == f"see {SIGNED_A}."
    assert normalize(value, only_spaces)["image"]["image_url"]["detail"] == "high"


def test_several_kinds_are_all_named() -> None:
    a = image_request(SIGNED_A, "low", text="What is this?\n")
    b = image_request(SIGNED_B, "high", text="What is this?")
    kinds = rendering_difference(_part_value(a, "message[0]"), _part_value(b, "message[0]"))
    assert kinds == (Rendering.WHITESPACE, Rendering.IMAGE_DETAIL, Rendering.URL_QUERY)


@settings(max_examples=150, deadline=None)
@given(body=request_bodies(), data=st.data())
def test_whitespace_drift_never_changes_norm_hash(body: Body, data: st.DataObject) -> None:
    """Any system prompt, with its whitespace runs redrawn and some added at its ends."""
    system = body["system"] if "system" in body else body["messages"][0]["content"]
    words = system.split()
    # Every run holds a character no base64 text has: the drifted prompt is never
    # taken for a binary payload (which is hashed by its digest, not normalized).
    runs = st.sampled_from([" ", "\t", "\n ", "\r\n\t", "\u00a0", "  \n"])
    edges = st.text(st.sampled_from([" ", "\n"]), max_size=2)
    drifted = data.draw(edges) + "".join(w + data.draw(runs) for w in words) + data.draw(edges)
    other = json.loads(json.dumps(body))
    if "system" in other:
        other["system"] = drifted
    else:
        other["messages"][0]["content"] = drifted
    assert segment(other, "system")["norm_hash"] == segment(body, "system")["norm_hash"]
    assert [s["norm_hash"] for s in fingerprint(other)["segments"]] == [
        s["norm_hash"] for s in fingerprint(body)["segments"]
    ]


@settings(max_examples=100, deadline=None)
@given(system=TEXT)
def test_the_openai_and_anthropic_forms_of_a_prompt_share_both_hashes(system: str) -> None:
    """norm_hash is coarser than hash: what hashes alike also normalizes alike."""
    a = segment(openai_request(system="S" + system), "system")
    b = segment(anthropic_request(system=[{"type": "text", "text": "S" + system}]), "system")
    assert a == b
    assert len(a["norm_hash"]) == 16 and a["norm_hash"] != a["hash"]


def test_norm_hash_is_identical_across_processes_and_hash_seeds() -> None:
    """Set-ordered schema properties and embedded JSON whose key order follows
    PYTHONHASHSEED: the dict orders differ between processes, norm_hash must not.
    The value is pinned: it is stored, so it must not change between releases."""
    code = """
import json
from cachewatch_client.fingerprint import fingerprint
keys = {"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"}
props = {k: {"type": "string", "description": "the  " + k + "\\n"} for k in keys}
tools = [{"type": "function", "function": {"name": "lookup",
          "parameters": {"type": "object", "properties": props}}}]
call = {"id": "c", "type": "function",
        "function": {"name": "lookup", "arguments": json.dumps({k: 1 for k in keys})}}
body = {"model": "m", "tools": tools,
        "messages": [{"role": "system", "content": "s\\n"},
                     {"role": "assistant", "content": None, "tool_calls": [call]}]}
print(json.dumps({"order": list(props), "segments": fingerprint(body)["segments"]}))
"""
    runs = [json.loads(run_python(code, env={"PYTHONHASHSEED": str(s)})) for s in range(6)]
    assert len({tuple(r["order"]) for r in runs}) > 1, "the seeds did not change dict order"
    norms = {tuple(s["norm_hash"] for s in r["segments"]) for r in runs}
    assert len(norms) == 1
    hashes = {tuple(s["hash"] for s in r["segments"]) for r in runs}
    assert len(hashes) > 1, "the embedded JSON's key order should change `hash`"
    assert norms == {("2203ce8e06d6b68d", "34e5d5129fd29691", "01f26983dad339ea")}


def test_a_golden_norm_hash_pins_the_algorithm() -> None:
    """The documented algorithm, derived here: BLAKE2b-64 (person `cw-norm`) of the
    part's canonical JSON in normal form."""
    text = '[{"content":[{"text":"You are terse.","type":"text"}],"role":"system"}]'
    norm = hashlib.blake2b(text.encode(), digest_size=8, person=b"cw-norm").hexdigest()
    for system in ("You are terse.", "  You are\tterse.\n\n", ["You are terse.\n"]):
        got = segment({"model": "m", "system": system, "messages": []}, "system")
        assert got["norm_hash"] == norm == "5531cfb82cf83ae2"
