"""The agreement of the providers' diagnoses with cachewatch's verdicts, from the
diagnosis rollups summed over a range (`repository.diagnoses.diagnosis_counts`):
per provider reason, how many requests it named, how many of them cachewatch put
under the same cause and segment (`reasons.EXPECTED`), and what cachewatch found
for the others; then the evidence lines a regression or a finding shows, and the
table a bench prints. Pure: frames in, dataclasses and text out.

Only the reasons cachewatch compares count in the overall figure; those about
options it does not fingerprint, those naming no reason (`unavailable`, ...) and
reasons it does not know yet are listed with their counts, never counted."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from service.diagnoses.reasons import (
    EXPECTED,
    HISTORY_REWRITE,
    NOTHING_LOST,
    PREFIX_CHANGED,
    SEGMENT_JOIN,
    reason_kind,
)


@dataclass(frozen=True)
class Found:
    """What cachewatch found for some of a reason's requests."""

    label: str
    requests: int
    agrees: bool


@dataclass(frozen=True)
class ReasonRow:
    reason: str
    kind: str  # reasons.reason_kind
    requests: int
    missed_tokens: int
    agreed: int
    found: tuple[Found, ...]  # most requests first

    @property
    def share(self) -> float | None:
        return self.agreed / self.requests if self.kind == "compared" and self.requests else None


@dataclass(frozen=True)
class Agreement:
    rows: tuple[ReasonRow, ...]  # compared reasons first, then by requests

    @property
    def compared(self) -> int:
        return sum(r.requests for r in self.rows if r.kind == "compared")

    @property
    def agreed(self) -> int:
        return sum(r.agreed for r in self.rows if r.kind == "compared")

    @property
    def share(self) -> float | None:
        return self.agreed / self.compared if self.compared else None


def label(verdict: str, segment: str) -> str:
    """cachewatch's finding for a request, in words: `prefix_instability in
    \\`system\\``, `expiry`, ..."""
    where = " or ".join(f"`{s}`" for s in segment.split(SEGMENT_JOIN)) if segment else ""
    if verdict in (PREFIX_CHANGED, HISTORY_REWRITE) and where:
        return f"{verdict} in {where}"
    if verdict == NOTHING_LOST:
        return "no change before the new messages"
    return verdict


def agreement(counts: pl.DataFrame) -> Agreement:
    """The agreement of `counts` (rows of `diagnosis_counts`, any services)."""
    per: dict[str, dict[str, list[int]]] = {}
    missed: dict[str, int] = {}
    agreed: dict[str, int] = {}
    for row in counts.iter_rows(named=True):
        reason, n = row["reason"], int(row["requests"])
        expected = EXPECTED.get(reason)
        agrees = expected is not None and expected.agrees(row["verdict"], row["segment"])
        tally = per.setdefault(reason, {}).setdefault(label(row["verdict"], row["segment"]), [0, 0])
        tally[0] += n
        tally[1] += n if agrees else 0
        missed[reason] = missed.get(reason, 0) + int(row["missed_tokens"])
        agreed[reason] = agreed.get(reason, 0) + (n if agrees else 0)
    rows = []
    for reason, found in per.items():
        items = tuple(
            Found(text, total, bool(ok))
            for text, (total, ok) in sorted(found.items(), key=lambda kv: (-kv[1][0], kv[0]))
        )
        rows.append(
            ReasonRow(
                reason,
                reason_kind(reason),
                sum(f.requests for f in items),
                missed[reason],
                agreed[reason],
                items,
            )
        )
    rows.sort(key=lambda r: (r.kind != "compared", -r.requests, r.reason))
    return Agreement(tuple(rows))


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else "n/a"


def _tokens(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1_000_000 else f"{n:,}"


def evidence_lines(result: Agreement, where: str, limit: int = 3) -> list[str]:
    """The provider's diagnoses beside cachewatch's, for a regression's or a
    finding's evidence; `where` says which requests ("after the change")."""
    if not result.rows:
        return []
    lines = []
    if result.compared:
        lines.append(
            f"provider diagnoses {where}: it named a reason for {result.compared:,} requests; "
            f"cachewatch put {result.agreed:,} of them ({_share(result.agreed, result.compared)}) "
            "under the same cause and segment"
        )
    for row in [r for r in result.rows if r.kind == "compared"][:limit]:
        agree = [f for f in row.found if f.agrees]
        differ = [f for f in row.found if not f.agrees]
        said = f"provider said `{row.reason}` on {row.requests:,} requests"
        if row.missed_tokens:
            said += f" ({_tokens(row.missed_tokens)} tokens missed by its estimate)"
        parts = [said]
        if agree:
            parts.append(f"cachewatch agrees on {row.agreed:,}: {agree[0].label}")
        if differ:
            shown = ", ".join(f"{f.label} {f.requests:,}" for f in differ[:3])
            parts.append(f"where they differ cachewatch found {shown}")
        lines.append("; ".join(parts))
    others = [r for r in result.rows if r.kind != "compared"]
    if others:
        listed = ", ".join(f"`{r.reason}` {r.requests:,}" for r in others[:5])
        lines.append(
            f"provider diagnoses {where} not compared (no reason named, or one about "
            f"options cachewatch does not see): {listed}"
        )
    return lines


def table_text(result: Agreement) -> str:
    """The agreement as a fixed-width table (a bench prints it)."""
    head = f"{'provider reason':<28}{'kind':<16}{'requests':>10}{'agreed':>9}{'share':>8}"
    lines = [f"{head}  cachewatch found"]
    for row in result.rows:
        share = "" if row.share is None else f"{row.share:.0%}"
        found = "; ".join(
            f"{f.label} {f.requests}{'' if f.agrees or row.kind != 'compared' else ' (differs)'}"
            for f in row.found
        )
        lines.append(
            f"{row.reason:<28}{row.kind:<16}{row.requests:>10,}{row.agreed:>9,}{share:>8}  {found}"
        )
    total = "" if result.share is None else f"{result.share:.0%}"
    lines.append(
        f"{'compared, all reasons':<44}{result.compared:>10,}{result.agreed:>9,}{total:>8}"
    )
    return "\n".join(lines)
