"""Resolution (rules first, then built-ins, then nothing) and `annotate` over frames;
loading once per path; the app refusing to start on a bad models file."""

from pathlib import Path

import polars as pl
import pytest

from service.analytics.costs import PRICE_COLUMNS, with_request_costs
from service.api.app import create_app
from service.profiles import (
    ANNOTATED_COLUMNS,
    ModelsFileError,
    Profile,
    Profiles,
    load_profiles,
    profiles_for,
)
from service.profiles.prices import source_name
from service.settings import Settings

RULES = """\
[[model]]
match = "claude-sonnet-*"
provider = "anthropic"
ttl_s = 600
min_prompt_tokens = 2000
input_usd_per_mtok = 2.00

[[model]]
match = "claude-*"
ttl_s = 60

[[model]]
match = "llama-3.?-[0-9]*b"
ttl_s = 120
min_prompt_tokens = 256
input_usd_per_mtok = 0.10
cached_usd_per_mtok = 0.01

[[model]]
match = "Qwen*"
"""


@pytest.fixture
def profiles(tmp_path: Path) -> Profiles:
    path = tmp_path / "models.toml"
    path.write_text(RULES, encoding="utf-8")
    return load_profiles(path)


def test_the_first_matching_rule_wins(profiles: Profiles) -> None:
    sonnet = profiles.resolve("claude-sonnet-4-5", "anthropic")
    assert sonnet is not None
    assert (sonnet.ttl_s, sonnet.min_prompt_tokens, sonnet.source) == (
        600.0,
        2000,
        f"models.toml line 1; prices: {source_name()}",
    )
    haiku = profiles.resolve("claude-haiku-4-5", "anthropic")
    assert haiku is not None
    # The second rule replaces the built-in figures: no minimum unless it says one.
    assert (haiku.ttl_s, haiku.min_prompt_tokens) == (60.0, 0)
    assert haiku.source.startswith("models.toml line 8")


def test_globs_are_shell_style_and_case_sensitive(profiles: Profiles) -> None:
    assert profiles.resolve("llama-3.1-8b", None) is not None
    assert profiles.resolve("llama-3.1-70b", None) is not None
    assert profiles.resolve("llama-3.10-8b", None) is None  # `?` is one character
    assert profiles.resolve("llama-3.1-xb", None) is None  # `[0-9]` is a digit
    assert profiles.resolve("qwen-72b", None) is None
    assert profiles.resolve("Qwen-72b", None) is not None


def test_the_rules_provider_names_the_provider_of_records_naming_none(
    profiles: Profiles,
) -> None:
    unnamed = profiles.resolve("claude-sonnet-4-5", None)
    assert unnamed is not None and unnamed.provider == "anthropic"
    # Its prices left out come from the price source for that provider.
    assert (unnamed.cached_usd_per_mtok, unnamed.write_usd_per_mtok) == (0.3, 3.75)
    named = profiles.resolve("claude-sonnet-4-5", "bedrock")
    assert named is not None and named.provider == "bedrock"


def test_a_rules_prices_override_the_price_source(profiles: Profiles) -> None:
    assert profiles.resolve("claude-sonnet-4-5", "anthropic") == Profile(
        provider="anthropic",
        ttl_s=600.0,
        min_prompt_tokens=2000,
        input_usd_per_mtok=2.0,
        cached_usd_per_mtok=0.3,
        write_usd_per_mtok=3.75,
        source=f"models.toml line 1; prices: {source_name()}",
        write_1h_usd_per_mtok=6.0,
    )


def test_a_rule_with_all_its_prices_needs_no_price_source(profiles: Profiles) -> None:
    llama = profiles.resolve("llama-3.1-8b", None)
    assert llama == Profile(None, 120.0, 256, 0.10, 0.01, 0.10, "models.toml line 12")


def test_a_self_hosted_rule_without_prices_is_unpriced(profiles: Profiles) -> None:
    qwen = profiles.resolve("Qwen-72b", None)
    assert qwen == Profile(None, None, 0, None, None, None, "models.toml line 19")
    assert profiles.resolve("claude-x", None) == Profile(
        None, 60.0, 0, None, None, None, "models.toml line 8"
    )


