"""The KV budget told by a `config` event's description."""

import pytest

from service.analytics.budget import parse_budget


@pytest.mark.parametrize(
    ("description", "tokens"),
    [
        ("KV cache budget per replica 9728 tokens -> 4194304 tokens", 4_194_304),
        ("KV cache budget per replica 4194304 tokens -> 9728 tokens", 9728),
        ("kv budget 2Mi tokens", 2 * 1024**2),
        ("KV cache: 1,048,576 tokens", 1_048_576),
        ("cache budget 1_000_000 tokens", 1_000_000),
        ("KV budget 1.5M tokens", 1_500_000),
        ("kv budget 64Ki tokens → 128Ki tokens", 128 * 1024),
        ("routing policy round_robin -> prefix_affinity", None),
        ("max prompt 8000 tokens", None),  # not about the cache
        ("KV cache resized", None),
        (None, None),
        ("", None),
    ],
)
def test_parse_budget(description: str | None, tokens: int | None) -> None:
    assert parse_budget(description) == tokens
