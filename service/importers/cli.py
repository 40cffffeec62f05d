"""`cachewatch import claude-code DIR`: Claude Code's transcripts (no network to
read them) as usage records, posted to a cachewatch server or written as NDJSON.

Every `*.jsonl` file under DIR is one session (or one subagent's thread), read
whole (a call's messages are the lines before it) by
`service.importers.claude_code`. Posting is resumable: a state file remembers, per
file, its size, its modification time and how many of its records were posted;
a file unchanged since is skipped, a grown one posts only its new records, and
the server's deduplication by `request_id` makes a run cut short safe to repeat.
Every line that cannot be read is named on stderr with its file, line and
reason."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import httpx
import orjson
import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from service.importers.claude_code import SERVICE, Transcript, read_transcript
from service.simulate.output import PostError, PostStats, post_records, write_ndjson

app = typer.Typer(help="Import usage from other tools' files.", no_args_is_help=True)


@dataclass
class _Totals:
    files: int = 0
    unchanged: int = 0
    records: int = 0
    problems: int = 0
    busted_starts: int = 0


def default_state_path() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "cachewatch" / "claude-code-import.json"


def transcript_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.jsonl") if p.is_file())


class State:
    """Per file: its size, its mtime and how many of its records were posted."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.files: dict[str, dict[str, int]] = {}
        if path is not None and path.exists():
            loaded = orjson.loads(path.read_bytes())
            self.files = loaded if isinstance(loaded, dict) else {}

    def posted(self, file: Path) -> tuple[bool, int]:
        """(unchanged since it was posted whole, records posted before)."""
        held = self.files.get(str(file.resolve()))
        if held is None:
            return False, 0
        stat = file.stat()
        if stat.st_size < held.get("size", 0):  # rewritten: start again
            return False, 0
        same = stat.st_size == held.get("size") and stat.st_mtime_ns == held.get("mtime_ns")
        return same, int(held.get("posted", 0))

    def mark(self, file: Path, posted: int) -> None:
        stat = file.stat()
        key = str(file.resolve())
        self.files[key] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "posted": posted}
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial = self.path.with_suffix(".tmp")
            partial.write_bytes(orjson.dumps(self.files))
            partial.replace(self.path)


def _read(file: Path, service: str) -> Transcript:
    with file.open("rb") as handle:
        return read_transcript(handle, service=service)


def _report_problems(file: Path, transcript: Transcript) -> None:
    for problem in transcript.problems:
        typer.echo(f"{file}:{problem.line}: cannot read: {problem.reason}", err=True)


def _progress(enabled: bool) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        disable=not enabled,
        transient=True,
    )


@app.command("claude-code")
def claude_code(
    folder: Annotated[
        Path,
        typer.Argument(
            exists=True, file_okay=False, help="Transcripts, e.g. ~/.claude/projects (read whole)."
        ),
    ],
    url: Annotated[
        str | None,
        typer.Option(envvar="CACHEWATCH_URL", help="Post to this cachewatch server."),
    ] = None,
    token: Annotated[
        str | None, typer.Option(envvar="CACHEWATCH_TOKEN", help="An ingest token.")
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write NDJSON here instead ('-': stdout).")
    ] = None,
    service: Annotated[str, typer.Option(help="The records' service.")] = SERVICE,
    state: Annotated[
        Path | None,
        typer.Option(help="The resume state file [default: $XDG_STATE_HOME/cachewatch/...]."),
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar on stderr.")] = True,
) -> None:
    """Claude Code's session transcripts as usage records: one record per API call
    (deduplicated by message id), fingerprinted from the messages it can see."""
    if (output is None) == (url is None):
        raise typer.BadParameter("give either --url (with --token) or --output")
    if url is not None and not token:
        raise typer.BadParameter("--url needs --token (or CACHEWATCH_TOKEN): an ingest token")
    files = transcript_files(folder)
    totals = _Totals(files=len(files))
    if output is not None:
        _write(files, output, service, totals, progress)
    else:
        assert url is not None and token is not None
        resume = State(state or default_state_path())
        stats = _post(files, url, token, resume, service, totals, progress)
        typer.echo(
            f"posted {stats.records:,} records: {stats.accepted:,} accepted, "
            f"{stats.duplicates:,} duplicates, {stats.rejected:,} rejected",
            err=True,
        )
    typer.echo(_summary(totals), err=True)


def _summary(totals: _Totals) -> str:
    return (
        f"{totals.files:,} files ({totals.unchanged:,} unchanged since the last run), "
        f"{totals.records:,} API calls, {totals.busted_starts:,} whose start (system "
        f"prompt or tools) changed within the cache TTL, {totals.problems:,} lines "
        "not read"
    )


def _write(files: list[Path], output: Path, service: str, totals: _Totals, bar: bool) -> None:
    def records() -> Any:
        with _progress(bar) as shown:
            task = shown.add_task("reading", total=sum(f.stat().st_size for f in files))
            for file in files:
                transcript = _read(file, service)
                _count(totals, transcript, len(transcript.records))
                _report_problems(file, transcript)
                yield from transcript.records
                shown.advance(task, file.stat().st_size)

    if str(output) == "-":
        write_ndjson(records(), sys.stdout.buffer)
    else:
        write_ndjson(records(), output)


def _post(
    files: list[Path], url: str, token: str, state: State, service: str, totals: _Totals, bar: bool
) -> PostStats:
    done = PostStats()
    with _progress(bar) as shown, httpx.Client(timeout=60.0) as client:
        task = shown.add_task("importing", total=sum(f.stat().st_size for f in files))
        for file in files:
            unchanged, posted = state.posted(file)
            if unchanged:
                totals.unchanged += 1
            else:
                transcript = _read(file, service)
                _report_problems(file, transcript)
                fresh = transcript.records[posted:]
                _count(totals, transcript, len(fresh))
                if fresh:
                    done.add(_post_file(client, url, token, fresh, file))
                state.mark(file, len(transcript.records))
            shown.advance(task, file.stat().st_size)
    return done


def _post_file(
    client: httpx.Client, url: str, token: str, records: list[dict[str, Any]], file: Path
) -> PostStats:
    """One file's new records, on the run's one connection pool."""
    try:
        return post_records(url, token, records, client=client)
    except PostError as exc:
        typer.echo(f"{file}: not posted: {exc} (run again to resume)", err=True)
        raise typer.Exit(1) from None


def _count(totals: _Totals, transcript: Transcript, records: int) -> None:
    totals.records += records
    totals.problems += len(transcript.problems)
    totals.busted_starts += transcript.busted_starts
