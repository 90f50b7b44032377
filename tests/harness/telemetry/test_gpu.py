"""GPU figures through NVML: absent on a CPU, and with a fake ``pynvml`` the sampling, the
devices CUDA_VISIBLE_DEVICES leaves, per-process memory and the energy, power and utilisation
math, in the summary, gpu.parquet, the console, the report and compare."""

import json
import logging
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import psutil
import pytest
from conftest import loads_engine, make_config
from fake_nvml import GIB, FakeGpu, FakeNVML
from pages import assert_renders
from records import record

from harness.reports.compare import outputs
from harness.reports.compare import runs as compare
from harness.reports.compare.comparison import CompareOptions
from harness.reports.console import format_summary
from harness.reports.run_report import build_report
from harness.results import metrics
from harness.results.schema import RunSummary
from harness.results.store import load_run
from harness.run.point import run_benchmark
from harness.telemetry import gpu_phase
from harness.telemetry.gpu import GpuTelemetry, visible_devices
from harness.telemetry.processes import engine_pids

FAST = [
    "model=tiny-random",
    "workload=synthetic",
    "workload.num_requests=6",
    "workload.input_len=32",
    "workload.output_len=5",
    "workload.concurrency=2",
]
GPU_KEYS = [k for k, m in metrics.RUN_METRICS.items() if m.source == "gpu"]


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class StampClock:
    """The telemetry's clock in a whole run: real time, and the fake NVML's "now" is the last stamp,
    so each row's energy is exactly the counter at its t (real NVML reads it microseconds later)."""

    def __init__(self) -> None:
        self.last = None

    def __call__(self) -> float:
        self.last = time.perf_counter()
        return self.last

    def now(self) -> float:
        return time.perf_counter() if self.last is None else self.last


def gpus(n: int, **kwargs) -> list[FakeGpu]:
    return [FakeGpu(name="Fake H100", uuid=f"GPU-{i}{i}{i}{i}aaaa-0000", **kwargs) for i in range(n)]


@pytest.fixture
def no_cuda_env(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)


# --- the math -----------------------------------------------------------------------------


def test_energy_from_the_counter_or_the_power_integral():
    t = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    counter = np.array([0.0, 100.0, 300.0, 600.0, 1000.0])  # J
    power = np.array([100.0, 200.0, 300.0, 400.0, 400.0])  # W
    assert gpu_phase.counter_delta(t, counter, 0.5, 3.5) == pytest.approx(800 - 50)  # interpolated at both ends
    # trapezoids through (0.5, 150) (1, 200) (2, 300) (3, 400) (3.5, 400)
    assert gpu_phase.integral(t, power, 0.5, 3.5) == pytest.approx(87.5 + 250 + 350 + 200)
    assert gpu_phase.counter_delta(t, counter, -1.0, 3.0) is None  # no sample before the phase: not covered
    assert gpu_phase.integral(t, power, 1.0, 4.5) is None
    assert gpu_phase.counter_delta(t, counter[::-1].copy(), 1.0, 2.0) is None  # the counter went back (driver reload)


def test_measured_phase_sums_energy_and_averages_utilisation():
    rows = []
    for t in range(5):  # device 0: counter at 100 J/s; device 1: no counter, 50 W; util 20 % and 60 %
        rows.append((float(t), 0, GIB, None, 20.0, 999.0, 1000.0 + 100.0 * t))
        rows.append((float(t), 1, 2 * GIB, None, 60.0, 50.0, None))
    phase = gpu_phase.measured_phase(gpu_phase.frame(rows), [0, 1], 1.0, 3.0)
    assert [d["energy_source"] for d in phase.devices] == [gpu_phase.COUNTER, gpu_phase.POWER]
    assert [d["energy_j"] for d in phase.devices] == pytest.approx([200.0, 100.0])  # the counter wins over power
    assert [d["mean_power_w"] for d in phase.devices] == pytest.approx([100.0, 50.0])
    assert phase.energy_j == pytest.approx(300.0) and phase.energy_source == "mixed"
    assert phase.util == pytest.approx(0.4)
    totals = metrics.RunTotals([record(i, n_out=25) for i in range(4)], 4, 2.0, phase)  # 100 output tokens in T = 2 s
    figures = metrics.run_figures(totals)
    assert figures["energy_per_token_j"] == pytest.approx(3.0)
    assert figures["gpu_power_w"] == pytest.approx(150.0)
    assert figures["gpu_util"] == pytest.approx(0.4)
    assert all(metrics.run_figures(metrics.RunTotals(totals.ok, 4, 2.0))[k] is None for k in GPU_KEYS)


