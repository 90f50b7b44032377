"""A server's Prometheus ``/metrics`` sampled during the measured phase, and every scrape bounded.

**Scrapes with a deadline.** :class:`DeadlineScrape` runs the backend's scrape on a thread of its
own and waits for it ``timeout_s`` at most, as a whole (not per read): a server that drips its
``/metrics`` one byte a second costs one ``timeout_s``, never the drip's length. A scrape past
its deadline is given up (``slow``) and its thread left to end by itself (the HTTP GET stops
reading at about the same deadline, backends/http/probe.py); while it has not ended the next
scrape is not started but counted as ``skipped``, so at most one is ever in flight. The scrapes
before and after the phase (harness/run/point.py) go through the same object, off the event loop.

**The sampler.** :class:`ServerMetricsSampler` scrapes every ``interval_s`` on a thread, from
just before the measured phase until its end, and stamps each scrape with ``time.perf_counter()``
when it was sent (the harness's clock; ``t_s`` in the table is from the phase's start, as
``start_s``/``end_s`` in requests.parquet). It keeps a bounded set of series (at most
:data:`MAX_SERIES` (name, labels) pairs; more are dropped and counted):

- every gauge and counter family: its value summed over label sets (``labels`` empty; a counter's
  raw cumulative value), and per label set for the labels in :data:`PER_LABEL` (the position of
  a speculative-decoding counter; the endpoint of a run over several, whose scrapes are merged
  with an ``endpoint`` label on every sample, backends/http/exposition.py);
- neutral series (``kind`` ``neutral``) mapped from the engines' names (:data:`NEUTRAL`):
  ``kv_cache_usage`` (0..1; over several endpoints their mean), ``requests_running``,
  ``requests_waiting`` (over several endpoints their sum); and where the server
  counts speculative decoding (prometheus.SPEC_COUNTERS), per interval between two scrapes
  ``spec_acceptance_rate`` = Δaccepted / Δdraft_tokens and ``spec_acceptance_length`` =
  1 + Δaccepted / Δdrafts, stamped at the later scrape; where it keeps gauges of them instead
  (:data:`SPEC_GAUGES`, SGLang's ``spec_accept_rate`` and ``spec_accept_length``, averaged by the
  server over its last logging interval), their value at each scrape while above 0 (over several
  endpoints their mean).

Histograms are not sampled (their phase totals are in the before/after difference).

**Summary** (:meth:`ServerMetricsSampler.figures`, ``summary.json`` → ``server_metrics.sampled``):
scrapes tried, ok, failed (an error or an HTTP status), slow (past ``timeout_s``), skipped (the
previous slow one still running); for each neutral gauge its engine metric, ``peak`` (the
largest sample) and ``mean``, **time-weighted**: the trapezoids between consecutive samples ÷
the time from the first sample to the last (the one sample's value when there is one); over
several endpoints also each endpoint's ``peak`` and ``mean`` of the same engine metric
(``endpoints``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

import pandas as pd

from harness.telemetry import prometheus

log = logging.getLogger("harness")

MAX_SERIES = 512  # (name, labels) pairs kept; a scrape's further ones are dropped and counted

# labels whose values are kept apart (besides the sum over label sets): the position of a
# speculative-decoding counter, and the endpoint of a run over several (backends/http/exposition.py)
PER_LABEL = ("position", "endpoint")
ENDPOINT = "endpoint"
# neutral gauges that are a share of one server's capacity: over several endpoints their mean,
# not their sum (equal capacities assumed; each endpoint's own value is in its series)
SHARE_GAUGES = {"kv_cache_usage"}

# neutral name → the engines' gauge names, first present wins
NEUTRAL: dict[str, tuple[str, ...]] = {
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
    "requests_running": (
        "vllm:num_requests_running",
        "sglang:num_running_reqs",
        "llamacpp:requests_processing",
        "tgi_batch_current_size",
    ),
    "requests_waiting": (
        "vllm:num_requests_waiting",
        "sglang:num_queue_reqs",
        "llamacpp:requests_deferred",
        "tgi_queue_size",
    ),
}
SPEC_RATE, SPEC_LENGTH = "spec_acceptance_rate", "spec_acceptance_length"
# where a server keeps gauges of the acceptance instead of counters (SGLang: over its last
# logging interval; 0 until a speculative step, or without speculative decoding)
SPEC_GAUGES: dict[str, tuple[str, ...]] = {
    SPEC_RATE: ("sglang:spec_accept_rate",),
    SPEC_LENGTH: ("sglang:spec_accept_length",),
}
NEUTRAL_KIND = "neutral"
COLUMNS = ("t_s", "name", "labels", "kind", "value")

OK, FAILED, SLOW, SKIPPED, NONE = "ok", "failed", "slow", "skipped", "none"


@dataclass
class Scrape:
    """One scrape: its text (None unless ``ok``), how it went, when it was sent (perf_counter)."""

    status: str  # ok | failed | slow | skipped | none (the backend has no /metrics)
    t: float
    text: Optional[str] = None
    error: Optional[str] = None


class DeadlineScrape:
    """``scrape(timeout_s)`` on a thread of its own, waited for ``timeout_s`` at most (see module)."""

    def __init__(self, scrape: Callable[[float], Optional[str]], timeout_s: float):
        self.scrape, self.timeout_s = scrape, timeout_s
        self._running: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    def __call__(self) -> Scrape:
        t = time.perf_counter()
        with self._lock:
            if self._running is not None and self._running.is_alive():
                return Scrape(SKIPPED, t, error="the previous scrape has not ended")
            box: dict[str, Any] = {}
            done = threading.Event()

            def run() -> None:
                try:
                    box["text"] = self.scrape(self.timeout_s)
                except BaseException as exc:  # noqa: BLE001 - reported to the caller
                    box["error"] = exc
                finally:
                    done.set()

            thread = threading.Thread(target=run, name="server-metrics-scrape", daemon=True)
            self._running = thread
            thread.start()
        if not done.wait(self.timeout_s):
            return Scrape(SLOW, t, error=f"no answer within {self.timeout_s:g} s")
        error = box.get("error")
        if isinstance(error, TimeoutError):
            return Scrape(SLOW, t, error=str(error))
        if error is not None:
            return Scrape(FAILED, t, error=f"{type(error).__name__}: {error}")
        text = box.get("text")
        return Scrape(OK, t, text) if text is not None else Scrape(NONE, t)

    def wait_idle(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) for a scrape still in flight to end."""
        thread = self._running
        if thread is not None:
            thread.join(timeout_s)


