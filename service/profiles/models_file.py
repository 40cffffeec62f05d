"""The models file (`CACHEWATCH_MODELS_FILE`, contract section 4a): `[[model]]` rules
in TOML, read once at start, all or nothing.

The file is parsed by the standard library's `tomllib`, whose syntax errors name
their line. The rules are then validated by pydantic models (unknown keys refused,
strict types: a quoted "300" is not a number, nor `true` a count). tomllib keeps no
positions, so the line of a semantic error comes from a scan of the text for the
`[[model]]` headers and the `key =` lines inside each. A line that looks like one
but lies inside a multi-line string is told apart by tomllib itself: the text
before a real header or key line is a complete document, the text before a line
inside a string is not. When the scan cannot match the parsed tables one to one
(rules written as an inline array, `model = [{...}]`), the error names the line of
`model =` instead. Any error refuses the whole file.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from service.ingest.records import MAX_TOKENS, MAX_TTL_S

#: The TOML array of tables that holds the rules.
RULES_KEY = "model"

#: The highest price a rule may give, in dollars per million tokens: a cent a token,
#: over 60 times the dearest input price listed today ($150, o1-pro). A price above
#: it is a unit mistake (per token, per thousand) or a placeholder (1e308), and the
#: costs it multiplies would leave the range where sums of dollars are meaningful.
MAX_USD_PER_MTOK = 10_000.0

Price = Annotated[float, Field(ge=0, le=MAX_USD_PER_MTOK, allow_inf_nan=False)]


class ModelsFileError(ValueError):
    """A models file that cannot be applied. The message names the file and, when
    one is to blame, the line (`path, line N: ...`); `line` is that line."""

    def __init__(self, path: Path, line: int | None, problems: Sequence[str]) -> None:
        where = f"{path}, line {line}" if line is not None else str(path)
        super().__init__(f"{where}: " + "\n".join(problems))
        self.path = path
        self.line = line


@dataclass(frozen=True)
class Rule:
    """One `[[model]]` table, as written (absent prices: None; absent TTL: never
    expires; absent minimum: 0)."""

    match: str
    provider: str | None
    ttl_s: float | None
    min_prompt_tokens: int
    input_usd_per_mtok: float | None
    cached_usd_per_mtok: float | None
    write_usd_per_mtok: float | None
    #: "models.toml line 12": the file and the line of the rule's `[[model]]` header.
    source: str
    #: The write price of a one-hour cache (Anthropic's 2x); None: the price
    #: source's, else the write price.
    write_1h_usd_per_mtok: float | None = None


class _RuleIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    match: Annotated[str, Field(min_length=1, max_length=200)]
    provider: Annotated[str, Field(min_length=1, max_length=50)] | None = None
    # A TTL as long as a record may ask for (records.MAX_TTL_S, 30 days); a minimum
    # of at most the most tokens a record may count (records.MAX_TOKENS).
    ttl_s: Annotated[float, Field(gt=0, le=MAX_TTL_S, allow_inf_nan=False)] | None = None
    min_prompt_tokens: Annotated[int, Field(ge=0, le=MAX_TOKENS)] = 0
    input_usd_per_mtok: Price | None = None
    cached_usd_per_mtok: Price | None = None
    write_usd_per_mtok: Price | None = None
    write_1h_usd_per_mtok: Price | None = None

    @field_validator("cached_usd_per_mtok")
    @classmethod
    def _cached_is_a_discount(cls, cached: float | None, info: ValidationInfo) -> float | None:
        """A cached token costs at most an uncached one: waste is priced as the miss
        price less the cached price (contract section 4a), which must not go negative."""
        inp = info.data.get("input_usd_per_mtok")
        if cached is not None and inp is not None and cached > inp:
            raise ValueError(f"the cached price must not exceed the input price ({inp})")
        return cached

    @field_validator("write_usd_per_mtok", "write_1h_usd_per_mtok")
    @classmethod
    def _write_costs_at_least_a_read(
        cls, write: float | None, info: ValidationInfo
    ) -> float | None:
        """A token written to the cache costs at least one read from it, for the same
        reason: a miss that writes is priced at the write price."""
        cached = info.data.get("cached_usd_per_mtok")
        if write is not None and cached is not None and write < cached:
            raise ValueError(f"the write price must not be below the cached price ({cached})")
        return write

    @field_validator("match")
    @classmethod
    def _a_glob(cls, pattern: str) -> str:
        problem = glob_problem(pattern)
        if problem:
            raise ValueError(problem)
        return pattern


class _FileIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    model: list[_RuleIn] = []


RULE_KEYS: tuple[str, ...] = tuple(_RuleIn.model_fields)


def glob_problem(pattern: str) -> str | None:
    """Why `pattern` is not a usable shell-style glob, or None. `fnmatch` accepts
    any string, reading an unclosed `[` as a literal; a rule that silently matches
    nothing is refused instead."""
    if any(ord(c) < 0x20 for c in pattern):
        return "a glob may not contain control characters"
    i = 0
    while i < len(pattern):
        if pattern[i] == "[":
            j = i + 1
            if j < len(pattern) and pattern[j] == "!":
                j += 1
            if j < len(pattern) and pattern[j] == "]":
                j += 1
            j = pattern.find("]", j)
            if j < 0:
                return f"unclosed `[` at position {i + 1} of the glob"
            i = j
        i += 1
    return None


def read_rules(path: Path) -> tuple[Rule, ...]:
    """The rules of the models file at `path`, in order. Raises ModelsFileError."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ModelsFileError(path, None, [f"cannot read the models file: {exc.strerror}"]) from exc
    text = _decode(path, raw)
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ModelsFileError(path, _syntax_error_line(str(exc), text), [str(exc)]) from exc
    try:
        parsed = _FileIn.model_validate(document)
    except ValidationError as exc:
        raise _semantic_error(path, text, document, exc) from exc
    locate = _Locator(text, len(parsed.model))
    return tuple(
        _rule(rule, f"{path.name} line {locate.table_line(i)}")
        for i, rule in enumerate(parsed.model)
    )


