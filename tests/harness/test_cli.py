"""`python -m harness` as a user runs it: output, errors, sweeps, Ctrl-C."""

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_harness_cli

SLOW = pytest.mark.slow

FAST = ["model=tiny-random", "workload=synthetic", "workload.input_len=48", "workload.output_len=4", "progress=false"]


def error_line(proc):
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert proc.returncode != 0
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize(
    "arg,choices",
    [
        (
            "backend=nope",
            "unknown backend 'nope': choose one of deepspeed_mii, llamacpp, mlx, ollama, openai, reference, sglang, tensorrt_llm, tgi, transformers, vllm",
        ),
        (
            "workload=nope",
            "unknown workload 'nope': choose one of agentic, chat, jsonl, shared_prefix, sharegpt, structured, synthetic, trace",
        ),
        ("model=nope", "unknown model 'nope': choose one of smollm2-135m, tiny-random"),
    ],
)
def test_unknown_choice_is_one_line(tmp_path, arg, choices):
    proc = run_harness_cli(arg, cwd=tmp_path)
    assert error_line(proc).startswith(f"error: {choices}")


@pytest.mark.parametrize(
    "arg,message",
    [
        # a value the harness's own checks refuse: python -m harness imports its config and its
        # checks first (about 2 s here, each)
        pytest.param("workload.output_len=-3", "workload.output_len must be >= 1 (got -3)", marks=SLOW),
        pytest.param("workload.concurrency=0", "workload.concurrency must be >= 1 (got 0)", marks=SLOW),
        pytest.param("workload.rate=0", "workload.rate must be > 0", marks=SLOW),
        pytest.param("workload.input_len=-1", "workload.input_len must be >= 1 (got -1)", marks=SLOW),
        pytest.param("workload.arrival=weibull", "unknown arrival process 'weibull'", marks=SLOW),
        pytest.param("workload.rate=nan", "workload.rate must be a finite number (got nan)", marks=SLOW),
        pytest.param("slo.tpot_s=inf", "slo.tpot_s must be a finite number (got inf)", marks=SLOW),
        pytest.param("seed=-1", "seed must be >= 0 (got -1)", marks=SLOW),
        pytest.param("repeat=0", "repeat must be >= 1 (got 0)", marks=SLOW),
        pytest.param("workload.top_p=0", "workload.top_p must be in (0, 1] (got 0", marks=SLOW),
        # Hydra's own errors (several lines, pointing at a stack trace) as one line
        (
            "workload.duration_s=abc",
            "Error merging override workload.duration_s=abc (Value 'abc' of type 'str' could "
            "not be converted to Float)",
        ),
        ("workload.foo=1", "Could not override 'workload.foo'. (Key 'foo' not in 'SyntheticConfig')"),
        # Hydra's answer to the line above is to add the key with '+': a key no setting reads
        ("+workload.concurency=8", "workload.concurency: no such setting (check the spelling; workload has arrival, "),
        ("+backend.foo.bar=1", "backend.foo: no such setting (check the spelling; backend has "),
    ],
)
def test_bad_values_fail_before_any_model_loads(tmp_path, arg, message):
    # the model path does not exist: the config error must come first
    proc = run_harness_cli(
        "workload=synthetic", arg, "model.path=/no/such/model", f"output_root={tmp_path}", cwd=tmp_path
    )
    assert error_line(proc).startswith(f"error: {message}")
    assert list(tmp_path.iterdir()) == []  # no results folder for a run that never started


