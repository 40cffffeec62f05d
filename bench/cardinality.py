"""Cost under cardinality and history (issue 32), every measure in one run.

Each part is its own module, runnable alone, exposing `run() -> list[str]`:

* `card_tenants`: the same records with 1, 1k, 10k and 100k distinct tenants and
  scenarios: pass time and peak RSS, and their ratios against the 1-tenant row; new
  tenants arriving every pass.
* `card_tags`: detection time at 20, 200 and 2,000 deploy tags of one service, and
  the ratio against 20.
* `card_late`: a pass over records on many distinct days, then one late record: its
  pass time against the first, and how long ingest waited meanwhile.
* `card_rejected`: a small gzip body of a million bad lines: time and what is kept.
* `card_steps`: the pass in steps of several sizes against one transaction, dense
  and sparse records: total time and the longest step.
* `card_stream`: a shuffled 6 h stream posted to a real server while its jobs run:
  the regressions against one pass's, and the posts' waits and 503s.

Numbers only compare within one run (the machine is shared and noisy).

    .venv/bin/python bench/cardinality.py [--only tenants,tags,late,rejected,steps,stream]
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PARTS = ("tenants", "tags", "late", "rejected", "steps", "stream")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(PARTS), help="comma-separated parts")
    args = parser.parse_args()
    for part in args.only.split(","):
        if part not in PARTS:
            parser.error(f"unknown part {part!r}; one of {', '.join(PARTS)}")
        started = time.perf_counter()
        print(f"== {part} ==", flush=True)
        module = importlib.import_module(f"card_{part}")
        for line in module.run():
            print(line, flush=True)
        print(f"({part}: {time.perf_counter() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
