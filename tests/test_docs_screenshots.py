"""scripts/docs_screenshots.py, the maker of docs/images/report.png and compare.png, on two tiny
runs against the reference server: both PNGs written, as wide as the window and at most as
high; then again from the kept runs (``--reuse``); then import-compare.png (``--compare``) of one
of those runs and GuideLLM's real file imported (tests/fixtures/peers/)."""

import os
import struct
import subprocess
import sys

import pytest
from browser import chromium_binary
from conftest import REPO

REF = "backend=reference backend.ttft_ms=5 backend.itl_ms={itl} model=tiny-random workload=synthetic"
TINY = "workload.input_len=48 workload.output_len=8 workload.num_requests=4"
PEERS = REPO / "tests" / "fixtures" / "peers"  # files the peer tools wrote (scripts/peer_fixtures.py)


@pytest.mark.slow
def test_the_screenshots_are_made_from_real_runs(tmp_path):
    if chromium_binary() is None:
        message = "chromium is not installed (scripts/test.sh installs it: apt-get install -y chromium)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    runs = [f"{REF.format(itl=itl)} {TINY}" for itl in (1, 2)]
    work = tmp_path / "work"
    made = screenshots(tmp_path / "images", "--keep", str(work), *(a for run in runs for a in ("--run", run)))
    assert len(list((work / "runs").iterdir())) == 2 and (work / "compare" / "compare.html").is_file()
    assert screenshots(tmp_path / "again", "--reuse", str(work)).keys() == made.keys()  # the same runs, shot again
    assert (work / "runs").is_dir()  # kept
    imported = tmp_path / "imported"
    proc = subprocess.run(
        [sys.executable, "-m", "harness.import", str(PEERS / "guidellm" / "benchmarks.json"), "--out", str(imported)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = sorted((work / "runs").iterdir())[0]
    assert screenshots(tmp_path / "import", "--compare", str(first), str(imported), names=("import-compare.png",))


def screenshots(out, *args, names=("report.png", "compare.png")):
    """Run the script with ``args``; the PNGs it wrote: name → (width, height)."""
    overrides = [] if "--compare" in args else ["--", "machine.enabled=false"]  # --compare makes no runs
    proc = subprocess.run(
        [sys.executable, "scripts/docs_screenshots.py", "--out", str(out), "--size", "800x600", *args, *overrides],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    sizes = {}
    for name in names:
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and f"{out / name}: " in proc.stdout
        sizes[name] = struct.unpack(">II", data[16:24])  # IHDR: one device pixel per CSS pixel
        width, height = sizes[name]
        assert width == 800 and 300 <= height <= 600  # the window's top, ended at a section's heading
    return sizes
