"""``vllm bench serve --save-result`` files as imported runs (harness/formats/imported.py).

The file is one flat JSON object: the run's arguments (``model_id``, ``num_prompts``,
``request_rate`` — a number or the string ``"inf"`` —, ``max_concurrency``, ``date`` in local
time without a zone), its totals and throughputs, and ``<mean|median|std|pNN>_<metric>_ms`` for
each of ``--percentile-metrics`` (default ttft, tpot, itl). With ``--save-detailed`` it also keeps
one entry per request, in request order, failed ones included: ``input_lens``, ``output_lens``,
``ttfts`` (s), ``itls`` (s, a list of chunk gaps per request), ``generated_texts``, ``errors``
(``""`` on success); later versions add ``latencies``, ``start_times`` (``perf_counter``) and
``queue_times``. ``--append-result`` appends objects one a line (JSON Lines): each is a run.

The file never names vLLM's version: give it (``--tool-version``), or it stays unknown.
What vLLM calls ITL is the gap between chunks (the harness's ITL per chunk), and its TTFT
counts a role-only first chunk (harness/formats/definitions.py).
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from harness.formats.definitions import VLLM_BENCH
from harness.formats.imported import ImportedRun, empty_row, finish_row, stats_seconds

FORMAT = "vllm bench serve --save-result JSON"
# <stat>_<metric>_ms: mean, median, std, and p<P> with P as --metric-percentiles wrote it (99, 99.9)
_STAT_KEY = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")
_TOOL_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL"}
_CONCEPTS = {"ttft": "ttft_s", "tpot": "tpot_s", "itl": "itl_chunk_s", "e2el": "e2e_s"}
_PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors")


def looks_like(data: Any) -> bool:
    """Whether a parsed JSON value is a vllm bench serve result object."""
    return isinstance(data, dict) and "num_prompts" in data and "request_throughput" in data and "duration" in data


def read(path: Path, tool_version: Optional[str] = None) -> list[ImportedRun]:
    """The runs of a result file (one; several for ``--append-result`` JSON Lines)."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        objects = [json.loads(text)]
    except json.JSONDecodeError:
        objects = [json.loads(line) for line in text.splitlines() if line.strip()]
    runs = []
    for i, data in enumerate(objects):
        if not looks_like(data):
            raise ValueError(f"{path}: object {i + 1} is not a vllm bench serve result")
        run = from_result(data, Path(path), tool_version)
        if len(objects) > 1:
            run.label = f"result {i + 1}"
        runs.append(run)
    return runs


def from_result(data: dict[str, Any], path: Path, tool_version: Optional[str]) -> ImportedRun:
    rate = data.get("request_rate")
    rate = None if rate in (None, "inf") or (isinstance(rate, float) and math.isinf(rate)) else float(rate)
    completed = int(data.get("completed") or 0)
    sent = int(data.get("num_prompts") or completed + int(data.get("failed") or 0))
    run = ImportedRun(
        tool=VLLM_BENCH,
        tool_version=tool_version,
        file_format=FORMAT + (" (--save-detailed: per request)" if "ttfts" in data else ""),
        files=[path],
        started_at=_started_at(data.get("date"), data.get("duration")),
        duration_s=_number(data.get("duration")),
        model=data.get("model_id"),
        workload={
            "name": "vllm bench serve" + (f" ({data['label']})" if data.get("label") else ""),
            "requests_planned": sent,
            "concurrency": data.get("max_concurrency"),
            "rate": rate,
            "open_loop": rate is not None,
        },
        requests={"sent": sent, "completed": completed, "failed": sent - completed},
        native={k: v for k, v in data.items() if not isinstance(v, (list, dict)) and not _STAT_KEY.match(k)},
    )
    if tool_version is None:
        run.notes.append("vllm bench serve does not write its version into the file; it is unknown here")
    run.figures = _figures(data)
    run.throughput = {
        "requests_per_s": _number(data.get("request_throughput")),
        "output_tokens_per_s": _number(data.get("output_throughput")),
        "total_tokens_per_s": _number(data.get("total_token_throughput")),
    }
    if completed == 0:  # vLLM writes 0 for the statistics of an empty list: they are absent, not 0
        run.notes.append("no request completed: vLLM's latency statistics (written as 0) are absent here")
    for metric, concept in _CONCEPTS.items():
        stats = run.figures.get(_TOOL_NAMES[metric], {}).get("stats")
        if stats and completed:
            run.latency[concept] = stats_seconds({**stats, "count": None}, 1e-3)
    if "ttfts" in data:
        run.rows = _rows(data)
    else:
        run.notes.append(
            "the file has no per-request records (written without --save-detailed): the distributions are "
            "vLLM's own statistics, and only those it reported"
        )
    return run


