"""`python -m service.lab`: run the lab (`make lab` installs it first)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from service.lab import report
from service.lab.engines import LabPaths, ReplicaConfig
from service.lab.phases import PHASES, scaled
from service.lab.run import Settings, run

app = typer.Typer(add_completion=False, help=__doc__)


@app.command()
def main(
    lab_dir: Annotated[Path, typer.Option(help="Where lab/install.sh installed.")] = Path(".lab"),
    scale: Annotated[float, typer.Option(help="Every phase this many times as long.")] = 1.0,
    users: Annotated[int, typer.Option(help="Concurrent assistant sessions.")] = 3,
    turns: Annotated[int, typer.Option(help="Turns per session.")] = 6,
    fanout: Annotated[int, typer.Option(help="Identical requests per fan-out batch.")] = 6,
    parallel: Annotated[int, typer.Option(help="llama-server --parallel (slots).")] = 2,
    seed: Annotated[int, typer.Option(help="The traffic's seed.")] = 7,
) -> None:
    """Run every phase, print what cachewatch found against what it should, and save
    the results and the records under LAB_DIR/results/<run>/."""
    settings = Settings(
        phases=scaled(PHASES, scale),
        seed=seed,
        users=users,
        turns=turns,
        fanout_size=fanout,
        replica=ReplicaConfig(parallel=parallel),
    )
    results = run(LabPaths(lab_dir.resolve()), settings)
    typer.echo(report.render(results))
    typer.echo(json.dumps({"wall_s": results["run"]["wall_s"]}))
    if not all(c["ok"] for c in results["checks"]):
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
