"""A delivery worker for the concurrency tests. Prints `ready` once imported and
connected, waits for a line on stdin (so that workers start together, whatever their
import times), then runs the alerts job back to back (as `cachewatch worker` does on
its interval, only tighter) until nothing is left to deliver, and prints its totals
as JSON.

    python -m tests.alerts.worker_loop DEADLINE_S"""

import json
import sys
import time

from sqlalchemy import func, select

from service.alerts.delivery import deliver_due
from service.db import make_engine, make_sessionmaker
from service.models import Alert
from service.settings import Settings


def main(deadline_s: float) -> None:
    settings = Settings()
    engine = make_engine(settings)
    factory = make_sessionmaker(engine)
    with engine.connect():
        pass
    totals = {"messages": 0, "sent": 0, "retried": 0, "failed": 0}
    print("ready", flush=True)
    sys.stdin.readline()
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        report = deliver_due(factory, settings)
        for name in totals:
            totals[name] += getattr(report, name)
        with factory() as session:
            left = session.scalar(
                select(func.count())
                .select_from(Alert)
                .where(Alert.state.not_in(["sent", "failed"]))
            )
        if not left:
            break
        time.sleep(0.02)
    engine.dispose()
    print(json.dumps(totals))


if __name__ == "__main__":
    main(float(sys.argv[1]))
