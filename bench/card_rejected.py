"""Rejected records under a flood (issue 32): a 2,945-byte gzip body of 1,000,000
`{}` lines, each a rejected record, ingested on a fresh migrated SQLite file; and
an OTLP protobuf of 100,000 GenAI spans (500,000 in the issue; the cost is linear)
that are all invalid (no model, a token count given as text).

Measured twice, each on its own database: keeping every rejected record (the
storage of before the cap: limits too large to bind; the time is not the old
code's, which also validated every repeated line again: 70 s for the million
lines on this machine, against 49 s here) and with the settings' defaults
(`rejected_sample_per_reason`, `rejected_reasons_per_body`,
`rejected_rows_per_minute`). Printed: the time from the body to the commit, the
database's growth, the rows kept, and the answer's count (exact either way).
An OTLP body's time is mostly the mapping of its spans (each one's source is
written out as JSON, to be kept if it is rejected), which the cap does not change.
`run()` gives the lines; bench/cardinality.py prints them with its own.

    .venv/bin/python bench/card_rejected.py [--lines 1000000] [--spans 100000]
"""

import argparse
import gzip
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from sqlalchemy import func, select
from sqlalchemy.orm import Session

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from service import migrate  # noqa: E402
from service.db import make_engine, make_sessionmaker  # noqa: E402
from service.models import RejectedRecord  # noqa: E402
from service.services.ingestion import IngestOutcome, ingest_usage  # noqa: E402
from service.services.otlp import ingest_otlp  # noqa: E402
from service.services.rejected import DEFAULT_LIMITS, RejectedLimits  # noqa: E402
from service.settings import Settings  # noqa: E402

LINES = 1_000_000
SPANS = 100_000
_KEEP_ALL = RejectedLimits(sample_per_reason=10**9, reasons_per_body=10**9, rows_per_minute=10**9)


def flood_body(lines: int) -> bytes:
    """`lines` lines of `{}`, gzipped (2,945 bytes for a million)."""
    return gzip.compress(b"{}\n" * lines, compresslevel=9)


def otlp_flood_body(spans: int) -> bytes:
    """An ExportTraceServiceRequest of `spans` copies of one GenAI span with a token
    count given as text and no model, gzipped: every span a rejected record."""
    attribute = KeyValue(key="gen_ai.usage.input_tokens", value=AnyValue(string_value="x"))
    span = Span(trace_id=b"\1" * 16, span_id=b"\2" * 8, name="chat", attributes=[attribute])
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span] * spans)])]
    )
    return gzip.compress(request.SerializeToString(), compresslevel=9)


def _ingest_usage(session: Session, body: bytes, limits: RejectedLimits) -> IngestOutcome:
    return ingest_usage(
        session,
        body,
        content_encoding="gzip",
        max_decompressed_bytes=64 << 20,
        received_us=time.time_ns() // 1000,
        rejected_limits=limits,
    )


def _ingest_otlp(session: Session, body: bytes, limits: RejectedLimits) -> IngestOutcome:
    return ingest_otlp(
        session,
        body,
        signal="traces",
        encoding="protobuf",
        content_encoding="gzip",
        max_decompressed_bytes=64 << 20,
        received_us=time.time_ns() // 1000,
        rejected_limits=limits,
    )


Ingest = Callable[[Session, bytes, RejectedLimits], IngestOutcome]


def _checkpointed_bytes(folder: Path) -> int:
    """The database's size once its WAL is written back: what the data takes."""
    with sqlite3.connect(folder / "db.sqlite") as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(f.stat().st_size for f in folder.iterdir() if f.name.startswith("db.sqlite"))


def measure(ingest: Ingest, body: bytes, limits: RejectedLimits) -> tuple[float, int, int, int]:
    """Seconds from the body to its commit, database growth in bytes, rows kept,
    and the answer's `rejected`."""
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        engine = make_engine(Settings(database_url=f"sqlite:///{folder}/db.sqlite"))
        migrate.upgrade(engine)
        factory = make_sessionmaker(engine)
        before = _checkpointed_bytes(folder)
        start = time.perf_counter()
        with factory.begin() as session:
            outcome = ingest(session, body, limits)
        seconds = time.perf_counter() - start
        with factory() as session:
            kept = session.scalar(select(func.count()).select_from(RejectedRecord)) or 0
        engine.dispose()
        grown = _checkpointed_bytes(folder) - before
    return seconds, grown, kept, outcome.rejected


def run(lines: int = LINES, spans: int = SPANS) -> list[str]:
    """The lines to print: each flood kept whole (as before) and bounded (defaults)."""
    floods: list[tuple[str, Ingest, bytes]] = [
        (f"{lines:,} `{{}}` lines", _ingest_usage, flood_body(lines)),
        (f"OTLP, {spans:,} bad spans", _ingest_otlp, otlp_flood_body(spans)),
    ]
    out = ["rejected floods (SQLite; time from the body to its commit, database growth)"]
    for name, ingest, body in floods:
        out.append(f"  {name}: gzip body of {len(body):,} bytes")
        results = []
        for label, limits in (("every row kept (as before)", _KEEP_ALL),
                              ("bounded (defaults)", DEFAULT_LIMITS)):  # fmt: skip
            seconds, grown, kept, rejected = measure(ingest, body, limits)
            results.append((seconds, grown))
            out.append(
                f"    {label:<26} {seconds:7.2f} s  +{grown / 2**10:10,.0f} KiB  "
                f"{kept:>9,} rows kept  answer rejected={rejected:,}"
            )
        (t0, g0), (t1, g1) = results
        out.append(f"    ratio bounded/before: time {t1 / t0:.2f}x, growth {g1 / max(g0, 1):.5f}x")
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=LINES)
    parser.add_argument("--spans", type=int, default=SPANS)
    arguments = parser.parse_args()
    for printed in run(arguments.lines, arguments.spans):
        print(printed)