# --- devices and sampling through the fake -------------------------------------------------


def test_visible_devices_follow_cuda_visible_devices():
    nvml = FakeNVML(gpus(3))

    def indices(env):
        return [(d.index, d.nvml_index) for d in visible_devices(nvml, env)[0]]

    assert indices({}) == [(0, 0), (1, 1), (2, 2)]
    assert indices({"CUDA_VISIBLE_DEVICES": "2,0"}) == [(0, 2), (1, 0)]
    assert indices({"CUDA_VISIBLE_DEVICES": "GPU-1111"}) == [(0, 1)]  # a unique UUID prefix
    assert indices({"CUDA_VISIBLE_DEVICES": "1,7,0"}) == [(0, 1)]  # CUDA stops at the first invalid entry
    devices, notes = visible_devices(nvml, {"CUDA_VISIBLE_DEVICES": ""})
    assert devices == [] and "leaves no GPU visible" in notes[-1]
    devices, notes = visible_devices(nvml, {"CUDA_VISIBLE_DEVICES": "MIG-abc"})
    assert devices == [] and any("MIG" in n for n in notes)
    nvml.gpus[2].name = "Fake A10"
    assert any("CUDA_DEVICE_ORDER" in n for n in visible_devices(nvml, {"CUDA_VISIBLE_DEVICES": "0,2"})[1])
    assert not visible_devices(nvml, {"CUDA_VISIBLE_DEVICES": "0,2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})[1]


def test_sampled_figures_and_per_process_memory(monkeypatch, no_cuda_env):
    clock = Clock()
    fake = FakeNVML(gpus(2), clock)
    fake.gpus[0].processes = lambda: [(10, 1 * GIB), (11, 2 * GIB), (99, 4 * GIB)]
    fake.gpus[1].processes = lambda: [(11, GIB // 2), (12, None)]  # NVML may not know a process's memory
    fake.gpus[1].energy_counter = False
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    telemetry = GpuTelemetry.open()
    assert telemetry is not None and fake.inits == 1
    telemetry.clock = clock
    assert telemetry.devices[1].unsupported == {"energy_j": "Not Supported"}
    engine = frozenset({10, 11, 12})
    rows = []
    for step, (p0, p1) in enumerate([(100, 50), (300, 50), (300, 150), (300, 150), (100, 150)]):
        fake.set_power(fake.gpus[0], p0)
        fake.set_power(fake.gpus[1], p1)
        fake.gpus[0].util_pct = 80 if 1 <= step <= 3 else 0
        rows += telemetry.read(engine)
        clock.t += 1.0
    telemetry.close()
    assert fake.inits == 0
    assert rows[0][:4] == (100.0, 0, 2 * GIB, 3 * GIB)  # pid 99 is not the engine's
    assert rows[1][:4] == (100.0, 1, 2 * GIB, GIB // 2)  # pid 12: no figure, not zero
    assert rows[0][6] is not None and rows[1][6] is None  # no energy counter on device 1
    devices = [d.describe() for d in telemetry.devices]
    run = gpu_phase.run_figures(devices, telemetry.notes, rows, True, 101.0, 103.0, 1.0)
    # device 0: 300 W from t=101 to 103 (counter); device 1: 50 W until 102, then 150 W (sampled power, trapezoids)
    assert run.section["devices"][0]["energy_j"] == pytest.approx(600.0, abs=0.01)
    assert run.section["devices"][1]["energy_j"] == pytest.approx((50 + 150) / 2 + 150)
    assert run.phase.energy_j == pytest.approx(850.0, abs=0.01)
    assert run.phase.util == pytest.approx((0.8 + 0.5) / 2)  # device 0 busy 80 % over the phase, device 1 50 %
    assert run.memory == {"gpu_nvml_peak_used_bytes": 4 * GIB, "gpu_nvml_peak_process_used_bytes": 3 * GIB + GIB // 2}
    assert [(d["peak_used_bytes"], d["peak_process_used_bytes"]) for d in run.section["devices"]] == [
        (2 * GIB, 3 * GIB),
        (2 * GIB, GIB // 2),
    ]
    assert run.section["scope"] == "engine processes" and run.section["energy_source"] == "mixed"
    assert run.section["window_unix_s"][1] - run.section["window_unix_s"][0] == pytest.approx(2.0)
    assert gpu_phase.WHOLE_DEVICE in run.section["notes"]

    unlisted = gpu_phase.run_figures(devices, [], [r[:3] + (None,) + r[4:] for r in rows], True, 101.0, 103.0, 1.0)
    assert (
        unlisted.memory["gpu_nvml_peak_process_used_bytes"] is None and gpu_phase.UNLISTED in unlisted.section["notes"]
    )
    remote = gpu_phase.run_figures(devices, [], [r[:3] + (None,) + r[4:] for r in rows], False, 101.0, 103.0, 1.0)
    assert remote.section["scope"] == "device" and gpu_phase.REMOTE in remote.section["notes"]
    assert remote.phase.energy_j == pytest.approx(850.0, abs=0.01)  # device figures all the same


def test_a_remote_engine_gets_no_per_process_memory(monkeypatch, no_cuda_env):
    fake = FakeNVML(gpus(1, processes=lambda: [(os.getpid(), GIB)]))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    telemetry = GpuTelemetry.open()
    assert telemetry.read(None)[0][3] is None  # no PIDs (backend=openai): nothing per process
    assert telemetry.read(frozenset({os.getpid()}))[0][3] == GIB
    assert telemetry.read(frozenset({1}))[0][3] is None  # not listed: absent, not 0
    telemetry.close()


def test_engine_pids_cover_a_server_process_group():
    """A server's PIDs: itself, its children, and a member of its group that left the process tree."""
    # the subshell starts a sleep and exits: that sleep is re-parented but stays in the group
    proc = subprocess.Popen(["sh", "-c", "(sleep 30 &); sleep 30 & wait"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            group = {p for p in psutil.pids() if _pgid(p) == proc.pid}
            others = group - {proc.pid}
            # sh, its sleep and the orphaned sleep, once the subshell that forked that one has
            # exited (while it lives, it is a member that is gone a moment later)
            if len(others) >= 2 and all(_name(p) == "sleep" for p in others):
                break
            time.sleep(0.05)
        tree = {proc.pid, *(c.pid for c in psutil.Process(proc.pid).children(recursive=True))}
        orphans = group - tree
        assert orphans, "the test needs a group member outside the tree"
        pids = engine_pids(proc.pid)
        assert tree <= pids and orphans <= pids and os.getpid() not in pids
        assert os.getpid() in engine_pids(os.getpid())  # in-process: this process and its children
    finally:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=10)


def _name(pid: int):
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return None


def _pgid(pid: int):
    try:
        return os.getpgid(pid)
    except OSError:
        return None


# --- whole runs ---------------------------------------------------------------------------


@pytest.mark.engine
def test_a_cpu_run_has_no_gpu_figures(monkeypatch, tmp_path, caplog):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml fails, as without nvidia-ml-py
    caplog.set_level(logging.INFO, logger="harness")
    outcome = run_benchmark(make_config(*FAST), tmp_path / "cpu")
    lines = [r.getMessage() for r in caplog.records if "GPU figures" in r.getMessage()]
    assert lines == ["GPU figures off: nvidia-ml-py is not installed (pip install -e '.[gpu]')"]
    summary = json.loads((tmp_path / "cpu" / "summary.json").read_text())
    assert "gpu" not in summary
    assert all(summary["throughput"][k] is None for k in GPU_KEYS)  # absent, never 0
    assert summary["memory"]["gpu_nvml_peak_used_bytes"] is None
    assert not (tmp_path / "cpu" / "gpu.parquet").exists()
    assert list(pd.read_parquet(tmp_path / "cpu" / "memory.parquet").columns) == ["t_s", "rss_bytes"]
    console = format_summary(outcome.summary)
    assert "GPU" not in console and "J/token" not in console
    html, plots = build_report(load_run(tmp_path / "cpu"))
    assert "gpu" not in plots and "energy per output token" not in html and "GPU power" not in html
    shutil.copytree(tmp_path / "cpu", tmp_path / "cpu-again")
    result = outputs.compare_runs(
        [tmp_path / "cpu", tmp_path / "cpu-again"], tmp_path / "cmp", CompareOptions(resamples=50)
    )
    assert not {"energy_per_token_j", "gpu_power_w", "gpu_util_pct"} & set(result.table.columns)
    assert "J/token" not in compare.format_runs_table(result.table)
    assert "energy per output token" not in (tmp_path / "cmp" / "compare.html").read_text()


@pytest.fixture
@loads_engine
def gpu_run(monkeypatch, tmp_path_factory, no_cuda_env):
    """A real run on the CPU with a fake NVML: 2 GPUs at 150 W and 250 W, 40 % and 60 % busy,
    the second without an energy counter; this process holds 1 GiB on the first, pid 1 holds 9 GiB."""
    stamp = StampClock()
    monkeypatch.setattr(GpuTelemetry, "clock", stamp)
    fake = FakeNVML(gpus(2), stamp.now)
    fake.gpus[0].power_w, fake.gpus[0].util_pct = 150.0, 40
    fake.gpus[1].power_w, fake.gpus[1].util_pct, fake.gpus[1].energy_counter = 250.0, 60, False
    fake.gpus[0].processes = lambda: [(os.getpid(), GIB), (1, 9 * GIB)]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    run_dir = tmp_path_factory.mktemp("gpu") / "run"
    outcome = run_benchmark(make_config(*FAST), run_dir)
    assert fake.inits == 0  # every nvmlInit shut down again
    return outcome, run_dir


@pytest.mark.engine
def test_a_gpu_run_reports_energy_power_and_utilisation(gpu_run, tmp_path, chromium):
    outcome, run_dir = gpu_run
    s = json.loads((run_dir / "summary.json").read_text())
    tokens, seconds = s["tokens"]["output_total"], s["duration_s"]
    # constant power: the counter and the power integral both give P × T exactly
    assert s["throughput"]["gpu_power_w"] == pytest.approx(400.0, rel=1e-3)
    assert s["throughput"]["energy_per_token_j"] == pytest.approx(400.0 * seconds / tokens, rel=1e-3)
    assert s["throughput"]["gpu_util"] == pytest.approx(0.5)
    gpu = s["gpu"]
    assert gpu["scope"] == "engine processes" and gpu["energy_source"] == "mixed"
    assert [d["energy_source"] for d in gpu["devices"]] == ["nvml_energy_counter", "sampled_power"]
    assert [d["mean_power_w"] for d in gpu["devices"]] == pytest.approx([150.0, 250.0], rel=1e-3)
    assert [d["name"] for d in gpu["devices"]] == ["Fake H100"] * 2
    assert gpu["devices"][0]["peak_process_used_bytes"] == GIB and gpu["devices"][1]["peak_process_used_bytes"] is None
    assert s["memory"]["gpu_nvml_peak_used_bytes"] == 4 * GIB and s["memory"]["gpu_nvml_peak_process_used_bytes"] == GIB

    table = pd.read_parquet(run_dir / "gpu.parquet")
    assert list(table.columns) == [
        "t_s",
        "device",
        "used_bytes",
        "process_used_bytes",
        "util_pct",
        "power_w",
        "energy_j",
    ]
    assert set(table.device) == {0, 1} and table.t_s.min() < 0 < table.t_s.max()  # from before the phase to after it
    assert table[table.device == 1].energy_j.isna().all() and table[table.device == 0].energy_j.notna().all()

    console = format_summary(outcome.summary)
    assert "GPU (measured phase): energy per output token" in console and "mean GPU power 400.0 W" in console
    assert "GPU used by the engine (NVML) 1.00 GiB" in console

    html, plots = build_report(load_run(run_dir))
    assert "gpu" in plots and "memory" in plots
    assert "energy per output token" in html and "J/token" in html and "mean GPU utilisation" in html
    assert "GPU used by the engine (NVML)" in html
    assert_renders(chromium, run_dir / "report.html", tmp_path / "gpu-report.png", plots)

    shutil.copytree(run_dir, tmp_path / "again")
    result = outputs.compare_runs([run_dir, tmp_path / "again"], tmp_path / "cmp", CompareOptions(resamples=50))
    assert result.table["energy_per_token_j"].tolist() == pytest.approx([s["throughput"]["energy_per_token_j"]] * 2)
    assert result.table["gpu_util_pct"].tolist() == pytest.approx([50.0, 50.0])
    printed = compare.format_runs_table(result.table)
    assert "J/token" in printed and f"{s['throughput']['energy_per_token_j']:.4f}"[:5] in printed
    page = (tmp_path / "cmp" / "compare.html").read_text()
    assert "energy per output token (J/token)" in page and "mean GPU power (W)" in page
    assert RunSummary.from_dict(s).gpu == gpu  # summary.json round-trips


def test_a_managed_server_counts_its_own_processes(monkeypatch, tmp_path, no_cuda_env):
    """backend=reference launches a server: its process is the engine's; the watchdog and pid 1 are not."""

    def processes():
        out = [(1, 9 * GIB)]
        for child in psutil.Process().children(recursive=True):
            try:
                engine = "-m refserver" in " ".join(child.cmdline())
            except psutil.Error:
                continue
            out.append((child.pid, 300 * 2**20 if engine else 7 * GIB))
        return out

    stamp = StampClock()
    monkeypatch.setattr(GpuTelemetry, "clock", stamp)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML(gpus(1, processes=processes), stamp.now))
    run_benchmark(make_config("backend=reference", "backend.ttft_ms=5", "backend.itl_ms=2", *FAST), tmp_path)
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["gpu"]["scope"] == "engine processes"
    assert s["memory"]["gpu_nvml_peak_process_used_bytes"] == 300 * 2**20
    assert s["throughput"]["gpu_power_w"] == pytest.approx(200.0, rel=1e-3)


def test_no_driver_is_one_info_line(monkeypatch, caplog):
    fake = FakeNVML(gpus(1))

    def no_driver():
        raise RuntimeError("Driver Not Loaded")

    fake.nvmlInit = no_driver
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    caplog.set_level(logging.INFO, logger="harness")
    assert GpuTelemetry.open() is None
    assert [r.getMessage() for r in caplog.records] == [
        "GPU figures off: NVML did not start (Driver Not Loaded): no NVIDIA driver here?"
    ]


def test_sweep_figures_keep_gpu_metrics_only_where_present():
    from harness.reports.console import format_sweep
    from harness.results.sweep_file import key_figures

    cpu = RunSummary(throughput={"output_tokens_per_s": 10.0, "energy_per_token_j": None})
    gpu = RunSummary(throughput={"output_tokens_per_s": 10.0, "energy_per_token_j": 0.25, "gpu_power_w": 300.0})
    assert "energy_per_token_j" not in key_figures(cpu)
    assert key_figures(gpu)["energy_per_token_j"] == 0.25
    point = {"index": 0, "overrides": [], "status": "complete"}
    assert "J/token" not in format_sweep({"points": [dict(point, figures=key_figures(cpu))]})
    assert "energy per output token (J/token)" in format_sweep({"points": [dict(point, figures=key_figures(gpu))]})