def test_without_a_rule_the_providers_built_in_profile(profiles: Profiles) -> None:
    assert profiles.resolve("gpt-4o", "openai") == Profile(
        provider="openai",
        ttl_s=300.0,
        min_prompt_tokens=1024,
        input_usd_per_mtok=2.5,
        cached_usd_per_mtok=1.25,
        write_usd_per_mtok=2.5,  # no write price: the input price
        source=f"built-in openai (docs/providers.md); prices: {source_name()}",
    )


def test_an_unknown_model_of_a_managed_provider_has_null_prices() -> None:
    profile = load_profiles(None).resolve("my-finetune", "openai")
    assert profile == Profile(
        "openai", 300.0, 1024, None, None, None, "built-in openai (docs/providers.md)"
    )
    costs = with_request_costs(
        pl.DataFrame(
            {
                "prompt_tokens": [2000],
                "cached_tokens": [1000],
                "rewarm_tokens": [500],
                **{c: [getattr(profile, c)] for c in PRICE_COLUMNS},
            },
            schema_overrides={c: pl.Float64 for c in PRICE_COLUMNS},
        )
    )
    assert costs.select("spend_usd", "wasted_usd").row(0) == (None, None)


def test_self_hosted_and_unknown_providers_have_no_profile() -> None:
    profiles = load_profiles(None)
    assert profiles.resolve("llama-3.1-8b", None) is None
    assert profiles.resolve("llama-3.1-8b", "vllm") is None


def test_a_provider_without_built_in_figures_gets_its_prices_only() -> None:
    mistral = load_profiles(None).resolve("mistral-large-latest", "mistral")
    assert mistral is not None
    assert (mistral.ttl_s, mistral.min_prompt_tokens, mistral.input_usd_per_mtok) == (
        None,
        0,
        2.0,
    )


def test_unpriced_models(profiles: Profiles) -> None:
    pairs = [
        ("gpt-4o", "openai"),
        ("Qwen-72b", None),
        ("my-finetune", "openai"),
        ("llama-3.1-8b", None),
        ("zzz", None),
        ("my-finetune", "openai"),
    ]
    assert profiles.unpriced_models(pairs) == ["Qwen-72b", "my-finetune", "zzz"]


def records() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "request_id": ["a", "b", "c", "d", "e", "f"],
            "model": ["gpt-4o", "llama-3.1-8b", "claude-sonnet-4-5", "gpt-4o", "zzz", "claude-x"],
            "provider": ["openai", None, "anthropic", "openai", "vllm", None],
            "cache_ttl_s": [None, None, 3600.0, 86400.0, 30.0, None],
        },
        schema_overrides={"cache_ttl_s": pl.Float64},
    )


def test_annotate_adds_the_profile_columns_in_row_order(profiles: Profiles) -> None:
    out = profiles.annotate(records())
    assert out.columns == [*records().columns, *ANNOTATED_COLUMNS]
    assert out.schema["min_prompt_tokens"] == pl.Int64
    assert all(out.schema[c] == pl.Float64 for c in ("ttl_s", *PRICE_COLUMNS))
    assert out.drop(records().columns).rows() == [
        (1024, 300.0, 2.5, 1.25, 2.5, 2.5),
        (256, 120.0, 0.10, 0.01, 0.10, 0.10),
        # It asked for an hour and does not split its writes by TTL: its TTL, and
        # the one-hour write price of the source for all of them.
        (2000, 3600.0, 2.0, 0.3, 6.0, 6.0),
        # OpenAI's "24h" retention arrives as cache_ttl_s; no one-hour write price.
        (1024, 86400.0, 2.5, 1.25, 2.5, 2.5),
        # No profile: no minimum, no TTL whatever it asked, no prices.
        (0, None, None, None, None, None),
        (0, 60.0, None, None, None, None),
    ]
    assert out["request_id"].to_list() == records()["request_id"].to_list()


def test_annotate_takes_frames_as_they_come(profiles: Profiles) -> None:
    """A provider column of nulls only, no cache_ttl_s, annotated columns already
    there (replaced), no rows."""
    frame = pl.DataFrame(
        {"model": ["llama-3.1-8b", "gpt-4o"], "provider": [None, None], "ttl_s": [1.0, 2.0]}
    )
    out = profiles.annotate(frame)
    assert out.columns == ["model", "provider", *ANNOTATED_COLUMNS]
    assert out["ttl_s"].to_list() == [120.0, None]
    empty = profiles.annotate(records().clear())
    assert empty.height == 0 and empty.columns == [*records().columns, *ANNOTATED_COLUMNS]


