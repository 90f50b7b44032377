"""scripts/docs_screenshots.py, the maker of docs/images/report.png and compare.png, on two tiny
runs against the reference server: both PNGs written, of the window's size."""

import os
import struct
import subprocess
import sys

import pytest
from browser import chromium_binary
from conftest import REPO

REF = "backend=reference backend.ttft_ms=5 backend.itl_ms={itl} model=tiny-random workload=synthetic"
TINY = "workload.input_len=48 workload.output_len=8 workload.num_requests=4"


@pytest.mark.slow
def test_the_screenshots_are_made_from_real_runs(tmp_path):
    if chromium_binary() is None:
        message = "chromium is not installed (scripts/test.sh installs it: apt-get install -y chromium)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    runs = [f"{REF.format(itl=itl)} {TINY}" for itl in (1, 2)]
    out = tmp_path / "images"
    proc = subprocess.run(
        [sys.executable, "scripts/docs_screenshots.py", "--out", str(out), "--keep", str(tmp_path / "work")]
        + [arg for run in runs for arg in ("--run", run)]
        + ["--size", "800x600", "--", "machine.enabled=false"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("report.png", "compare.png"):
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert struct.unpack(">II", data[16:24]) == (800, 600)  # IHDR: the window, one device pixel per CSS pixel
        assert f"{out / name}: " in proc.stdout
    assert len(list((tmp_path / "work" / "runs").iterdir())) == 2
    assert (tmp_path / "work" / "compare" / "compare.html").is_file()
