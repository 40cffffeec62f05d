"""The built-in figures per provider and model family, and that docs/providers.md
lists each of them."""

import pytest

from service.profiles.builtins import BUILT_INS, built_in, family
from tests.conftest import PROJECT_ROOT


@pytest.mark.parametrize(
    ("name", "model", "matches"),
    [
        ("claude-haiku-4-5", "claude-haiku-4-5-20251001", True),
        ("claude-haiku-4-5", "anthropic.claude-haiku-4-5-20251001-v1:0", True),
        ("claude-haiku-4-5", "anthropic/claude-haiku-4.5", True),
        ("claude-haiku-4-5", "claude-haiku-4-5@20251001", True),
        ("claude-opus-4-5", "claude-opus-4-50", False),
        ("claude-opus-5", "claude-opus-5", True),
        ("claude-opus-5", "claude-opus-5-5", False),
        ("claude-opus-5", "claude-opus-5.5", False),
        ("claude-opus-5", "claude-opus-5-20260724", True),
        ("claude-3-5-haiku", "claude-3-5-haiku-latest", True),
        ("claude-3-haiku", "claude-3-5-haiku-latest", False),
    ],
)
def test_a_family_matches_its_spellings_and_no_longer_version(
    name: str, model: str, matches: bool
) -> None:
    assert bool(family(name).search(model)) is matches


@pytest.mark.parametrize(
    ("provider", "model", "ttl_s", "minimum"),
    [
        ("openai", "gpt-4o", 300.0, 1024),
        ("azure", "gpt-4.1", 300.0, 1024),
        ("anthropic", "claude-sonnet-4-5-20250929", 300.0, 1024),
        ("anthropic", "claude-opus-4-1", 300.0, 1024),
        ("anthropic", "claude-opus-4-6", 300.0, 4096),
        ("anthropic", "claude-haiku-4-5", 300.0, 4096),
        ("anthropic", "claude-3-5-haiku-20241022", 300.0, 2048),
        ("anthropic", "claude-3-haiku-20240307", 300.0, 2048),
        ("anthropic", "claude-opus-5", 300.0, 512),
        ("anthropic", "claude-opus-5-5", 300.0, 1024),
        ("bedrock", "us.anthropic.claude-haiku-4-5-20251001-v1:0", 300.0, 4096),
        ("bedrock", "anthropic.claude-3-7-sonnet-20250219-v1:0", 300.0, 1024),
        ("bedrock", "amazon.nova-pro-v1:0", 300.0, 1000),
        ("google", "gemini-2.5-flash", None, 2048),
        ("google", "gemini-2.5-pro", None, 2048),
        ("google", "gemini-3-pro-preview", None, 4096),
        ("google", "gemini-3.1-pro-preview", None, 4096),
        ("google", "gemini-2.0-flash", None, 2048),
        ("deepseek", "deepseek-chat", None, 0),
        ("Anthropic", "claude-haiku-4-5", 300.0, 4096),
    ],
)
def test_the_figures_of_a_provider_and_model(
    provider: str, model: str, ttl_s: float | None, minimum: int
) -> None:
    figures = built_in(provider)
    assert figures is not None
    assert (figures.ttl_s, figures.min_tokens_for(model)) == (ttl_s, minimum)


def test_self_hosted_engines_have_no_built_in_figures() -> None:
    assert built_in("vllm") is None
    assert built_in("sglang") is None


def test_the_docs_list_every_built_in_figure() -> None:
    """docs/providers.md is where the figures' sources and dates are: a provider or a
    model family added here and not there fails."""
    docs = (PROJECT_ROOT / "docs" / "providers.md").read_text(encoding="utf-8")
    for figures in BUILT_INS.values():
        assert f"`{figures.provider}`" in docs
        assert f"{figures.min_prompt_tokens:,}" in docs
        for entry in figures.by_family:
            assert f"`{entry.name}`" in docs, entry.name
            assert f"{entry.min_prompt_tokens:,}" in docs


@pytest.mark.parametrize(
    ("model", "ttl_s", "multiplier"),
    [
        ("gpt-5.6", 1800.0, 1.25),
        ("gpt-5.6-mini", 1800.0, 1.25),
        ("openai/gpt-5.6-2026-07-01", 1800.0, 1.25),
        ("gpt-5.7-codex", 1800.0, 1.25),
        ("gpt-5.10", 1800.0, 1.25),
        ("gpt-6", 1800.0, 1.25),
        ("GPT-5.6", 1800.0, 1.25),
        ("gpt-5.5", 300.0, None),
        ("gpt-5", 300.0, None),
        ("gpt-5-mini-2025-08-07", 300.0, None),
        ("gpt-4o", 300.0, None),
        ("gpt-4.1", 300.0, None),
        ("o3", 300.0, None),
    ],
)
def test_openai_gpt_5_6_and_later_cache_30_minutes_and_bill_writes(
    model: str, ttl_s: float, multiplier: float | None
) -> None:
    """OpenAI's guide: "For GPT-5.6 models and later model families, cache writes
    cost 1.25x the uncached input token rate"; `prompt_cache_options.ttl` defaults
    to 30m on them (docs/providers.md). Earlier models: in-memory retention, no fee."""
    openai = built_in("openai")
    assert openai is not None
    assert (openai.ttl_for(model), openai.write_multiplier_for(model)) == (ttl_s, multiplier)


def test_the_docs_list_every_generation() -> None:
    docs = (PROJECT_ROOT / "docs" / "providers.md").read_text(encoding="utf-8")
    for figures in BUILT_INS.values():
        for generation in figures.generations:
            assert f"`{generation.name}`" in docs
            assert f"{generation.write_multiplier}x" in docs