def scrape_text(scraper: DeadlineScrape, when: str) -> tuple[Optional[str], str]:
    """One scrape (before or after the phase): its text or None, and its status; a warning line
    when it failed or was slow."""
    result = scraper()
    if result.status in (FAILED, SLOW, SKIPPED):
        log.warning(
            "could not scrape the engine's metrics %s the measured phase (%s): %s", when, result.status, result.error
        )
    return result.text, result.status


class ServerMetricsSampler:
    """Scrapes ``/metrics`` every ``interval_s`` on a thread; see the module docstring."""

    def __init__(self, scraper: DeadlineScrape, interval_s: float, max_series: int = MAX_SERIES):
        self.scraper, self.interval_s, self.max_series = scraper, interval_s, max_series
        self.rows: list[tuple[float, str, str, str, float]] = []  # (perf_counter, name, labels, kind, value)
        self.counts = {"scrapes": 0, OK: 0, FAILED: 0, SLOW: 0, SKIPPED: 0}
        self.series_dropped = 0
        self.no_endpoint = False
        self._series: set[tuple[str, str]] = set()
        self._spec_last: Optional[dict[str, float]] = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> ServerMetricsSampler:
        self._thread = threading.Thread(target=self._run, name="server-metrics", daemon=True)
        self._thread.start()
        return self

    def request_stop(self) -> None:
        """Ask the thread to end (returns at once)."""
        self._stop.set()

    def stop(self) -> None:
        """End the sampling: returns within about one ``timeout_s`` (a scrape in flight is given up)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.scraper.timeout_s + 0.5)

    def _run(self) -> None:
        due = time.perf_counter()
        while not self._stop.is_set():
            result = self.scraper()
            if result.status == NONE:  # no /metrics: nothing to sample
                self.no_endpoint = True
                return
            try:
                self.record(result)
            except Exception as exc:  # noqa: BLE001 - a scrape that does not parse costs itself only
                log.debug("server metrics: a scrape did not parse (%s)", exc)
            now = time.perf_counter()
            due = max(due + self.interval_s, now)  # ticks missed to a slow scrape are not made up
            self._stop.wait(due - now)

    def record(self, result: Scrape) -> None:
        """Count one scrape; with its text, its series."""
        rows: list[tuple[float, str, str, str, float]] = []
        if result.status == OK and result.text is not None:
            rows = self._rows(result.t, prometheus.parse(result.text))
        with self._lock:
            self.counts["scrapes"] += 1
            self.counts[result.status] = self.counts.get(result.status, 0) + 1
            for row in rows:
                key = (row[1], row[2])
                if key not in self._series:
                    if len(self._series) >= self.max_series:
                        self.series_dropped += 1
                        continue
                    self._series.add(key)
                self.rows.append(row)

    def _rows(self, t: float, families: dict[str, prometheus.Family]) -> list[tuple[float, str, str, str, float]]:
        rows = []
        sums: dict[str, float] = {}
        endpoints: dict[str, int] = {}  # family → the endpoints its samples came from
        for name, family in families.items():
            if family.type not in ("gauge", "counter"):
                continue
            samples = [s for s in family.samples if not s.name.endswith("_created") and math.isfinite(s.value)]
            if not samples:
                continue
            total = sum(s.value for s in samples)
            sums[name] = total
            endpoints[name] = len({s.labels[ENDPOINT] for s in samples if ENDPOINT in s.labels}) or 1
            rows.append((t, name, "", family.type, total))
            for key in PER_LABEL:
                by_value: dict[str, float] = {}
                for s in samples:
                    if key in s.labels:
                        by_value[s.labels[key]] = by_value.get(s.labels[key], 0.0) + s.value
                rows += [(t, name, f"{key}={v}", family.type, x) for v, x in sorted(by_value.items(), key=_label_order)]
        for neutral, names in NEUTRAL.items():
            found = next((n for n in names if n in sums), None)
            if found is not None:
                whole = sums[found] / endpoints[found] if neutral in SHARE_GAUGES else sums[found]
                rows.append((t, neutral, found, NEUTRAL_KIND, whole))
        spec = prometheus.spec_totals(families)
        if spec is not None:
            last, self._spec_last = self._spec_last, spec
            if last is not None:
                d_tokens = spec["draft_tokens"] - last["draft_tokens"]
                d_drafts = spec["drafts"] - last["drafts"]
                d_accepted = spec["accepted_tokens"] - last["accepted_tokens"]
                if d_tokens > 0:
                    rows.append((t, SPEC_RATE, "", NEUTRAL_KIND, d_accepted / d_tokens))
                if d_drafts > 0:
                    rows.append((t, SPEC_LENGTH, "", NEUTRAL_KIND, 1.0 + d_accepted / d_drafts))
        else:
            for neutral, names in SPEC_GAUGES.items():
                found = next((n for n in names if sums.get(n, 0.0) > 0), None)
                if found is not None:
                    rows.append((t, neutral, found, NEUTRAL_KIND, sums[found] / endpoints[found]))
        return rows

    # --- results ---

    def frame(self, t0: float) -> pd.DataFrame:
        """The series in long format (:data:`COLUMNS`), ``t_s`` from ``t0``."""
        with self._lock:
            rows = list(self.rows)
        df = pd.DataFrame(rows, columns=list(COLUMNS))
        df["t_s"] = df["t_s"].astype(float) - t0
        df["value"] = df["value"].astype(float)
        return df

    def figures(self) -> dict[str, Any]:
        """``server_metrics.sampled`` for the summary (see the module docstring)."""
        with self._lock:
            rows = list(self.rows)
            out: dict[str, Any] = {
                "interval_s": self.interval_s,
                "timeout_s": self.scraper.timeout_s,
                **self.counts,
                "series": len(self._series),
                "series_dropped": self.series_dropped,
                "mean": "time-weighted",
            }
        if self.no_endpoint:
            out["absent"] = "the backend exposes no Prometheus /metrics"
        for neutral in (*NEUTRAL, SPEC_RATE, SPEC_LENGTH):
            points = [(t, v, labels) for t, name, labels, kind, v in rows if name == neutral and kind == NEUTRAL_KIND]
            if points:
                out[neutral] = {
                    "metric": points[0][2] or None,
                    "samples": len(points),
                    "peak": max(v for _, v, _ in points),
                    "mean": time_weighted_mean([t for t, _, _ in points], [v for _, v, _ in points]),
                }
                by_endpoint = endpoint_figures(rows, points[0][2])
                if by_endpoint:
                    out[neutral]["endpoints"] = by_endpoint
        return out


def endpoint_figures(rows: list[tuple[float, str, str, str, float]], metric: str) -> Optional[dict[str, Any]]:
    """Per endpoint of a run over several: the peak and time-weighted mean of the engine's
    ``metric`` in that endpoint's series (``labels`` ``endpoint=i``); None for one endpoint."""
    series: dict[str, list[tuple[float, float]]] = {}
    for t, name, labels, _, v in rows:
        if name == metric and labels.startswith(f"{ENDPOINT}="):
            series.setdefault(labels.removeprefix(f"{ENDPOINT}="), []).append((t, v))
    if len(series) < 2:
        return None
    return {
        i: {"peak": max(v for _, v in pts), "mean": time_weighted_mean([t for t, _ in pts], [v for _, v in pts])}
        for i, pts in sorted(series.items(), key=_label_order)
    }


def time_weighted_mean(t: list[float], v: list[float]) -> Optional[float]:
    """Σ trapezoids between consecutive samples ÷ (t_last − t_first); one sample: its value."""
    if not v:
        return None
    span = t[-1] - t[0]
    if len(v) == 1 or span <= 0:
        return sum(v) / len(v)
    area = sum((v[i] + v[i + 1]) / 2 * (t[i + 1] - t[i]) for i in range(len(v) - 1))
    return area / span


def _label_order(item: tuple[str, object]) -> tuple[int, Any]:
    """A (label value, …) pair's order: numeric labels first, by number, then the others."""
    value = item[0]
    return (0, int(value)) if value.isdigit() else (1, value)
