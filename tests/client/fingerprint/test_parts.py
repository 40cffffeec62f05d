"""cachewatch_client.fingerprint.parts: a request's parts, in the provider's rendering order."""

from cachewatch_client.fingerprint import (
    fingerprint,
)
from tests.client.fingerprint.helpers import (
    SYSTEM,
    anthropic_request,
    openai_request,
)


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
    names = [s["name"] for s in fingerprint(anthropic_request())["segments"]]
    assert names == ["tools", "system", "message[0]"]
    no_tools = openai_request(tools=[])
    assert [s["name"] for s in fingerprint(no_tools)["segments"]] == ["system", "message[0]"]


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