def _figures(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """vLLM's own statistics by its names, in ms: {"TTFT": {"field", "unit", "stats": {mean, p50, …}}}."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in data.items():
        match = _STAT_KEY.match(key)
        if not match or not isinstance(value, (int, float)):
            continue
        stat, metric = match.groups()
        stat = {"median": "p50"}.get(stat, stat)
        stat = stat.rstrip("0").rstrip(".") if "." in stat else stat
        name = _TOOL_NAMES[metric]
        entry = out.setdefault(name, {"field": f"*_{metric}_ms", "unit": "ms", "stats": {}})
        entry["stats"][stat] = float(value)
    for name, key, unit in (
        ("request throughput", "request_throughput", "requests/s"),
        ("output token throughput", "output_throughput", "tokens/s"),
        ("total token throughput", "total_token_throughput", "tokens/s"),
    ):
        if _number(data.get(key)) is not None:
            out[name] = {"field": key, "unit": unit, "stats": {"mean": float(data[key])}}
    return out


def _rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per request from the --save-detailed lists: vLLM's own per-request values."""
    n = len(data["ttfts"])
    column = {key: data.get(key) or [None] * n for key in (*_PER_REQUEST, "latencies", "start_times")}
    starts = [s for s in column["start_times"] if isinstance(s, (int, float))]
    t0 = min(starts) if starts else None
    rows = []
    for i in range(n):
        row = empty_row(i)
        error = column["errors"][i]
        ok = not error
        n_out = int(column["output_lens"][i] or 0)
        prompt = column["input_lens"][i]
        latency = column["latencies"][i]
        itls = column["itls"][i]
        if latency is None and ok and itls is not None:  # before vLLM kept latencies: the chunks' sum
            latency = (column["ttfts"][i] or 0.0) + sum(itls)
        start = column["start_times"][i]
        row.update(
            prompt_tokens=int(prompt) if prompt is not None else None,
            output_tokens=n_out,
            requested_output_tokens=n_out,
            ttft_s=column["ttfts"][i] if ok else None,
            e2e_s=latency if ok else None,
            itl_chunk_s=list(itls) if ok and itls is not None else None,
            start_s=(start - t0) if start is not None and t0 is not None else 0.0,
            error=str(error) if not ok else None,
            output_text=column["generated_texts"][i],
        )
        row["end_s"] = row["start_s"] + (latency or 0.0)
        rows.append(finish_row(row))
    return rows


def _number(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _started_at(date: Any, duration: Any) -> Optional[str]:
    """``date`` (local time, written when the run ended) less its duration, as ISO 8601 with this
    machine's offset: the file has no zone, so the machine that reads it is assumed to be where it ran."""
    if not isinstance(date, str):
        return None
    try:
        end = datetime.strptime(date, "%Y%m%d-%H%M%S").astimezone()
    except ValueError:
        return None
    seconds = _number(duration) or 0.0
    return datetime.fromtimestamp(end.timestamp() - seconds).astimezone().isoformat(timespec="seconds")