def test_annotate_resolves_each_distinct_pair_once() -> None:
    asked: list[tuple[str, str | None]] = []

    class Counting(Profiles):
        def resolve(self, model: str, provider: str | None) -> Profile | None:
            asked.append((model, provider))
            return super().resolve(model, provider)

    frame = pl.concat([records()] * 20_000)
    out = Counting().annotate(frame)
    assert out.height == 120_000
    assert sorted(asked, key=str) == sorted(
        set(zip(records()["model"], records()["provider"], strict=True)), key=str
    )


def test_load_profiles_without_a_file_is_the_built_ins() -> None:
    assert load_profiles(None).rules == ()


def test_profiles_for_loads_once_per_path(tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_text(RULES, encoding="utf-8")
    first = profiles_for(Settings(models_file=path))
    path.write_text("", encoding="utf-8")  # read at start: later edits are not seen
    assert profiles_for(Settings(models_file=path)) is first
    assert len(first.rules) == 4
    assert profiles_for(Settings(models_file=None)) is profiles_for(Settings())


def test_the_app_does_not_start_on_a_bad_models_file(tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_text('[[model]]\nmatch = "gpt-*"\nttl_s = -1\n', encoding="utf-8")
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'x.db'}", models_file=path)
    with pytest.raises(ModelsFileError, match=r"models\.toml, line 3: `ttl_s` = -1"):
        create_app(settings)


def test_a_rules_cached_price_above_the_sources_input_price_is_lowered_and_said(
    tmp_path: Path,
) -> None:
    """The file cannot know the price source's input price of every model its glob
    matches: where the rule's cached price meets a lower one, the cached price is
    lowered to it (waste never negative), and the profile's source says so."""
    path = tmp_path / "models.toml"
    path.write_text('[[model]]\nmatch = "claude-*"\ncached_usd_per_mtok = 50.0\n', "utf-8")
    sonnet = load_profiles(path).resolve("claude-sonnet-4-5", "anthropic")
    assert sonnet is not None and sonnet.input_usd_per_mtok is not None
    assert sonnet.cached_usd_per_mtok == sonnet.input_usd_per_mtok == 3.0
    assert sonnet.source.endswith(
        "; cached price lowered to 3.0 (it was above the input or write price)"
    )


def test_the_app_does_not_start_on_a_models_file_with_numbers_out_of_bounds(
    tmp_path: Path,
) -> None:
    path = tmp_path / "models.toml"
    path.write_text(
        '[[model]]\nmatch = "gpt-*"\nmin_prompt_tokens = 9223372036854775808\n', "utf-8"
    )
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'x.db'}", models_file=path)
    with pytest.raises(ModelsFileError, match=r"models\.toml, line 3: `min_prompt_tokens`"):
        create_app(settings)


def test_gpt_5_6_writes_are_priced_apart_and_earlier_ones_are_not() -> None:
    """Issue 34: a gpt-5.6 record with writes and a gpt-5.5 one whose writes are
    reported 0, through the profiles and the cost formulas, against a hand
    computation (genai-prices: gpt-5.6 $4 input, $0.40 cached, $5 write; gpt-5.5
    $5 input, $0.50 cached, no write price)."""
    frame = pl.DataFrame(
        {
            "model": ["gpt-5.6", "gpt-5.5"],
            "provider": ["openai", "openai"],
            "prompt_tokens": [10_000, 10_000],
            "cached_tokens": [6_000, 6_000],
            "cache_write_tokens": [3_000, 0],
            "rewarm_tokens": [2_000, 2_000],
        }
    )
    out = with_request_costs(load_profiles(None).annotate(frame))
    assert out["ttl_s"].to_list() == [1800.0, 300.0]
    [(spend_56, wasted_56), (spend_55, wasted_55)] = out.select("spend_usd", "wasted_usd").rows()
    # gpt-5.6: 1,000 uncached at $4, 6,000 cached at $0.40, 3,000 written at $5.
    assert spend_56 == pytest.approx((1_000 * 4.0 + 6_000 * 0.4 + 3_000 * 5.0) / 1e6)
    assert spend_56 == pytest.approx(0.0214)
    # A miss there costs (1,000 * 4 + 3,000 * 5) / 4,000 = $4.75 a million.
    assert wasted_56 == pytest.approx(2_000 * (4.75 - 0.4) / 1e6)
    # gpt-5.5: 4,000 uncached at $5, 6,000 cached at $0.50; no write fee.
    assert spend_55 == pytest.approx((4_000 * 5.0 + 6_000 * 0.5) / 1e6)
    assert wasted_55 == pytest.approx(2_000 * (5.0 - 0.5) / 1e6)


