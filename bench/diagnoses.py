"""The agreement of a simulated managed API's miss diagnoses with cachewatch's own
findings, at a larger size (not a test: prints the table and the time taken).

The simulation is tests/diagnoses/test_simulated_agreement.py's (its docstring
describes the traffic, the injected changes and the provider's diagnoses): here
`--sessions` conversations (default 3,000) over `--hours`, posted through the
real HTTP path (`POST /v1/usage` in process, NDJSON bodies of at most 5,000
records and 8 MiB) into a fresh migrated database, then one analytics pass
(`catch_up`), the diagnosis rollups summed (`diagnosis_counts`) and
`agreement`'s table printed, with where cachewatch differs (the provider's
reason, what the simulator injected on that turn, cachewatch's verdict), whether
each reason was counted as often as the simulator generated it, and the seconds
of each stage.

    .venv/bin/python bench/diagnoses.py [--sessions 3000] [--seed 1] [--hours 24]
        [--own-tools] [--database-url sqlite:///...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hours", type=float, default=24.0, help="over which sessions start")
    parser.add_argument(
        "--own-tools",
        action="store_true",
        help="each session its own tool list (default: one shared by every session)",
    )
    parser.add_argument(
        "--database-url", help="an empty database (default: a new SQLite file in a temp folder)"
    )
    args = parser.parse_args()

    from fastapi.testclient import TestClient

    from service import migrate
    from service.api.app import create_app
    from service.db import make_engine, make_sessionmaker
    from service.services.tokens import Scope, create_token
    from service.settings import Settings
    from tests.diagnoses.test_simulated_agreement import counted_exactly, report, run

    folder = tempfile.TemporaryDirectory(prefix="cw-diagnoses-")
    url = args.database_url or f"sqlite:///{folder.name}/diagnoses.db"
    settings = Settings(database_url=url, run_jobs=False)
    engine = make_engine(settings)
    migrate.upgrade(engine)
    factory = make_sessionmaker(engine)
    with factory.begin() as session:
        token = create_token(session, Scope.INGEST, "bench")
    headers = {"Authorization": f"Bearer {token}"}
    started = time.perf_counter()
    with TestClient(create_app(settings)) as client, factory.begin() as session:

        def post(body: bytes) -> Any:
            return client.post("/v1/usage", content=body, headers=headers)

        outcome = run(
            post, session, settings, args.sessions, args.seed, args.hours, not args.own_tools
        )
    seconds = time.perf_counter() - started
    engine.dispose()
    tools = "own tools per session" if args.own_tools else "tools shared by all sessions"
    print(f"seed {args.seed}, {args.sessions:,} sessions over {args.hours:g} h, {tools}, {url}")
    print(report(outcome))
    print(f"each reason counted as generated: {'yes' if counted_exactly(outcome) else 'NO'}")
    print(f"total {seconds:.1f} s")
    folder.cleanup()


if __name__ == "__main__":
    main()
