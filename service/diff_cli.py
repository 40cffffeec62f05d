"""`cachewatch diff A.json B.json`: where two request bodies stop sharing a prefix.

`app` is a Typer app whose callback is the command, so that it works both mounted,
`parent.add_typer(app, name="diff")` giving `cachewatch diff A.json B.json`, and on
its own, `python -m service.diff_cli A.json B.json`. (A one-command Typer
app would need `cachewatch diff diff` once mounted.) `diff` itself can also be
registered directly: `parent.command("diff")(diff)`.

Exit codes: 0 when the requests share their whole common length (identical, or one
extends the other), 1 when they diverge, 2 when a file cannot be read as a request.
Requests whose first differing part differs only in rendering (the same `norm_hash`:
whitespace, JSON key order, image `detail`, a URL's query) exit 1 too: the output
says so, but the provider sees other tokens and the cache misses all the same. With
`--json`, `rendering` then lists the kinds (null when the part differs in content).
"""

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from cachewatch_client.fingerprint import explain_divergence, fingerprint

EXIT_SAME_PREFIX = 0
EXIT_DIVERGED = 1
EXIT_BAD_INPUT = 2

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def _load(path: Path) -> dict[str, Any]:
    """A request body from a JSON file (`-`: standard input)."""
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
        body = json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise typer.BadParameter(f"cannot read {path} as JSON: {error}") from error
    if not isinstance(body, dict):
        raise typer.BadParameter(f"{path} holds a JSON {type(body).__name__}, not a request body")
    return body


def _same_prefix_message(a: dict[str, Any], b: dict[str, Any]) -> str:
    """What to say when nothing diverges: which request, if any, extends the other."""
    parts_a, parts_b = fingerprint(a)["segments"], fingerprint(b)["segments"]
    tokens = sum(s["tokens"] for s in parts_a[: min(len(parts_a), len(parts_b))])
    if len(parts_a) == len(parts_b):
        return f"identical prefix: A and B render the same {len(parts_a)} parts (~{tokens} tokens)"
    longer, shorter = ("B", "A") if len(parts_b) > len(parts_a) else ("A", "B")
    return (
        f"identical prefix: {longer} extends {shorter} (its first "
        f"{min(len(parts_a), len(parts_b))} parts, ~{tokens} tokens, are {shorter}'s)"
    )


@app.callback(
    invoke_without_command=True,
    context_settings={"allow_interspersed_args": True},
    subcommand_metavar="",
)
def diff(
    a: Annotated[Path, typer.Argument(help="The first request body (JSON file, - for stdin).")],
    b: Annotated[Path, typer.Argument(help="The second request body (JSON file).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Where two chat request bodies (OpenAI or Anthropic form) stop sharing a prefix,
    what differs there, whether it differs only in rendering, and the known
    anti-pattern it looks like. Exit code 0: the prefix is shared (identical, or one
    extends the other); 1: they diverge (also when only in rendering)."""
    try:
        body_a, body_b = _load(a), _load(b)
        found = explain_divergence(body_a, body_b)
    except (TypeError, ValueError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from error
    message = _same_prefix_message(body_a, body_b) if found is None else str(found)
    if as_json:
        result = {"diverged": found is not None, "message": message}
        typer.echo(json.dumps({**result, **(found.to_dict() if found else {})}, ensure_ascii=False))
    else:
        typer.echo(message)
    raise typer.Exit(EXIT_SAME_PREFIX if found is None else EXIT_DIVERGED)


if __name__ == "__main__":
    app(prog_name="cachewatch diff")
