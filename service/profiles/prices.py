"""The price source: pydantic's `genai-prices`, a maintained database of model prices
per provider, cache reads and writes included (docs/providers.md).

It ships its prices inside the package; this module reads only that bundled
snapshot. genai-prices fetches newer prices only when a caller starts its
`UpdatePrices` task, which nothing here does, so no lookup touches the network and
a result changes only when the package is upgraded.

- Our provider names map to its provider ids (`bedrock` is its `aws`; the others
  are the same); it also knows providers without built-in caching figures
  (`mistral`, `groq`, ...), whose names pass through.
- Prices that vary with the prompt's size (Anthropic's and Google's long-context
  tiers) are taken at their base tier: the price of prompts below the first
  threshold (200,000 tokens for most models), which is what most traffic pays.
- Prices that changed over time are taken as of the day of the first lookup in the
  process; prices that vary with the time of day (DeepSeek's off-peak discount) at
  12:00 UTC of that day, the standard price: off-peak traffic is then overestimated.
- A lookup is memoized per (model, provider): the analytics pass asks once per
  distinct pair, the read API may ask again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from functools import cache
from importlib.metadata import version
from typing import Any

#: Our provider names that genai-prices spells otherwise.
PROVIDER_IDS: dict[str, str] = {"bedrock": "aws"}


@dataclass(frozen=True)
class Quote:
    """A model's prices per million tokens, as the price source has them; a price it
    does not list is None."""

    input_usd_per_mtok: float
    cached_usd_per_mtok: float | None
    write_usd_per_mtok: float | None
    write_1h_usd_per_mtok: float | None


@cache
def source_name() -> str:
    """The price source and its version, for a profile's `source`."""
    return f"genai-prices {version('genai-prices')}"


@cache
def quote(model: str, provider: str) -> Quote | None:
    """The prices of `model` served by `provider` (our name, any case), or None when
    the price source knows neither or has no input price for it."""
    from genai_prices import data_snapshot  # 1.5 MB of data: only when first asked

    provider_id = PROVIDER_IDS.get(provider.strip().lower(), provider.strip().lower())
    try:
        _, info = data_snapshot.get_snapshot().find_provider_model(model, None, provider_id, None)
    except LookupError:
        return None
    prices = info.get_prices(_as_of())
    inp = _base(getattr(prices, "input_mtok", None))
    if inp is None:
        return None
    return Quote(
        input_usd_per_mtok=inp,
        cached_usd_per_mtok=_base(getattr(prices, "cache_read_mtok", None)),
        write_usd_per_mtok=_base(getattr(prices, "cache_write_mtok", None)),
        write_1h_usd_per_mtok=_base(getattr(prices, "cache_write_1h_mtok", None)),
    )


@cache
def _as_of() -> datetime:
    """Noon UTC of the first lookup's day: a time of day inside every provider's
    standard (not off-peak) hours, so that a price does not depend on when the
    process happened to start."""
    return datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)


def _base(price: Any) -> float | None:
    """A price in dollars per million tokens; a tiered price at its base tier."""
    if price is None:
        return None
    if isinstance(price, Decimal | int | float):
        return float(price)
    return float(price.base)  # genai_prices.types.TieredPrices
