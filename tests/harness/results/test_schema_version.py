"""summary.json's schema version: written into every summary, an older file (none recorded) read
as before, a newer minor read, a newer major refused in one line by every reader (compare,
report, history, the gate, resume)."""

import json

import pytest

from core.hash_versions import HASH_VERSION, UNRECORDED
from harness.results.schema import SCHEMA_VERSION, UNVERSIONED_SCHEMA, RunSummary, schema_major
from harness.results.store import NewerSummary, RunWriter, UnreadableSummary, load_run, load_summary

NEWER_MAJOR = f"{schema_major(SCHEMA_VERSION) + 1}.0"


def run_folder(path, **edits):
    """A finished run folder whose summary.json holds ``edits`` (None: the key removed)."""
    RunWriter(path).write_summary(RunSummary(status="complete", config_sha256="c" * 64))
    summary = json.loads((path / "summary.json").read_text())
    summary.update(edits)
    summary = {k: v for k, v in summary.items() if v is not None}
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def test_every_summary_records_its_schema_and_hash_versions(tmp_path):
    written = json.loads((run_folder(tmp_path) / "summary.json").read_text())
    assert written["schema_version"] == SCHEMA_VERSION and written["hash_version"] == HASH_VERSION
    assert list(written)[0] == "schema_version"  # the first key: what a reader checks first


def test_a_summary_from_before_versions_reads_as_it_did(tmp_path):
    run_folder(tmp_path, schema_version=None, hash_version=None)
    assert "schema_version" not in load_summary(tmp_path)
    summary = load_run(tmp_path).summary
    assert summary.schema_version == UNVERSIONED_SCHEMA and summary.hash_version == UNRECORDED
    assert summary.status == "complete" and summary.config_sha256 == "c" * 64


@pytest.mark.parametrize("version", [SCHEMA_VERSION, UNVERSIONED_SCHEMA, f"{schema_major(SCHEMA_VERSION)}.99", 1])
def test_older_versions_and_newer_minors_are_read(tmp_path, version):
    run_folder(tmp_path, schema_version=version, a_key_from_a_newer_minor={"x": 1})
    assert load_run(tmp_path).summary.status == "complete"


@pytest.mark.parametrize(
    "version", [NEWER_MAJOR, schema_major(SCHEMA_VERSION) + 1, f"{schema_major(SCHEMA_VERSION) + 7}.3"]
)
def test_a_newer_major_is_refused_naming_the_file_and_the_versions(tmp_path, version):
    run_folder(tmp_path, schema_version=version)
    with pytest.raises(NewerSummary) as refused:
        load_summary(tmp_path)
    message = str(refused.value)
    assert "\n" not in message and str(tmp_path / "summary.json") in message
    assert f"schema version {version}" in message and SCHEMA_VERSION in message


@pytest.mark.parametrize("version", ["two", "1.x", "", None, True, [1]])
def test_a_version_that_is_no_version_is_unreadable(tmp_path, version):
    run_folder(tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    (tmp_path / "summary.json").write_text(json.dumps({**summary, "schema_version": version}))
    with pytest.raises(UnreadableSummary, match="schema_version"):
        load_summary(tmp_path)


def one_line_refusal(err: str, folder) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(folder / "summary.json") in lines[0] and NEWER_MAJOR in lines[0], err


def test_compare_and_report_refuse_a_newer_major_in_one_line(tmp_path, capsys):
    from harness.reports.compare import cli as compare_cli
    from harness.reports.run_report import main as report_main

    old = run_folder(tmp_path / "old")
    newer = run_folder(tmp_path / "newer", schema_version=NEWER_MAJOR)
    assert compare_cli.main([str(old), str(newer), "--out", str(tmp_path / "out")]) == 2
    one_line_refusal(capsys.readouterr().err, newer)
    assert report_main([str(newer)]) == 2
    one_line_refusal(capsys.readouterr().err, newer)


def test_history_gate_and_resume_refuse_a_newer_major(tmp_path):
    from harness.gate.paired import load_block
    from harness.history.store import add_run
    from harness.run.sweep import find_finished

    old = run_folder(tmp_path / "runs" / "old")
    newer = run_folder(tmp_path / "runs" / "newer", schema_version=NEWER_MAJOR)
    with pytest.raises(NewerSummary, match="newer than this harness reads"):
        add_run(tmp_path / "history", newer)
    with pytest.raises(NewerSummary):
        load_block(0, old, newer)  # not taken for a failed run
    with pytest.raises(NewerSummary):
        find_finished(tmp_path / "runs", "c" * 64)
