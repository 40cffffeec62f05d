"""Request builders, hypothesis strategies and checks shared by the fingerprint tests."""

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from cachewatch_client.fingerprint import (
    Divergence,
)
from service.ingest.records import UsageRecordIn

ROOT = Path(__file__).resolve().parents[3]
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


def assert_points_at_difference(found: Divergence) -> None:
    a, b, c = found.excerpt_a, found.excerpt_b, found.caret
    assert a[:c] == b[:c]
    assert a[c : c + 1] != b[c : c + 1]


def system_pair(a: str, b: str) -> tuple[Body, Body]:
    return openai_request(system=a), openai_request(system=b)
