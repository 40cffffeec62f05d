"""service.diff_cli: `cachewatch diff A.json B.json`, standalone and mounted
in a parent Typer app."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from service import diff_cli as fingerprint_cli

ROOT = Path(__file__).resolve().parent.parent.parent
TOOLS = [{"type": "function", "function": {"name": f"t{i}", "parameters": {}}} for i in range(3)]


def body(system: str, *turns: str) -> dict[str, Any]:
    users = [{"role": "user", "content": t} for t in turns]
    return {
        "model": "gpt-4.1-mini",
        "tools": TOOLS,
        "messages": [{"role": "system", "content": system}, *users],
    }


def write(tmp_path: Path, name: str, value: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(value, indent=2))
    return path


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return {
        "a": write(tmp_path, "a.json", body("Now: 2026-01-05T10:31:07Z. Be brief.", "hi")),
        "b": write(tmp_path, "b.json", body("Now: 2026-01-05T10:32:44Z. Be brief.", "hi")),
        "longer": write(
            tmp_path, "longer.json", body("Now: 2026-01-05T10:31:07Z. Be brief.", "hi", "more")
        ),
        "list": write(tmp_path, "list.json", [1, 2]),
        "broken": tmp_path / "broken.json",
    }


def run_module(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.diff_cli", *map(str, args)],
        cwd=ROOT,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        capture_output=True,
        text=True,
        check=False,
    )


def test_standalone_diverging_requests_exit_1_with_the_explanation(
    files: dict[str, Path],
) -> None:
    done = run_module(files["a"], files["b"])
    assert done.returncode == 1, done.stderr
    assert "diverge in `system`" in done.stdout
    assert "hint (timestamp)" in done.stdout
    assert "10:31:07" in done.stdout and "10:32:44" in done.stdout


def test_standalone_shared_prefix_exits_0(files: dict[str, Path]) -> None:
    same = run_module(files["a"], files["a"])
    assert same.returncode == 0 and "identical prefix" in same.stdout
    extended = run_module(files["a"], files["longer"])
    assert extended.returncode == 0
    assert "B extends A" in extended.stdout


def test_standalone_bad_input_exits_2(files: dict[str, Path]) -> None:
    files["broken"].write_text("{not json")
    for bad in ("broken", "list"):
        done = run_module(files["a"], files[bad])
        assert done.returncode == 2, done.stdout
        assert done.stdout == ""


def mounted() -> typer.Typer:
    """The way `cachewatch` registers it: a sub-app named `diff`."""
    parent = typer.Typer()

    @parent.command()
    def other() -> None:
        """Another command, so that `diff` is a real subcommand."""

    parent.add_typer(fingerprint_cli.app, name="diff")
    return parent


def test_mounted_as_a_subcommand_with_options_anywhere(files: dict[str, Path]) -> None:
    runner = CliRunner()
    for args in (
        ["diff", str(files["a"]), str(files["b"]), "--json"],
        ["diff", "--json", str(files["a"]), str(files["b"])],
    ):
        result = runner.invoke(mounted(), args)
        assert result.exit_code == 1, result.output
        out = json.loads(result.stdout)
        assert out["diverged"] is True
        assert (out["part"], out["hint"]["code"]) == ("system", "timestamp")
        assert out["path"] == "system[0].content[0].text"
    same = runner.invoke(mounted(), ["diff", str(files["a"]), str(files["longer"]), "--json"])
    assert same.exit_code == 0
    assert json.loads(same.stdout)["diverged"] is False


def test_the_function_can_be_registered_as_a_command(files: dict[str, Path]) -> None:
    parent = typer.Typer()
    parent.command("diff")(fingerprint_cli.diff)

    @parent.command()
    def other() -> None:
        """Another command."""

    result = CliRunner().invoke(parent, ["diff", str(files["a"]), str(files["b"])])
    assert result.exit_code == 1
    assert "hint (timestamp)" in result.stdout


def test_reads_a_request_from_standard_input(files: dict[str, Path]) -> None:
    result = CliRunner().invoke(
        fingerprint_cli.app, ["-", str(files["b"])], input=files["a"].read_text()
    )
    assert result.exit_code == 1
    assert "hint (timestamp)" in result.stdout


def test_standalone_rendering_only_exits_1_and_says_so(tmp_path: Path) -> None:
    """One trailing newline against two: the cache still misses (exit 1), and the
    output says it is the same prompt rendered two ways."""
    a = write(tmp_path, "one.json", body("You are terse.\n", "hi"))
    b = write(tmp_path, "two.json", body("You are terse.\n\n", "hi"))
    done = run_module(a, b)
    assert done.returncode == fingerprint_cli.EXIT_DIVERGED == 1, done.stderr
    assert (
        "`system` differs only in rendering (whitespace and newlines): the same prompt "
        "rendered two ways"
    ) in done.stdout
    assert "render it through one code path" in done.stdout
    assert "hint (whitespace)" in done.stdout
    as_json = run_module(a, b, "--json")
    assert as_json.returncode == 1
    out = json.loads(as_json.stdout)
    assert (out["diverged"], out["part"], out["rendering"]) == (True, "system", ["whitespace"])
    assert "differs only in rendering" in out["message"]


def test_standalone_image_detail_and_signed_url_are_named(tmp_path: Path) -> None:
    def ask(url: str, detail: str) -> dict[str, Any]:
        image = {"type": "image_url", "image_url": {"url": url, "detail": detail}}
        return {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": [image]}]}

    a = write(tmp_path, "a.json", ask("https://cdn.example.com/a.png?sig=1", "low"))
    b = write(tmp_path, "b.json", ask("https://cdn.example.com/a.png?sig=2", "high"))
    done = run_module(a, b)
    assert done.returncode == 1, done.stderr
    assert (
        "`message[0]` differs only in rendering (image `detail`, URL query string)"
    ) in done.stdout


def test_a_difference_of_content_is_not_called_rendering(files: dict[str, Path]) -> None:
    done = run_module(files["a"], files["b"], "--json")
    assert done.returncode == 1
    out = json.loads(done.stdout)
    assert out["rendering"] is None
    assert "only in rendering" not in out["message"]
