"""python -m harness.history: exit codes (0 fine, 1 alert, 2 bad input) and one-line errors."""

from __future__ import annotations

import subprocess
import sys

import pytest
from history_runs import nightly

from harness.history.cli import main

BASE = [0.0100, 0.0102, 0.0099, 0.0101, 0.0098, 0.0100, 0.0103, 0.0099, 0.0101, 0.0100] * 3


def test_add_list_check_and_trend(tmp_path, capsys):
    nightly(tmp_path / "runs", BASE)
    assert main(["add", str(tmp_path / "h"), str(tmp_path / "runs")]) == 0
    assert capsys.readouterr().out.count("added: ") == 30
    assert main(["add", str(tmp_path / "h"), str(tmp_path / "runs" / "run-000")]) == 0
    assert capsys.readouterr().out.startswith("already there: ")
    assert main(["list", str(tmp_path / "h"), "--engine", "vllm"]) == 0
    assert capsys.readouterr().out.count("vllm") == 30
    assert main(["check", str(tmp_path / "h"), "--markdown", str(tmp_path / "summary.md")]) == 0
    assert "no alert" in (tmp_path / "summary.md").read_text()
    nightly(tmp_path / "more", BASE + [0.0116, 0.0117])
    main(["add", str(tmp_path / "h"), str(tmp_path / "more" / "run-030"), str(tmp_path / "more" / "run-031")])
    capsys.readouterr()
    assert main(["check", str(tmp_path / "h"), "--metric", "itl_s.p50"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("ALERT itl_s.p50 +1") and "1 alert(s)" in out
    assert main(["trend", str(tmp_path / "h"), "--out", str(tmp_path / "t.html")]) == 0
    assert (tmp_path / "t.html").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["list", "{tmp}/none"], "holds no runs yet"),
        (["check", "{tmp}/h", "--metric", "ttft_s"], "a request metric needs a statistic"),
        (["check", "{tmp}/h", "--metric", "speed"], "unknown figure"),
        (["check", "{tmp}/h", "--margin", "5"], "--margin must be in [0, 1)"),
        (["check", "{tmp}/h", "--engine", "tgi"], "no run in"),
        (["add", "{tmp}/h", "{tmp}/missing"], "is not a folder"),
        (["trend", "{tmp}/h", "--out", "{tmp}"], "--out must be a file"),
        (["add", "{tmp}/runs/run-000/summary.json", "{tmp}/runs"], "the history's root must be a folder"),
    ],
)
def test_bad_input_is_one_error_line_and_exit_2(tmp_path, capsys, args, message):
    nightly(tmp_path / "runs", BASE[:3])
    main(["add", str(tmp_path / "h"), str(tmp_path / "runs")])
    capsys.readouterr()
    assert main([a.format(tmp=tmp_path) for a in args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err


def test_the_module_runs_and_argparse_errors_are_one_line_too():
    proc = subprocess.run([sys.executable, "-m", "harness.history", "chek"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")
