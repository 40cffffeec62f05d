"""A model's caching profile (contract section 4a): what the provider caches and
what its tokens cost."""

from __future__ import annotations

from dataclasses import dataclass

#: A record asking for a cache of at least this long (Anthropic's `"ttl": "1h"`,
#: cache_ttl_s = 3600) whose writes are not split by TTL is billed the one-hour
#: write price for all of them (`Profile.write_1h_usd_per_mtok`).
LONG_CACHE_TTL_S = 3600.0


@dataclass(frozen=True)
class Profile:
    """The resolved caching profile of one (model, provider).

    Prices are dollars per million tokens. Without an input price the model is
    unpriced and all its costs are null (service/analytics/costs.py): the cached and
    write prices are then None too. With one, the cached and write prices are always
    set: the rule's, else the price source's, else the input price (a provider
    without a discount, or one that bills writes as input)."""

    provider: str | None
    #: An unused prefix expires after this; None: never.
    ttl_s: float | None
    #: Shorter prompts are never cached; 0: no minimum.
    min_prompt_tokens: int
    input_usd_per_mtok: float | None
    cached_usd_per_mtok: float | None
    write_usd_per_mtok: float | None
    #: Where it came from, for people: "models.toml line 12",
    #: "built-in anthropic (docs/providers.md)".
    source: str
    #: The write price of a one-hour cache: for a record's one-hour writes
    #: (`cache_write_1h_tokens`), and for all the writes of a record that does not
    #: split them and asks for at least LONG_CACHE_TTL_S; None: such writes cost
    #: `write_usd_per_mtok` as any other. The rule's, else the price source's
    #: unless the rule sets the write price (which then holds for every write).
    write_1h_usd_per_mtok: float | None = None

    @property
    def priced(self) -> bool:
        return self.input_usd_per_mtok is not None
