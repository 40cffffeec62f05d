"""The current KV budget, told by a `config` event's description (read by the
dashboard's capacity figure and the eviction finding).

Format (documented in docs/dashboard.md): the description mentions the KV cache
("kv", "cache" or "budget", any case) and gives the budget as a number followed by
the word `tokens`: `KV cache budget per replica 4194304 tokens`. The number may use
`,` or `_` as thousands separators and a suffix: `k`/`M`/`G` (x1000) or
`Ki`/`Mi`/`Gi` (x1024). When the description tells a change with `->` (or `→`),
the value after the last arrow is the current one:
`KV cache budget per replica 9728 tokens -> 4194304 tokens` gives 4194304."""

import re

_TOPIC = re.compile(r"kv|cache|budget", re.IGNORECASE)
_AMOUNT = re.compile(
    r"(\d(?:[\d,_]*\d)?(?:\.\d+)?)\s*(Ki|Mi|Gi|k|K|M|G)?\s*tokens\b", re.IGNORECASE
)
_FACTOR = {
    None: 1,
    "k": 1000,
    "m": 1000**2,
    "g": 1000**3,
    "ki": 1024,
    "mi": 1024**2,
    "gi": 1024**3,
}
_MAX_TOKENS = 2**50


def parse_budget(description: str | None) -> int | None:
    """The budget in tokens, or None when the description tells none."""
    if not description or not _TOPIC.search(description):
        return None
    tail = re.split(r"->|→", description)[-1]
    amounts = _AMOUNT.findall(tail)
    if not amounts:
        return None
    number, suffix = amounts[-1]
    try:
        value = float(number.replace(",", "").replace("_", ""))
    except ValueError:
        return None
    tokens = round(value * _FACTOR[suffix.lower() if suffix else None])
    return tokens if 0 < tokens <= _MAX_TOKENS else None