def test_a_later_openai_model_without_a_listed_write_price_pays_the_documented_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the price source lists a GPT-5.6-or-later model's input price but no
    write price, the write price is 1.25x the input price, not the input price."""
    from service.profiles import prices

    listed = prices.Quote(2.0, 0.2, None, None)
    monkeypatch.setattr(prices, "quote", lambda model, provider: listed)
    later = load_profiles(None).resolve("gpt-5.9-nano", "openai")
    assert later is not None
    assert (later.ttl_s, later.input_usd_per_mtok, later.write_usd_per_mtok) == (1800.0, 2.0, 2.5)
    assert later.source.endswith("write price 1.25x input")
    earlier = load_profiles(None).resolve("gpt-5.4-nano", "openai")
    assert earlier is not None
    assert (earlier.ttl_s, earlier.write_usd_per_mtok) == (300.0, 2.0)


def test_an_anthropic_record_with_both_ttls_is_priced_at_each_rate(tmp_path: Path) -> None:
    """Issue 34, by hand: a record as Anthropic's usage gives it (2,000 of 2,500
    writes to the one-hour cache) through ingest, the profiles (a rule with both
    write prices) and the cost formulas; the same record without the split, as
    stored before, keeps today's price (all its writes at the one-hour price)."""
    from anthropic.types import Usage

    from service.ingest.records import UsageRecordIn, to_row

    path = tmp_path / "models.toml"
    path.write_text(
        '[[model]]\nmatch = "claude-sonnet-4-5*"\nprovider = "anthropic"\n'
        "input_usd_per_mtok = 3.00\ncached_usd_per_mtok = 0.30\n"
        "write_usd_per_mtok = 3.75\nwrite_1h_usd_per_mtok = 6.00\n",
        encoding="utf-8",
    )
    usage = Usage.model_validate(
        {"input_tokens": 12, "output_tokens": 40, "cache_read_input_tokens": 1000,
         "cache_creation_input_tokens": 2500,
         "cache_creation": {"ephemeral_5m_input_tokens": 500, "ephemeral_1h_input_tokens": 2000}}
    ).model_dump()  # fmt: skip
    record = {"request_id": "r", "ts": 1_764_400_000, "service": "s",
              "model": "claude-sonnet-4-5", "usage": usage}  # fmt: skip
    row = to_row(UsageRecordIn.model_validate(record), 0)
    assert (row["cache_write_tokens"], row["cache_write_1h_tokens"], row["cache_ttl_s"]) == (
        2500, 2000, 3600,
    )  # fmt: skip
    columns = ("model", "provider", "prompt_tokens", "cached_tokens", "cache_write_tokens",
               "cache_write_1h_tokens", "cache_ttl_s")  # fmt: skip
    frame = pl.DataFrame(
        [[row[c] for c in columns], [*(row[c] for c in columns[:5]), None, 3600]],
        schema=dict.fromkeys(columns[:2], pl.String)
        | dict.fromkeys(columns[2:6], pl.Int64)
        | {"cache_ttl_s": pl.Float64},
        orient="row",
    ).with_columns(rewarm_tokens=pl.lit(0))
    costs = with_request_costs(load_profiles(path).annotate(frame))
    split, unsplit = costs["spend_usd"].to_list()
    # 12 uncached at $3, 1,000 read at $0.30, 500 five-minute writes at $3.75, 2,000
    # one-hour writes at $6.
    assert split == pytest.approx((12 * 3.00 + 1_000 * 0.30 + 500 * 3.75 + 2_000 * 6.00) / 1e6)
    assert unsplit == pytest.approx((12 * 3.00 + 1_000 * 0.30 + 2_500 * 6.00) / 1e6)


def test_a_rules_one_hour_write_price_is_checked_like_its_write_price(tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_text(
        '[[model]]\nmatch = "m"\ncached_usd_per_mtok = 0.30\nwrite_1h_usd_per_mtok = 0.10\n',
        encoding="utf-8",
    )
    with pytest.raises(ModelsFileError, match="write price must not be below the cached price"):
        load_profiles(path)
