"""`cachewatch import claude-code`'s reading cost per API call as a session grows:
one transcript of N calls (each turn ~2 KB of user text and ~2 KB of answer, as
tests/importers/transcripts.py writes them), read by `read_transcript`, against the
same with every call fingerprinted whole and its blocks salted one by one (the
baseline: what the importer did before `cachewatch_client.fingerprint.conversation`), in the
same run. The
baseline is skipped above --baseline-max calls (it grows with the square).

    .venv/bin/python bench/import_claude_code.py [--calls 100 300 1000]
"""

import argparse
import hashlib
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cachewatch_client.fingerprint import RecordFields, fingerprint
from service.importers import claude_code, threads
from tests.importers.transcripts import T0, Session


class _Whole:
    """The baseline, as the importer first did it: each call's messages
    fingerprinted whole, then every block hash salted with the thread's salt."""

    def __init__(self, salt: bytes = b"") -> None:
        self.salt = salt

    def fingerprint(self, messages: list[tuple[str, dict[str, Any]]]) -> RecordFields:
        fields = fingerprint({"messages": [m for _, m in messages]})
        salted = [
            hashlib.blake2b(self.salt + bytes.fromhex(h), digest_size=8).hexdigest()
            for h in fields["block_hashes"]
        ]
        return {**fields, "block_hashes": salted}


def transcript(calls: int) -> list[bytes]:
    s = Session("bench")
    at = T0
    for i in range(calls):
        s.user(at, f"turn {i} " + "q " * 1000)
        s.answer(at + 3, (10, 20_000 + 1_000 * i, 1_000), [{"type": "text", "text": "a " * 1000}])
        at += 30
    return s.text().splitlines(keepends=True)


def timed(lines: list[bytes]) -> float:
    start = time.perf_counter()
    out = claude_code.read_transcript(lines)
    assert len(out.records) and not out.problems
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, nargs="+", default=[100, 300, 1000])
    parser.add_argument("--baseline-max", type=int, default=300)
    args = parser.parse_args()
    print(f"{'calls':>6} {'MB':>6} {'ms/call':>8} {'whole ms/call':>14} {'ratio':>6}")
    for calls in args.calls:
        lines = transcript(calls)
        size = sum(map(len, lines)) / 1e6
        incremental = timed(lines)
        whole = None
        if calls <= args.baseline_max:
            with mock.patch.object(threads, "Conversation", _Whole):
                whole = timed(lines)
        per = incremental / calls * 1000
        base = "-" if whole is None else f"{whole / calls * 1000:.2f}"
        ratio = "-" if whole is None else f"{whole / incremental:.1f}x"
        print(f"{calls:>6} {size:>6.1f} {per:>8.2f} {base:>14} {ratio:>6}")


if __name__ == "__main__":
    main()
