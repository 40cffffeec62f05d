"""A request body as its parts, in the order the provider renders them.

`tools`, `response_format`, `system`, then `message[0]`, `message[1]`, ...: the
OpenAI (Chat and Responses) and Anthropic forms of one conversation give the same
parts, normalized so that what the provider renders alike is written alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class _Part:
    """One part of a request: `value` is what is hashed, `raw` what was sent."""

    name: str
    value: Any
    raw: Any


def _request_parts(body: Mapping[str, Any]) -> list[_Part]:
    """The parts of a request in the order the provider renders them."""
    if not isinstance(body, Mapping):
        raise TypeError(f"a request body must be a JSON object, not {type(body).__name__}")
    parts: list[_Part] = []
    tools = body.get("tools") or body.get("functions")
    if tools:
        parts.append(_Part("tools", [_without_cache_control(t) for t in tools], tools))
    schema = _schema(body)
    if schema is not None:
        parts.append(_Part("response_format", schema, schema))
    leading, conversation = _split_system(_messages(body))
    system = _system_part(body, leading)
    if system is not None:
        parts.append(system)
    parts.extend(
        _Part(f"message[{i}]", _normalize_message(m), m) for i, m in enumerate(conversation)
    )
    return parts


def _schema(body: Mapping[str, Any]) -> Any:
    """The output schema: Chat `response_format`, Responses `text.format`, or
    Anthropic's `output_format` / `output_config.format`."""
    text, config = body.get("text"), body.get("output_config")
    candidates = (
        body.get("response_format"),
        text.get("format") if isinstance(text, Mapping) else None,
        body.get("output_format"),
        config.get("format") if isinstance(config, Mapping) else None,
    )
    return next((c for c in candidates if c is not None), None)


def _messages(body: Mapping[str, Any]) -> list[Any]:
    """Chat `messages`, or the Responses API's `input` (a string is one user turn)."""
    messages = body.get("messages", body.get("input"))
    if messages is None:
        return []
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    if not isinstance(messages, list | tuple):
        raise TypeError("`messages` must be a list")
    return list(messages)


def _is_system(message: Any) -> bool:
    return isinstance(message, Mapping) and message.get("role") in ("system", "developer")


def _split_system(messages: list[Any]) -> tuple[list[Any], list[Any]]:
    """The leading system/developer messages, and the conversation after them. A
    system message later in the conversation stays where it is: it is rendered there."""
    n = 0
    while n < len(messages) and _is_system(messages[n]):
        n += 1
    return messages[:n], messages[n:]


def _system_part(body: Mapping[str, Any], leading: list[Any]) -> _Part | None:
    """Anthropic's `system` or the Responses API's `instructions`, then the leading
    system messages: one `system` part, as a list of messages in both forms."""
    value: list[Any] = []
    raw: list[Any] = []
    for top in (body.get("system"), body.get("instructions")):
        if top is not None and top != "" and top != []:
            value.append({"role": "system", "content": _content_blocks(top)})
            raw.append(top)
    value.extend(_normalize_message(m) for m in leading)
    raw.extend(leading)
    return _Part("system", value, raw) if value else None


def _without_cache_control(item: Any) -> Any:
    if isinstance(item, Mapping) and "cache_control" in item:
        return {k: v for k, v in item.items() if k != "cache_control"}
    return item


def _content_blocks(content: Any) -> Any:
    """String content as the one text block it is rendered as; blocks without
    `cache_control`."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [
            {"type": "text", "text": b} if isinstance(b, str) else _without_cache_control(b)
            for b in content
        ]
    return content


def _normalize_message(message: Any) -> Any:
    if not isinstance(message, Mapping):
        return message
    out = dict(_without_cache_control(message))
    if "content" in out:
        out["content"] = _content_blocks(out["content"])
    return out
