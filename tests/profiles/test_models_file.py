"""The models file: a good file applied rule for rule; every kind of bad file refused
whole, its message naming the file and the line."""

from pathlib import Path

import pytest

from service.profiles import ModelsFileError, load_profiles
from service.profiles.models_file import Rule, glob_problem, read_rules

GOOD = """\
# cachewatch models file
[[model]]
match = "claude-sonnet-*"
provider = "anthropic"
ttl_s = 300
min_prompt_tokens = 1024
input_usd_per_mtok = 3.00
cached_usd_per_mtok = 0.30
write_usd_per_mtok = 3.75

[[model]]
match = "llama-3.1-*"
"""


def write(tmp_path: Path, text: str, name: str = "models.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def refusal(tmp_path: Path, text: str) -> ModelsFileError:
    path = write(tmp_path, text)
    with pytest.raises(ModelsFileError) as caught:
        load_profiles(path)
    assert str(caught.value).startswith(f"{path}, line {caught.value.line}: ")
    return caught.value


def test_a_good_file_gives_its_rules_in_order_with_their_lines(tmp_path: Path) -> None:
    rules = read_rules(write(tmp_path, GOOD))
    assert rules == (
        Rule("claude-sonnet-*", "anthropic", 300.0, 1024, 3.0, 0.3, 3.75, "models.toml line 2"),
        Rule("llama-3.1-*", None, None, 0, None, None, None, "models.toml line 11"),
    )


def test_an_empty_file_has_no_rules(tmp_path: Path) -> None:
    assert read_rules(write(tmp_path, "# nothing yet\n")) == ()


def test_a_syntax_error_names_the_line_tomllib_reports(tmp_path: Path) -> None:
    error = refusal(tmp_path, '[[model]]\nmatch = "gpt-*"\nttl_s = \n')
    assert error.line == 3
    assert "Invalid value" in str(error)


def test_an_unterminated_string_names_the_last_line(tmp_path: Path) -> None:
    error = refusal(tmp_path, '[[model]]\nmatch = "gpt-*')
    assert error.line == 2


def test_a_duplicate_key_is_a_syntax_error_on_its_line(tmp_path: Path) -> None:
    error = refusal(tmp_path, '[[model]]\nmatch = "a"\nmatch = "b"\n')
    assert error.line == 3


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("ttl = 300", "unknown key `ttl` in [[model]] (allowed: match, provider, ttl_s"),
        ('ttl_s = "300"', "`ttl_s` = '300' in [[model]]: Input should be a valid number"),
        ("min_prompt_tokens = true", "`min_prompt_tokens` = True in [[model]]"),
        ("min_prompt_tokens = 1024.0", "Input should be a valid integer"),
        ("ttl_s = 0", "Input should be greater than 0"),
        ("ttl_s = inf", "Input should be a finite number"),
        ("input_usd_per_mtok = -3.0", "Input should be greater than or equal to 0"),
        ("cached_usd_per_mtok = nan", "Input should be a finite number"),
        ('provider = ""', "`provider` = '' in [[model]]: String should have at least 1 character"),
    ],
)
def test_a_bad_key_names_its_own_line(tmp_path: Path, line: str, expected: str) -> None:
    text = f'[[model]]\nmatch = "a-*"\n\n[[model]]\nmatch = "b-*"\n{line}\n'
    error = refusal(tmp_path, text)
    assert error.line == 6
    assert expected in str(error)


def test_a_bad_glob_names_the_line_of_match(tmp_path: Path) -> None:
    error = refusal(tmp_path, '[[model]]\nprovider = "openai"\nmatch = "gpt-[4o"\n')
    assert error.line == 3
    assert "unclosed `[` at position 5 of the glob" in str(error)


def test_a_rule_without_match_names_its_header(tmp_path: Path) -> None:
    error = refusal(tmp_path, '[[model]]\nmatch = "a"\n\n[[model]]\nprovider = "openai"\n')
    assert error.line == 4
    assert "[[model]] has no `match`" in str(error)


def test_an_unknown_table_names_its_header(tmp_path: Path) -> None:
    error = refusal(tmp_path, '\n[[models]]\nmatch = "gpt-*"\n')
    assert error.line == 2
    assert "unknown key `models` in the file (allowed: [[model]])" in str(error)


@pytest.mark.parametrize("text", ["model = 3\n", "[model]\nmatch = 'x'\n", "model = [1]\n"])
def test_rules_that_are_not_tables_are_refused(tmp_path: Path, text: str) -> None:
    error = refusal(tmp_path, "# rules\n" + text)
    assert error.line == 2
    assert "`model` must be tables: write each rule under a `[[model]]` header" in str(error)


def test_every_error_is_listed_the_first_line_first(tmp_path: Path) -> None:
    text = '[[model]]\nmatch = "a"\nttl_s = -1\n\n[[model]]\nmatch = "b"\nbogus = 1\n'
    error = refusal(tmp_path, text)
    assert error.line == 3
    assert "\nline 7: unknown key `bogus`" in str(error)


def test_rules_written_as_an_inline_array_name_the_line_of_model(tmp_path: Path) -> None:
    text = '# rules\nmodel = [{ match = "a" }, { match = "b", ttl = 3 }]\n'
    error = refusal(tmp_path, text)
    assert error.line == 2
    assert "unknown key `ttl`" in str(error)
    good = '# rules\nmodel = [{ match = "a" }]\n'
    assert read_rules(write(tmp_path, good))[0].source == "models.toml line 2"


