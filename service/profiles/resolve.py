"""Which caching profile a record has (contract section 4a), for one (model,
provider) or for a whole frame of records.

The order: the first `[[model]]` rule of the models file whose glob `match` matches
the model (case-sensitive, `fnmatch.fnmatchcase`); the rule's `provider` is the
provider of records that name none. A rule replaces the built-in figures entirely
(absent `ttl_s`: never expires; absent `min_prompt_tokens`: 0), but the prices it
leaves out come from the price source for known models. Without a matching rule:
the built-in profile of the record's provider, by model where the figures differ.
A provider without built-in figures that the price source knows (`mistral`,
`groq`, ...) gets its prices and no TTL or minimum. Without a provider: no profile
(a self-hosted engine); nor does the price source guess a provider from the model
name, which would price self-hosted traffic at someone's list price.

Each price is the rule's, else the price source's, else (cached and write prices
only) the input price; without an input price, none: the model is unpriced.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import polars as pl

from service.analytics.costs import PRICE_COLUMNS
from service.profiles import prices
from service.profiles.builtins import built_in
from service.profiles.models_file import Rule, read_rules
from service.profiles.profile import LONG_CACHE_TTL_S, Profile
from service.settings import Settings

#: The columns `Profiles.annotate` adds.
ANNOTATED_COLUMNS: tuple[str, ...] = ("min_prompt_tokens", "ttl_s", *PRICE_COLUMNS)

_Prices = tuple[float | None, float | None, float | None]
_MODEL, _PROVIDER = "_profile_model", "_profile_provider"
_PROFILED, _TTL, _WRITE_1H = "_profiled", "_profile_ttl_s", "_write_1h_usd_per_mtok"
#: The record's one-hour writes: null when it does not split its writes by TTL.
_SPLIT = "cache_write_1h_tokens"
_INPUT, _CACHED, _WRITE, _WRITE_1H_PRICE = PRICE_COLUMNS


class Profiles:
    """The models file's rules over the built-in profiles and the price source.
    Resolves each (model, provider) once and remembers it."""

    def __init__(self, rules: Iterable[Rule] = ()) -> None:
        self.rules: tuple[Rule, ...] = tuple(rules)
        self._globs = tuple(
            (re.compile(fnmatch.translate(rule.match)), rule) for rule in self.rules
        )
        self._resolved: dict[tuple[str, str | None], Profile | None] = {}

    def resolve(self, model: str, provider: str | None) -> Profile | None:
        """The caching profile of `model` served by `provider`, or None."""
        key = (model, provider)
        if key not in self._resolved:
            self._resolved[key] = self._resolve(model, provider)
        return self._resolved[key]

    def unpriced_models(self, pairs: Iterable[tuple[str, str | None]]) -> list[str]:
        """The models among (model, provider) pairs that have no input price, sorted."""
        return sorted(
            {model for model, provider in pairs if not _priced(self.resolve(model, provider))}
        )

    def annotate(self, frame: pl.DataFrame) -> pl.DataFrame:
        """`frame` (columns model, provider and, optionally, cache_ttl_s) with the
        columns of ANNOTATED_COLUMNS added:

        - min_prompt_tokens (Int64): the profile's, 0 without a profile;
        - ttl_s (Float64): the record's cache_ttl_s, else the profile's ttl_s; null
          without a profile (a self-hosted engine has no TTL, whatever the caller
          asked for);
        - the PRICE_COLUMNS (Float64): null where there is no input price. The
          one-hour write price is the profile's, else the write price; the write
          price of a record that does not split its writes by TTL
          (`cache_write_1h_tokens` null or absent) and asks for a cache of an
          hour or more is the one-hour price.

        Each distinct (model, provider) is resolved once and joined back, so the
        Python work is per pair, not per row. The rows keep their order."""
        base = frame.drop(ANNOTATED_COLUMNS, strict=False)
        # Only the key columns go through the join, and the added columns are put
        # beside the frame's own: a join copies every column it carries, and the
        # records' block hashes are most of a pass's memory.
        keyed = frame.select(
            pl.col("model").cast(pl.String).alias(_MODEL),
            pl.col("provider").cast(pl.String).alias(_PROVIDER),
            *[pl.col(c) for c in ("cache_ttl_s", _SPLIT) if c in frame.columns],
        )
        pairs = keyed.select(_MODEL, _PROVIDER).unique()
        joined = keyed.join(
            self._lookup_table(pairs),
            on=[_MODEL, _PROVIDER],
            how="left",
            nulls_equal=True,
            maintain_order="left",
        )
        requested = (
            pl.col("cache_ttl_s").cast(pl.Float64)
            if "cache_ttl_s" in frame.columns
            else pl.lit(None, pl.Float64)
        )
        unsplit = pl.col(_SPLIT).is_null() if _SPLIT in frame.columns else pl.lit(True)
        long_cache = (requested >= LONG_CACHE_TTL_S) & unsplit & pl.col(_WRITE_1H).is_not_null()
        added = joined.select(
            pl.col("min_prompt_tokens").fill_null(0),
            pl.when(pl.col(_PROFILED))
            .then(pl.coalesce(requested, pl.col(_TTL)))
            .otherwise(None)
            .alias("ttl_s"),
            pl.col(_INPUT),
            pl.col(_CACHED),
            pl.when(long_cache).then(pl.col(_WRITE_1H)).otherwise(pl.col(_WRITE)).alias(_WRITE),
            pl.coalesce(_WRITE_1H, _WRITE).alias(_WRITE_1H_PRICE),
        )
        return base.hstack(added.select(ANNOTATED_COLUMNS).get_columns())

    def _lookup_table(self, pairs: pl.DataFrame) -> pl.DataFrame:
        rows = []
        for model, provider in pairs.iter_rows():
            profile = self.resolve(model, provider) if model is not None else None
            rows.append(_lookup_row(model, provider, profile))
        return pl.DataFrame(
            rows,
            schema={
                _MODEL: pl.String,
                _PROVIDER: pl.String,
                _PROFILED: pl.Boolean,
                _TTL: pl.Float64,
                "min_prompt_tokens": pl.Int64,
                _INPUT: pl.Float64,
                _CACHED: pl.Float64,
                _WRITE: pl.Float64,
                _WRITE_1H: pl.Float64,
            },
            orient="row",
        )

    def _resolve(self, model: str, provider: str | None) -> Profile | None:
        for glob, rule in self._globs:
            if glob.match(model):
                return _from_rule(rule, model, provider if provider is not None else rule.provider)
        if provider is None:
            return None
        figures = built_in(provider)
        quote = prices.quote(model, provider)
        if figures is None:
            if quote is None:
                return None
            base = _unpriced(provider, None, 0, f"no built-in caching figures for {provider}")
            return _with_prices(base, (None, None, None), quote)
        ttl_s, minimum = figures.ttl_for(model), figures.min_tokens_for(model)
        base = _unpriced(provider, ttl_s, minimum, figures.source)
        profile = _with_prices(base, (None, None, None), quote)
        return _with_documented_write(profile, figures.write_multiplier_for(model), quote)


def _with_documented_write(
    profile: Profile, multiplier: float | None, quote: prices.Quote | None
) -> Profile:
    """A priced profile whose provider documents its write price as a multiple of
    the input price (OpenAI's GPT-5.6 and later: 1.25x), where the price source
    has no write price for the model: that multiple, not the input price."""
    if multiplier is None or profile.input_usd_per_mtok is None:
        return profile
    if quote is not None and quote.write_usd_per_mtok is not None:
        return profile
    return replace(
        profile,
        write_usd_per_mtok=profile.input_usd_per_mtok * multiplier,
        source=f"{profile.source}; write price {multiplier}x input",
    )


def _unpriced(provider: str | None, ttl_s: float | None, minimum: int, source: str) -> Profile:
    return Profile(provider, ttl_s, minimum, None, None, None, source)


def _from_rule(rule: Rule, model: str, provider: str | None) -> Profile:
    base = _unpriced(provider, rule.ttl_s, rule.min_prompt_tokens, rule.source)
    given = (rule.input_usd_per_mtok, rule.cached_usd_per_mtok, rule.write_usd_per_mtok)
    one_hour = rule.write_1h_usd_per_mtok
    if all(p is not None for p in given) or provider is None:
        return _with_prices(base, given, None, one_hour)
    return _with_prices(base, given, prices.quote(model, provider), one_hour)


def _with_prices(
    base: Profile, given: _Prices, quote: prices.Quote | None, given_1h: float | None = None
) -> Profile:
    """`base` with each price: the given one, else the quote's, else (cached and
    write) the input price; all None without an input price."""
    quoted: _Prices = (
        (quote.input_usd_per_mtok, quote.cached_usd_per_mtok, quote.write_usd_per_mtok)
        if quote is not None
        else (None, None, None)
    )
    inp = _first(given[0], quoted[0])
    if inp is None:
        return base
    cached = _first(given[1], quoted[1], inp)
    write = _first(given[2], quoted[2], inp)
    write_1h = (
        given_1h
        if given_1h is not None
        else (quote.write_1h_usd_per_mtok if quote is not None and given[2] is None else None)
    )
    from_source = any(g is None and q is not None for g, q in zip(given, quoted, strict=True))
    source = f"{base.source}; prices: {prices.source_name()}" if from_source else base.source
    assert cached is not None and write is not None  # the input price is their last resort
    if cached > min(inp, write):
        # Only where a rule's price meets the source's (the models file refuses a rule
        # whose own cached price is above its input or write price): a cached token
        # costing more than a miss would make waste negative. Said in the source.
        cached = min(inp, write)
        source += f"; cached price lowered to {cached} (it was above the input or write price)"
    return Profile(
        provider=base.provider,
        ttl_s=base.ttl_s,
        min_prompt_tokens=base.min_prompt_tokens,
        input_usd_per_mtok=inp,
        cached_usd_per_mtok=cached,
        write_usd_per_mtok=write,
        source=source,
        write_1h_usd_per_mtok=write_1h,
    )


def _first(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


def _priced(profile: Profile | None) -> bool:
    return profile is not None and profile.priced


def _lookup_row(
    model: str | None, provider: str | None, profile: Profile | None
) -> tuple[object, ...]:
    if profile is None:
        return (model, provider, False, None, 0, None, None, None, None)
    return (
        model,
        provider,
        True,
        profile.ttl_s,
        profile.min_prompt_tokens,
        profile.input_usd_per_mtok,
        profile.cached_usd_per_mtok,
        profile.write_usd_per_mtok,
        profile.write_1h_usd_per_mtok,
    )


def load_profiles(path: str | os.PathLike[str] | None) -> Profiles:
    """The profiles of the models file at `path` (None: built-ins and the price
    source only). Raises ModelsFileError, naming the file and the line; a bad file
    is never half applied."""
    return Profiles(read_rules(Path(path)) if path is not None else ())


def profiles_for(settings: Settings) -> Profiles:
    """The profiles of `settings.models_file`, loaded once per path per process: the
    file is read at start (`serve`, `worker`, `detect` load it first, so that a bad
    one stops them), and later calls share that reading and its resolutions."""
    return _loaded(settings.models_file)


@lru_cache(maxsize=8)
def _loaded(path: Path | None) -> Profiles:
    return load_profiles(path)