def test_a_file_in_the_way_of_the_results_is_one_line(tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_text("")
    proc = run_harness_cli(
        "workload=synthetic", "model.path=/no/such/model", f"hydra.run.dir={plain}/run", cwd=tmp_path
    )
    assert error_line(proc) == f"error: hydra.run.dir={plain}/run: {plain} is a file, not a folder; give a folder path"
    proc = run_harness_cli(
        "workload=synthetic", "model.path=/no/such/model", "hydra.run.dir=/proc/nope/run", cwd=tmp_path
    )
    assert error_line(proc).startswith("error: hydra.run.dir=/proc/nope/run: cannot make folders in /proc (")


@pytest.mark.slow
def test_bad_model_files_are_one_line(tmp_path, tiny_model):
    import shutil

    folder = tmp_path / "no-tokenizer"
    folder.mkdir()
    shutil.copy(tiny_model.hf_dir / "config.json", folder)
    proc = run_harness_cli("model.path=" + str(folder), "workload=synthetic", f"output_root={tmp_path}", cwd=tmp_path)
    assert error_line(proc).startswith(f"error: could not read the tokenizer of model no-tokenizer ({folder})")
    fake = tmp_path / "fake.gguf"
    fake.write_text("not a gguf")
    for mode in ("inprocess", "server"):
        proc = run_harness_cli(
            "backend=llamacpp", f"backend.mode={mode}", f"model.path={fake}", f"output_root={tmp_path}", cwd=tmp_path
        )
        assert error_line(proc) == f"error: {fake} is not a GGUF file (bad header); give a valid .gguf as model.path"


@pytest.mark.slow
def test_server_command_example_of_the_readme_parses(tmp_path):
    proc = run_harness_cli(
        "backend=llamacpp",
        "backend.mode=server",
        'backend.server_command=[/opt/llama.cpp/llama-server,-m,"{gguf}",--port,"{port}"]',
        "--cfg",
        "job",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "- '{gguf}'" in proc.stdout and "- '{port}'" in proc.stdout


@pytest.mark.slow
def test_missing_model_path_names_the_path(tmp_path):
    proc = run_harness_cli("model.path=/no/such/model", f"output_root={tmp_path}", cwd=tmp_path)
    assert error_line(proc) == "error: model.path /no/such/model does not exist"


@pytest.mark.slow
def test_hub_model_without_network_points_to_model_path(tmp_path):
    env = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_ETAG_TIMEOUT": "2"}
    proc = run_harness_cli("model.id=SomeOrg/some-model", f"output_root={tmp_path}", cwd=tmp_path, env=env, timeout=120)
    line = error_line(proc)
    assert "could not download model.id=SomeOrg/some-model from http://127.0.0.1:9" in line
    assert "model.path=" in line


@pytest.mark.engine
def test_run_of_a_local_hf_folder_prints_summary_then_results_folder(tmp_path, tiny_model):
    proc = run_harness_cli(
        *FAST, f"model.path={tiny_model.hf_dir}", "workload.num_requests=3", f"output_root={tmp_path}", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[-1].startswith("results: ")
    run_dir = Path(lines[-1].removeprefix("results: "))
    assert (run_dir / "summary.json").exists() and run_dir.parent == tmp_path
    assert "TTFT (ms)" in proc.stdout and "throughput:" in proc.stdout and "memory:" in proc.stdout
    assert json.loads((run_dir / "summary.json").read_text())["model"]["hf_dir"] == str(tiny_model.hf_dir)


@pytest.mark.slow
@pytest.mark.engine  # the suggested run loads an engine (transformers, where it is installed)
def test_a_run_ends_with_its_report_and_the_commands_that_compare_it_with_another_engine(tmp_path):
    """The last lines: the report, the same overrides on another engine (the engine's own and
    the output's left out) into a folder named in advance, and compare of the two; the printed
    commands run as they are."""
    reference = ["backend=reference", "backend.ttft_ms=5", "backend.itl_ms=1"]
    workload = [*FAST, "workload.num_requests=3"]
    proc = run_harness_cli(*reference, *workload, "output_root=results", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    *_, report, next_line, again, compare, results = proc.stdout.strip().splitlines()
    run_dir = Path(results.removeprefix("results: "))
    shown = run_dir.relative_to(tmp_path)  # the lines' paths are relative to where the run was started
    assert report == f"report: {shown}/report.html" and (run_dir / "report.html").is_file()
    other = next_line.removeprefix("next: the same run on ").removesuffix(", then the two side by side:")
    assert other not in ("reference", next_line)  # an engine, the reference server being no engine
    stamp = run_dir.name.removesuffix("-reference-synthetic")
    other_dir, compare_dir = f"results/{stamp}-{other}-synthetic", f"results/compare-{stamp}"
    assert shlex.split(again) == [
        "python",
        "-m",
        "harness",
        f"backend={other}",
        *workload,
        f"hydra.run.dir={other_dir}",
    ]
    assert shlex.split(compare) == ["python", "-m", "harness.compare", str(shown), other_dir, "--out", compare_dir]

    for command in (again, compare):
        argv = shlex.split(command)
        ran = subprocess.run(
            [sys.executable, *argv[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False
        )
        assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads((tmp_path / other_dir / "summary.json").read_text())["backend"]["name"] == other
    assert ran.stdout.strip().splitlines()[-1] == f"compare: {compare_dir}/compare.html"
    assert (tmp_path / compare_dir / "compare.html").is_file()


def test_the_next_run_keeps_the_overrides_less_the_engines_and_the_outputs():
    from harness.next_run import comparable_overrides
    from harness.reports.console import next_run_lines

    given = ["backend=vllm", "backend.max_model_len=1024", "+backend.foo=1", "model=smollm2-135m"]
    given += ["workload.prompt=a b", "output_root=/x", "hydra.run.dir=/x/run", "seed=3"]
    kept = comparable_overrides(given)
    assert kept == ["model=smollm2-135m", "workload.prompt=a b", "seed=3"]
    lines = next_run_lines(Path("/r/20261205-101500-vllm-chat"), "vllm", "chat", "llamacpp", kept)
    assert lines[1:] == [
        "  python -m harness backend=llamacpp model=smollm2-135m 'workload.prompt=a b' seed=3 "
        "hydra.run.dir=/r/20261205-101500-llamacpp-chat",
        "  python -m harness.compare /r/20261205-101500-vllm-chat /r/20261205-101500-llamacpp-chat "
        "--out /r/compare-20261205-101500",
    ]
    named = next_run_lines(Path("runs/mine"), "vllm", "chat", "llamacpp", [])
    assert named[2] == "  python -m harness.compare runs/mine runs/mine-llamacpp --out runs/compare-mine"


def test_import_without_any_engine():
    code = (
        "import sys\n"
        "for name in ('torch', 'vllm', 'sglang', 'llama_cpp', 'mlx', 'mlx_lm'):\n"
        "    sys.modules[name] = None\n"
        "import harness, backends, workloads\n"
        "from harness.cli import register_everything\n"
        "register_everything()\n"
        "from backends import backend_registry\n"
        "from core.errors import BackendUnavailable\n"
        "try:\n"
        "    backend_registry.get('transformers').cls.check_available()\n"
        "except BackendUnavailable as e:\n"
        "    print(e)\n"
    )
    # find_spec sees a None entry in sys.modules as 'not installed'
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "pip install -e '.[transformers]'" in proc.stdout


def test_no_code_outside_the_registry_branches_on_a_backend_name():
    names = [
        "transformers",
        "vllm",
        "sglang",
        "llamacpp",
        "mlx",
        "openai",
        "tgi",
        "tensorrt_llm",
        "deepspeed_mii",
        "ollama",
    ]
    offenders = []
    for path in list((REPO / "harness").rglob("*.py")) + list((REPO / "workloads").rglob("*.py")):
        text = path.read_text()
        for name in names:
            for pattern in (f'== "{name}"', f"== '{name}'", f'"{name}" ==', f'in ("{name}"'):
                if pattern in text:
                    offenders.append(f"{path.name}: {pattern}")
    assert offenders == []


@pytest.mark.parametrize(
    "module",
    [  # the commands that import the harness's config take about 2 s here, each
        pytest.param("harness", marks=SLOW),
        pytest.param("harness.compare", marks=SLOW),
        "harness.report",
        pytest.param("harness.agree", marks=SLOW),
        pytest.param("harness.ab", marks=SLOW),
        "harness.history",
        "harness.reference_server",
        "refserver",
    ],
)
def test_every_entry_command_answers_help(module):
    proc = subprocess.run(
        [sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.lower().lstrip().startswith("usage:"), proc.stdout[:200]
    if module == "harness":  # the choices a user types (not ConfigStore's schema nodes), then the config
        from harness.preflight import group_choices

        assert f"  backend: {', '.join(group_choices('backend'))}\n" in proc.stdout
        assert "_schema" not in proc.stdout and "\nbackend:\n  name: transformers\n" in proc.stdout
