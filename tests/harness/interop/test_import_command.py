"""python -m harness.import: the peers' real files (tests/fixtures/peers/) as run folders that
compare, report and history take."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

from harness.interop import import_cli
from harness.reports.compare import cli as compare_cli
from harness.results.store import load_run

PEERS = REPO / "tests" / "fixtures" / "peers"


def test_several_files_become_a_folder_of_runs(tmp_path, capsys):
    out = tmp_path / "imported"
    code = import_cli.main(
        [
            str(PEERS / "vllm-bench" / "vllm-bench.json"),
            str(PEERS / "guidellm"),
            str(PEERS / "aiperf"),
            "--out",
            str(out),
            "--model",
            "smollm2-135m",
            "--tool-version",
            "0.32.0",
            "--ran-here",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "vllm bench serve 0.32.0" in printed and "GuideLLM 0.8.1" in printed and "AIPerf 0.13.0" in printed
    folders = sorted(p.name for p in out.iterdir())
    assert folders == ["01-vllm-bench", "02-guidellm", "03-aiperf"]
    for folder in folders:
        run = load_run(out / folder)
        assert run.summary.model["name"] == "smollm2-135m" and run.env.get("cpu")
        assert (out / folder / "report.html").is_file()
    # compare takes the folder as it takes a sweep
    assert compare_cli.main([str(out), "--out", str(tmp_path / "compare"), "--resamples", "50"]) == 0
    assert (tmp_path / "compare" / "compare.html").is_file()


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("x")
    assert import_cli.main([str(PEERS / "guidellm"), "--out", str(tmp_path / "taken")]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert import_cli.main([str(PEERS / "guidellm"), "--tool", "aiperf", "--out", str(tmp_path / "o")]) == 2
    assert "not AIPerf" in capsys.readouterr().err


def test_the_entry_module_runs_by_name():
    """``import`` is a keyword: the module is only ever run by name (python -m harness.import)."""
    proc = subprocess.run(
        [sys.executable, "-m", "harness.import", "--help"], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert proc.returncode == 0 and "vllm bench serve" in proc.stdout