def test_lookalike_lines_inside_a_multiline_string_are_not_counted(tmp_path: Path) -> None:
    text = '[[model]]\nmatch = "a"\nprovider = """\n[[model]]\nttl = 2\n"""\nttl = 3\n'
    error = refusal(tmp_path, text)
    assert error.line == 7
    rules = read_rules(write(tmp_path, text.replace("ttl = 3", "") + '[[model]]\nmatch = "b"\n'))
    assert [rule.source for rule in rules] == ["models.toml line 1", "models.toml line 8"]


def test_a_file_not_in_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_bytes(b'[[model]]\nmatch = "caf\xe9"\n')
    with pytest.raises(ModelsFileError) as caught:
        load_profiles(path)
    assert caught.value.line == 2
    assert "not UTF-8" in str(caught.value)


def test_a_missing_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"
    with pytest.raises(ModelsFileError) as caught:
        load_profiles(path)
    assert caught.value.line is None
    assert str(caught.value).startswith(f"{path}: cannot read the models file")


def test_a_bad_file_is_never_half_applied(tmp_path: Path) -> None:
    """The good first rule is not applied either: loading raises, nothing is built."""
    path = write(tmp_path, GOOD + "ttl_s = -5\n")
    with pytest.raises(ModelsFileError) as caught:
        load_profiles(path)
    assert caught.value.line == 13


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("gpt-4o*", None),
        ("claude-[!o]*", None),
        ("x[]]y", None),
        ("a[b", "unclosed `[` at position 2 of the glob"),
        ("[!]", "unclosed `[` at position 1 of the glob"),
        ("a\tb", "a glob may not contain control characters"),
    ],
)
def test_glob_problem(pattern: str, problem: str | None) -> None:
    assert glob_problem(pattern) == problem


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("min_prompt_tokens = 9223372036854775807", "less than or equal to 1073741824"),
        ("min_prompt_tokens = 1073741825", "less than or equal to 1073741824"),
        ("ttl_s = 2592001", "less than or equal to 2592000"),
        ("ttl_s = 1e308", "less than or equal to 2592000"),
        ("input_usd_per_mtok = 1e308", "less than or equal to 10000"),
        ("cached_usd_per_mtok = 10000.5", "less than or equal to 10000"),
        ("write_usd_per_mtok = 1e308", "less than or equal to 10000"),
    ],
)
def test_numbers_beyond_their_bounds_name_their_line(
    tmp_path: Path, line: str, expected: str
) -> None:
    """Accepted before, they made every pass and read fail (an int64 overflow, costs
    of inf): refused at start instead, like NaN."""
    text = f'[[model]]\nmatch = "a-*"\n\n[[model]]\nmatch = "b-*"\n{line}\n'
    error = refusal(tmp_path, text)
    assert error.line == 6
    assert expected in str(error)


def test_numbers_at_their_bounds_are_accepted(tmp_path: Path) -> None:
    text = ('[[model]]\nmatch = "a"\nttl_s = 2592000\nmin_prompt_tokens = 1073741824\n'
            "input_usd_per_mtok = 10000\ncached_usd_per_mtok = 10000\n"
            "write_usd_per_mtok = 10000\n")  # fmt: skip
    (rule,) = read_rules(write(tmp_path, text))
    assert (rule.ttl_s, rule.min_prompt_tokens, rule.cached_usd_per_mtok) == (
        2592000.0,
        2**30,
        10000.0,
    )


@pytest.mark.parametrize(
    ("prices", "line", "expected"),
    [
        ("input_usd_per_mtok = 3.0\ncached_usd_per_mtok = 3.5", 4,
         "`cached_usd_per_mtok` = 3.5 in [[model]]: the cached price must not exceed the input "
         "price (3.0)"),
        ("cached_usd_per_mtok = 0.3\nwrite_usd_per_mtok = 0.2", 4,
         "`write_usd_per_mtok` = 0.2 in [[model]]: the write price must not be below the "
         "cached price (0.3)"),
    ],
)  # fmt: skip
def test_a_cached_price_above_a_miss_is_refused(
    tmp_path: Path, prices: str, line: int, expected: str
) -> None:
    """It would make waste (the miss price less the cached price) negative."""
    error = refusal(tmp_path, f'[[model]]\nmatch = "a"\n{prices}\n')
    assert error.line == line
    assert expected in str(error)


def test_a_cached_price_equal_to_the_input_price_is_accepted(tmp_path: Path) -> None:
    text = '[[model]]\nmatch = "a"\ninput_usd_per_mtok = 1.0\ncached_usd_per_mtok = 1.0\n'
    assert read_rules(write(tmp_path, text))[0].cached_usd_per_mtok == 1.0


def test_a_file_starting_with_a_utf8_bom_is_read_and_its_lines_counted(tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())
    rules = read_rules(path)
    assert [rule.source for rule in rules] == ["models.toml line 2", "models.toml line 11"]
    path.write_bytes(b'\xef\xbb\xbf[[model]]\nmatch = "a"\nttl_s = -1\n')
    with pytest.raises(ModelsFileError) as caught:
        load_profiles(path)
    assert caught.value.line == 3