def _rule(rule: _RuleIn, source: str) -> Rule:
    return Rule(
        match=rule.match,
        provider=rule.provider,
        ttl_s=rule.ttl_s,
        min_prompt_tokens=rule.min_prompt_tokens,
        input_usd_per_mtok=rule.input_usd_per_mtok,
        cached_usd_per_mtok=rule.cached_usd_per_mtok,
        write_usd_per_mtok=rule.write_usd_per_mtok,
        source=source,
        write_1h_usd_per_mtok=rule.write_1h_usd_per_mtok,
    )


def _decode(path: Path, raw: bytes) -> str:
    """The file's text; a UTF-8 byte order mark (Windows editors write one) is not
    part of it: tomllib would refuse it, and line numbers do not count it."""
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ModelsFileError(path, line, ["not UTF-8 text"]) from exc


_AT_LINE = re.compile(r"at line (\d+)")


def _syntax_error_line(message: str, text: str) -> int:
    """tomllib writes the position into its message ("(at line 3, column 5)", or
    "(at end of document)"); Python 3.11 has no `lineno` attribute yet."""
    found = _AT_LINE.search(message)
    if found:
        return int(found.group(1))
    return max(1, text.count("\n") + (0 if text.endswith("\n") else 1))


def _semantic_error(
    path: Path, text: str, document: dict[str, Any], exc: ValidationError
) -> ModelsFileError:
    tables = document.get(RULES_KEY)
    locate = _Locator(text, len(tables) if isinstance(tables, list) else 0)
    found = sorted(
        ((locate.line_of(error["loc"]), _describe(error)) for error in exc.errors()),
        key=lambda item: item[0],
    )
    first = found[0][0]
    problems = [found[0][1]] + [f"line {line}: {what}" for line, what in found[1:]]
    return ModelsFileError(path, first, problems)


def _describe(error: Any) -> str:
    loc = error["loc"]
    key = str(loc[-1]) if loc and isinstance(loc[-1], str) else RULES_KEY
    where = "[[model]]" if len(loc) >= 2 and loc[0] == RULES_KEY else "the file"
    if error["type"] == "extra_forbidden":
        allowed = ", ".join(RULE_KEYS) if where == "[[model]]" else f"[[{RULES_KEY}]]"
        return f"unknown key `{key}` in {where} (allowed: {allowed})"
    if error["type"] == "missing":
        return f"{where} has no `{key}`"
    if error["type"] in ("list_type", "model_type") and key == RULES_KEY:
        return f"`{RULES_KEY}` must be tables: write each rule under a `[[{RULES_KEY}]]` header"
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"`{key}` = {error['input']!r} in {where}: {message}"


_HEADER = re.compile(r"""^\s*\[\[\s*(?:model|"model"|'model')\s*\]\]\s*(?:#.*)?$""")
_ANY_HEADER = re.compile(r"^\s*\[")
_KEY = re.compile(r"""^\s*(?:"([^"]+)"|'([^']+)'|([A-Za-z0-9_-]+))\s*=""")


class _Locator:
    """Lines of the parsed tables and keys, found by scanning the text."""

    def __init__(self, text: str, tables: int) -> None:
        self.lines = text.splitlines()
        headers = [n for n, line in enumerate(self.lines, 1) if _HEADER.match(line)]
        if len(headers) != tables:  # lookalikes inside strings? (a parse per candidate)
            headers = [n for n in headers if self._starts(n)]
        # Only trusted when it agrees with what tomllib parsed, table for table.
        self.headers = headers if len(headers) == tables else []

    def table_line(self, index: int) -> int:
        if index < len(self.headers):
            return self.headers[index]
        return self._top_level_line(RULES_KEY)

    def line_of(self, loc: tuple[int | str, ...]) -> int:
        if len(loc) >= 2 and loc[0] == RULES_KEY and isinstance(loc[1], int):
            table = self.table_line(loc[1])
            if len(loc) >= 3 and isinstance(loc[2], str) and loc[1] < len(self.headers):
                return self._key_line(table, loc[2]) or table
            return table
        return self._top_level_line(str(loc[0]) if loc else RULES_KEY)

    def _key_line(self, header: int, key: str) -> int | None:
        for n in range(header + 1, len(self.lines) + 1):
            line = self.lines[n - 1]
            if _ANY_HEADER.match(line) and self._starts(n):
                return None
            found = _KEY.match(line)
            if found and key in found.groups() and self._starts(n):
                return n
        return None

    def _starts(self, line: int) -> bool:
        """Whether `line` starts a statement: the text before it parses whole."""
        try:
            tomllib.loads("\n".join(self.lines[: line - 1]))
        except tomllib.TOMLDecodeError:
            return False
        return True

    def _top_level_line(self, key: str) -> int:
        quoted = rf"""(?:{re.escape(key)}|"{re.escape(key)}"|'{re.escape(key)}')"""
        pattern = re.compile(rf"^\s*(?:\[\[?\s*{quoted}\s*[\].]|{quoted}\s*[=.])")
        for n, line in enumerate(self.lines, 1):
            if pattern.match(line) and self._starts(n):
                return n
        return 1
