"""The built-in caching figures per provider, and per model where they differ.

Every figure here is listed in docs/providers.md with its source and the date it
was read: providers change them, so that page is where to check, and this table is
where to change them. A models file rule replaces them for the models it matches.

Model names arrive in many spellings (`claude-haiku-4-5-20251001`,
`anthropic.claude-haiku-4-5-20251001-v1:0`, `anthropic/claude-haiku-4.5`,
`claude-haiku-4-5@20251001`), so a model family is found anywhere in the
lower-cased name, with `-` or `.` between version numbers, and must not run on
into a longer version: `claude-opus-4-5` is not `claude-opus-4-50`, `claude-opus-5`
is not `claude-opus-5-5` (a date suffix such as `-20250929` does not count as a
version). The first family that matches gives the minimum; none: the provider's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise

#: Where the figures are documented, for a profile's `source`.
DOCS = "docs/providers.md"

FIVE_MINUTES_S = 300.0
THIRTY_MINUTES_S = 1800.0


def family(name: str) -> re.Pattern[str]:
    """A model family as a pattern (see the module docstring)."""
    tokens = name.split("-")
    pattern = re.escape(tokens[0])
    for before, token in pairwise(tokens):
        separator = "[-.]" if before.isdigit() and token.isdigit() else "-"
        pattern += separator + re.escape(token)
    # Not followed by a further version number (1-2 digits) or more digits.
    return re.compile(pattern + r"(?![-.]\d{1,2}(?!\d)|\d)")


@dataclass(frozen=True)
class FamilyMinimum:
    """The minimum cacheable prompt of one model family, `name` as the docs write it."""

    name: str
    pattern: re.Pattern[str]
    min_prompt_tokens: int


@dataclass(frozen=True)
class Generation:
    """Figures that hold for a provider's models from one version on: OpenAI's
    GPT-5.6 family and later cache for 30 minutes (`prompt_cache_options.ttl`'s
    default) and bill writes at 1.25x the input price. `version` reads a model
    name's (major, minor) version, None when the name has none."""

    name: str
    since: tuple[int, int]
    version: re.Pattern[str]
    ttl_s: float | None
    write_multiplier: float

    def holds_for(self, model: str) -> bool:
        found = self.version.search(model.lower())
        if found is None:
            return False
        return (int(found["major"]), int(found["minor"] or 0)) >= self.since


@dataclass(frozen=True)
class BuiltIn:
    """One provider's figures: a TTL and a minimum, minimums per model family, and
    the figures of later generations."""

    provider: str
    ttl_s: float | None
    min_prompt_tokens: int
    by_family: tuple[FamilyMinimum, ...] = ()
    generations: tuple[Generation, ...] = ()

    @property
    def source(self) -> str:
        return f"built-in {self.provider} ({DOCS})"

    def min_tokens_for(self, model: str) -> int:
        name = model.lower()
        for entry in self.by_family:
            if entry.pattern.search(name):
                return entry.min_prompt_tokens
        return self.min_prompt_tokens

    def generation_of(self, model: str) -> Generation | None:
        """The latest generation whose figures hold for `model`, or None."""
        return next((g for g in reversed(self.generations) if g.holds_for(model)), None)

    def ttl_for(self, model: str) -> float | None:
        generation = self.generation_of(model)
        return self.ttl_s if generation is None else generation.ttl_s

    def write_multiplier_for(self, model: str) -> float | None:
        """The write price as a multiple of the input price, where the provider
        documents one for `model` (None: the price source's, else the input price)."""
        generation = self.generation_of(model)
        return None if generation is None else generation.write_multiplier


def _minimums(table: dict[int, tuple[str, ...]]) -> tuple[FamilyMinimum, ...]:
    return tuple(
        FamilyMinimum(name, family(name), minimum)
        for minimum, names in table.items()
        for name in names
    )


# Anthropic's minimum cacheable prompt per model (docs/providers.md); the rest: 1,024.
_CLAUDE_MINIMUMS = _minimums(
    {
        512: ("claude-opus-5", "claude-fable-5", "claude-mythos-5"),
        4096: ("claude-opus-4-5", "claude-opus-4-6", "claude-opus-4-7", "claude-haiku-4-5"),
        2048: ("claude-3-5-haiku", "claude-3-haiku"),
    }
)

_GOOGLE_MINIMUMS = (
    FamilyMinimum("gemini-2.5", re.compile(r"gemini-2\.5-"), 2048),
    FamilyMinimum("gemini-3-pro", re.compile(r"gemini-3-pro"), 4096),
    FamilyMinimum("gemini-3.x", re.compile(r"gemini-3\.\d"), 4096),
    FamilyMinimum("gemini-4", re.compile(r"gemini-4"), 4096),
)

# OpenAI's model names: `gpt-5.6`, `gpt-5.6-mini`, `openai/gpt-5.6-2026-07-01`,
# `gpt-6` (version 6.0), `gpt-4o` (4.0).
_GPT_VERSION = re.compile(r"gpt-(?P<major>\d+)(?:\.(?P<minor>\d+))?(?!\d)")

_OPENAI_GENERATIONS = (Generation("gpt-5.6", (5, 6), _GPT_VERSION, THIRTY_MINUTES_S, 1.25),)

_NOVA_MINIMUMS = (FamilyMinimum("amazon.nova", re.compile(r"amazon\.nova-"), 1000),)

BUILT_INS: dict[str, BuiltIn] = {
    b.provider: b
    for b in (
        # In-memory retention: cleared after 5 to 10 minutes of inactivity; the
        # lower bound (docs/providers.md says why). "24h" retention: cache_ttl_s.
        # GPT-5.6 and later: 30 minutes, writes at 1.25x the input price.
        BuiltIn("openai", FIVE_MINUTES_S, 1024, generations=_OPENAI_GENERATIONS),
        BuiltIn("azure", FIVE_MINUTES_S, 1024),
        # 5 minutes, refreshed by each hit; "ttl": "1h" arrives as cache_ttl_s.
        BuiltIn("anthropic", FIVE_MINUTES_S, 1024, _CLAUDE_MINIMUMS),
        BuiltIn("bedrock", FIVE_MINUTES_S, 1024, _CLAUDE_MINIMUMS + _NOVA_MINIMUMS),
        # Implicit caching documents no lifetime.
        BuiltIn("google", None, 2048, _GOOGLE_MINIMUMS),
        # A disk cache that documents neither a lifetime nor a minimum.
        BuiltIn("deepseek", None, 0),
    )
}


def built_in(provider: str) -> BuiltIn | None:
    """The built-in figures of a provider (its name in any case), or None."""
    return BUILT_INS.get(provider.strip().lower())
