"""The versions of config_sha256 and the workload's hashes (core/hash_versions.py), one test each:
a config, a plan and a run folder as that version wrote them, hashed by that version's own code
(copied from its commit, below), hash and compare equal to what the harness makes now. Then the
migration's machinery: a renamed key hashes an older run again from its files."""

import copy
import hashlib
import json
from types import SimpleNamespace

import pytest
import yaml
from conftest import make_config
from omegaconf import OmegaConf

from core import hash_versions
from core.hash_versions import (
    CONFIG,
    HASH_VERSION,
    PLAN,
    SESSION,
    TURN,
    UNRECORDED,
    Added,
    LeftOut,
    Renamed,
    Version,
    config_digest,
    migrate_config,
)
from harness.config import config_sha256
from harness.results.migrations import config_hash
from harness.results.schema import RunSummary
from harness.results.store import RunWriter, load_run, load_summary
from harness.run.sweep import find_finished
from workloads.base import SessionSpec, TurnSpec, WorkloadPlan, session_json

# --- each version's own code ----------------------------------------------------------------

# config_sha256 left these keys out, from the version named on
PRESENTATION_SINCE = {
    1: ("output_root", "progress", "report", "resume", "save_output_text", "sweep"),
    3: ("machine", "history"),
    4: ("server_metrics",),
    5: ("cost",),
    7: ("repeat",),
    10: ("search",),
}
# ...and, from version 5, these workload keys while unset
WORKLOAD_KEYS_HASHED_WHEN_SET = {"duration_s": None, "stages": None, "ramp": None, "warmup_s": 0.0, "cooldown_s": 0.0}
# config keys that came in with a version: absent from the configs the versions before wrote
# ...and, from version 8, these SLO search keys while unset
SLO_SEARCH_KEYS_HASHED_WHEN_SET = {
    "min_runs": 2,
    "max_runs_per_probe": 5,
    "max_runs": 40,
    "max_time_s": None,
    "alpha": 0.05,
    "noise_dir": None,
}
# ...and, from version 11, these client keys while unset, and these left out
CLIENT_KEYS_HASHED_WHEN_SET = {"cluster": "local", "hosts": None}
CLIENT_KEYS_LEFT_OUT = ("ray_address", "on_host_loss", "clock_samples", "max_clock_drift_ms", "host_timeout_s")
CONFIG_KEYS_SINCE = {
    3: ("machine", "history"),
    4: ("server_metrics",),
    5: ("cost", *(f"workload.{k}" for k in WORKLOAD_KEYS_HASHED_WHEN_SET)),
    8: tuple(f"slo_search.{k}" for k in SLO_SEARCH_KEYS_HASHED_WHEN_SET),
    9: ("backend.batch_itl_ms",),
    10: ("search",),
    11: tuple(f"client.{k}" for k in (*CLIENT_KEYS_HASHED_WHEN_SET, *CLIENT_KEYS_LEFT_OUT)),
}
# ...and, from version 9, these backend keys while unset (where the backend has them)
BACKEND_KEYS_HASHED_WHEN_SET = {"batch_itl_ms": 0.0}


def resolved(*overrides: str) -> dict:
    return OmegaConf.to_container(OmegaConf.structured(make_config(*overrides)), resolve=True)


def config_as_written(version: int, *overrides: str) -> dict:
    """The resolved config (config.yaml) of these settings as ``version`` wrote it."""
    body = resolved(*overrides)
    for since, keys in CONFIG_KEYS_SINCE.items():
        for key in keys if since > version else ():
            *path, last = key.split(".")
            parent = body
            for part in path:
                parent = parent[part]
            parent.pop(last, None)  # a backend's key: only the backends that have it
    return body


def config_sha256_at(version: int, body: dict) -> str:
    """config_sha256 as the code of ``version`` computed it."""
    body = copy.deepcopy(body)
    for since, keys in PRESENTATION_SINCE.items():
        for key in keys if since <= version else ():
            body.pop(key, None)
    if version >= 5:
        workload = body["workload"]
        for key, unset in WORKLOAD_KEYS_HASHED_WHEN_SET.items():
            if key in workload and workload[key] == unset:
                del workload[key]
    if version >= 8:
        search = body["slo_search"]
        for key, unset in SLO_SEARCH_KEYS_HASHED_WHEN_SET.items():
            if key in search and search[key] == unset:
                del search[key]
    if version >= 9:
        backend = body["backend"]
        for key, unset in BACKEND_KEYS_HASHED_WHEN_SET.items():
            if key in backend and backend[key] == unset:
                del backend[key]
    if version >= 11:
        client = body["client"]
        for key, unset in CLIENT_KEYS_HASHED_WHEN_SET.items():
            if key in client and client[key] == unset:
                del client[key]
        for key in CLIENT_KEYS_LEFT_OUT:
            client.pop(key, None)
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def plan_hashes_at(version: int, body: dict) -> tuple[str, str]:
    """(sha256, prompts_sha256) of a workload.json as the code of ``version`` computed them."""
    measured = {k: body[k] for k in ("name", "exact_output_len", "sampling")}
    if version >= 2 and body.get("source"):
        measured["data_sha256"] = body["source"].get("sha256")
    for key in ("lora", "structured"):
        if version >= 6 and body.get(key):
            measured[key] = body[key]
    prompts = dict(measured, sessions=[{k: v for k, v in s.items() if k != "arrival_s"} for s in body["sessions"]])
    content = dict(measured, sessions=body["sessions"])
    if version >= 5 and body.get("schedule"):
        content["schedule"] = body["schedule"]
    return tuple(hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest() for d in (content, prompts))


# --- plans and run folders ------------------------------------------------------------------


def sessions(n: int = 3, **session_fields) -> list[SessionSpec]:
    return [
        SessionSpec(
            i,
            [TurnSpec(f"question {i}", 8, prompt_token_ids=[1, 2, 3 + i]), TurnSpec("and then?", 4, think_time_s=0.5)],
            system="be brief",
            arrival_s=0.25 * i,
            **session_fields,
        )
        for i in range(n)
    ]


def plan(**fields) -> WorkloadPlan:
    defaults = dict(
        name="chat", sessions=sessions(), warmup=sessions(1), exact_output_len=True, concurrency=None, open_loop=True
    )
    return WorkloadPlan(**{**defaults, "sampling": {"temperature": 0.0}, **fields})


def workload_json(p: WorkloadPlan) -> dict:
    """workload.json's measured part, with the full sessions (as every version wrote them for a
    generated workload; a data workload's file keeps them compact, its hashes made from these)."""
    head = {k: v for k, v in p.to_json().items() if k not in ("sessions", "warmup", "sha256", "prompts_sha256")}
    return {**head, "sessions": [json.loads(json.dumps(session_json(s))) for s in p.sessions]}


def assert_hashes_now(p: WorkloadPlan, version: int) -> None:
    """The plan's hashes now are the ones ``version``'s code made of the same plan."""
    old = plan_hashes_at(version, workload_json(p))
    assert tuple(p.hashes().values()) == old
    body = workload_json(p)
    assert (WorkloadPlan.content_hash(body), WorkloadPlan.prompts_hash(body)) == old  # an older workload.json again


def old_run(folder, version, config: dict, p: WorkloadPlan, recorded=False):
    """A finished run folder as ``version`` left it (recording no version, as none did before
    this one, unless ``recorded``)."""
    RunWriter(folder).write_summary(RunSummary(status="complete"))
    summary = json.loads((folder / "summary.json").read_text())
    for key in ("schema_version", "hash_version"):
        summary.pop(key)
    sha, prompts = plan_hashes_at(version, workload_json(p))
    summary.update(config_sha256=config_sha256_at(version, config), workload={"name": p.name, "sha256": sha})
    summary["workload"]["prompts_sha256"] = prompts
    if recorded:
        summary["hash_version"] = version
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "workload.json").write_text(json.dumps(workload_json(p)))
    return folder


def assert_run_compares_equal(tmp_path, version: int, overrides: tuple[str, ...], p: WorkloadPlan) -> None:
    """A run of ``version`` is the same point as these settings now: resume finds it, and its
    hashes load as the current ones."""
    for recorded in (False, True):
        root = tmp_path / f"recorded-{recorded}"
        folder = old_run(root / "run", version, config_as_written(version, *overrides), p, recorded)
        assert find_finished(root, config_sha256(make_config(*overrides))) == {1: folder}
        summary = load_run(folder).summary
        assert summary.hash_version == (version if recorded else UNRECORDED)
        assert summary.config_sha256 == config_sha256(make_config(*overrides))
        assert {k: summary.workload[k] for k in ("sha256", "prompts_sha256")} == p.hashes()


def form_6(*overrides: str) -> str:
    """config_sha256 of these settings as versions 1 to 6 made it (their forms agree: none
    changed a hash); version 7 dropped ``repeat`` from it."""
    return config_sha256_at(6, config_as_written(6, *overrides))


# --- one test per version -------------------------------------------------------------------


@pytest.mark.slow
def test_version_1_the_first_form(tmp_path):
    old = config_as_written(1)
    assert config_sha256_at(1, old) == form_6()  # version 7 dropped repeat: older runs are hashed again
    assert config_sha256(make_config()) == config_digest(migrate_config(old, 1))
    assert_hashes_now(plan(), 1)
    assert_run_compares_equal(tmp_path, 1, (), plan())


def test_before_version_1_the_prompts_hash_comes_from_workload_json(tmp_path):
    p = plan()
    folder = old_run(tmp_path / "run", 1, config_as_written(1), p)
    summary = json.loads((folder / "summary.json").read_text())
    del summary["config_sha256"], summary["workload"]["prompts_sha256"]
    (folder / "summary.json").write_text(json.dumps(summary))
    assert load_summary(folder)["workload"]["prompts_sha256"] == p.hashes()["prompts_sha256"]
    assert "config_sha256" not in load_summary(folder)  # none to migrate: such a run is never resumed


def test_version_2_data_workloads(tmp_path):
    source = {"path": "/data/chat.jsonl", "format": "sharegpt", "sha256": "d" * 64, "records": 3}
    data = sessions(history=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
    for s in data:
        s.turns[0].reply, s.turns[0].prompt_id = "a reply from the data", f"conv-{s.session_id}"
    assert_hashes_now(plan(name="sharegpt", sessions=data, source=source), 2)
    assert_hashes_now(plan(), 2)  # a generated workload: as version 1 hashed it
    assert config_sha256_at(2, config_as_written(2)) == config_sha256_at(1, config_as_written(1))
    data_file = tmp_path / "chat.jsonl"
    data_file.write_text("[]")
    assert_run_compares_equal(tmp_path, 2, ("workload=sharegpt", f"workload.path={data_file}"), plan())


@pytest.mark.slow
def test_version_3_the_gate_leaves_machine_and_history_out(tmp_path):
    now = config_sha256(make_config())
    assert config_sha256_at(3, config_as_written(3)) == config_sha256_at(2, config_as_written(2)) == form_6()
    assert config_sha256(make_config("history=/somewhere", "machine.enabled=false")) == now
    assert_run_compares_equal(tmp_path, 3, ("history=/somewhere",), plan())


def test_version_4_server_metrics_left_out(tmp_path):
    now = config_sha256(make_config())
    assert config_sha256_at(4, config_as_written(4)) == config_sha256_at(3, config_as_written(3)) == form_6()
    assert config_sha256(make_config("server_metrics.enabled=false")) == now
    assert_run_compares_equal(tmp_path, 4, (), plan())


def test_version_5_load_over_time(tmp_path):
    now = config_sha256(make_config())
    assert config_sha256_at(5, config_as_written(5)) == config_sha256_at(4, config_as_written(4)) == form_6()
    timed = ("workload=synthetic", "workload.rate=2", "workload.duration_s=5", "workload.warmup_s=1")
    assert config_sha256_at(5, config_as_written(5, *timed)) == form_6(*timed) != form_6()
    assert config_sha256(make_config(*timed)) != now
    schedule = SimpleNamespace(kind="rate", to_json=lambda: [{"start_s": 0, "end_s": 5, "rate": 2.0}])
    timed_plan = plan(schedule=schedule)
    assert_hashes_now(timed_plan, 5)
    assert timed_plan.hashes()["prompts_sha256"] == plan().hashes()["prompts_sha256"]  # arrivals only
    assert_run_compares_equal(tmp_path, 5, timed, timed_plan)


def test_version_6_agents_lora_and_structured_output(tmp_path):
    tree = sessions(adapter="a0", job_id=0, depth=1)
    tree[1].parent = (0, 1)
    lora = [{"name": "a0", "path": "store:adapter-0", "share": 1.0}]
    structured = {"response_format": {"type": "regex", "pattern": "[0-9]+"}, "tools": None, "tool_choice_share": 1.0}
    assert_hashes_now(plan(name="agentic", sessions=tree, lora=lora, structured=structured), 6)
    assert_hashes_now(plan(), 6)
    assert config_sha256_at(6, config_as_written(6)) == config_sha256_at(5, config_as_written(5))
    assert_run_compares_equal(tmp_path, 6, ("workload=agentic",), plan(sessions=tree, lora=lora))


@pytest.mark.slow
def test_version_7_repeat_left_out(tmp_path):
    """How many times a point runs is not what a run measures: a repeated point's runs hash as a
    single run's (an A/A floor of single runs is theirs); version 6's hashes covered it, so its
    runs are hashed again from config.yaml, repeat=1 and repeat=3 alike."""
    now = config_sha256(make_config())
    assert config_sha256(make_config("repeat=3")) == now == config_sha256_at(7, config_as_written(7, "repeat=3"))
    assert config_sha256_at(6, config_as_written(6, "repeat=3")) != config_sha256_at(6, config_as_written(6)) != now
    assert not hash_versions.keeps_hashes(6) and hash_versions.keeps_hashes(7)
    for version in (6, 7):
        assert_run_compares_equal(tmp_path / str(version), version, ("repeat=3",), plan())


@pytest.mark.slow
def test_version_8_the_slo_search_budget(tmp_path):
    """The SLO search's new keys are hashed only when set: a config of version 7 hashes as before,
    and a probe's runs (their slo_search section the defaults) hash as a plain run's."""
    now = config_sha256(make_config())
    assert config_sha256_at(8, config_as_written(8)) == config_sha256_at(7, config_as_written(7)) == now
    assert config_sha256(make_config("slo_search.max_runs=12")) != now
    assert_run_compares_equal(tmp_path, 7, (), plan())


@pytest.mark.slow
def test_version_9_the_reference_servers_batch_itl(tmp_path):
    """backend.batch_itl_ms is hashed only when set: the reference runs before it keep their hashes."""
    ref = ("backend=reference",)
    assert config_sha256_at(8, config_as_written(8, *ref)) == config_sha256(make_config(*ref))
    assert config_sha256(make_config(*ref, "backend.batch_itl_ms=2")) != config_sha256(make_config(*ref))
    assert config_sha256_at(9, config_as_written(9, *ref)) == config_sha256_at(8, config_as_written(8, *ref))
    assert hash_versions.keeps_hashes(8)
    for version in (8, 9):
        assert_run_compares_equal(tmp_path / str(version), version, ref, plan())


def test_version_10_the_search_left_out(tmp_path):
    """A search's settings choose the points it runs; they are not what a point measures."""
    now = config_sha256(make_config())
    assert config_sha256(make_config("search.trials=7", "search.objectives=[ttft_s.p50:min]")) == now
    assert config_sha256_at(10, config_as_written(10, "search.trials=7")) == now
    assert config_sha256_at(9, config_as_written(9)) == now
    assert hash_versions.keeps_hashes(9)
    assert_run_compares_equal(tmp_path, 10, ("search.trials=7",), plan())


@pytest.mark.slow
def test_version_11_client_hosts_on_a_ray_cluster(tmp_path):
    """Where the client runs is hashed once set (cluster=ray, hosts); the cluster's address and the
    clock and loss settings never are: a config of version 10 hashes as before."""
    now = config_sha256(make_config())
    assert config_sha256_at(11, config_as_written(11)) == config_sha256_at(10, config_as_written(10)) == now
    watched = ("client.ray_address=10.0.0.1:6379", "client.on_host_loss=stop", "client.clock_samples=64")
    assert config_sha256(make_config(*watched, "client.max_clock_drift_ms=5", "client.host_timeout_s=9")) == now
    served = config_sha256(make_config("backend=reference"))
    assert config_sha256(make_config("backend=reference", "client.cluster=ray")) != served
    assert config_sha256(make_config("client.hosts=2")) != now
    assert_run_compares_equal(tmp_path, 10, (), plan())


def test_every_version_has_its_test():
    tested = {int(name.split("_")[2]) for name in globals() if name.startswith("test_version_")}
    assert tested == {v.number for v in hash_versions.VERSIONS}, "a new version needs its test here"


def test_fields_added_to_sessions_and_turns_are_versioned():
    """A session or turn field the first plans lacked is in the hashes only when set, which is a
    version's entry: a field added without one would change every plan's hashes."""
    first = {
        SESSION: {"session_id", "turns", "system", "arrival_s"},
        TURN: {"user", "output_len", "think_time_s", "prompt_token_ids"},
    }
    for where, cls in ((SESSION, SessionSpec), (TURN, TurnSpec)):
        added = {name for name in cls.__slots__} - first[where]
        assert added == set(hash_versions.hashed_when_set(where)), f"{cls.__name__}: version the new fields"


# --- the machinery ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        (),
        ("workload=synthetic", "workload.rate=2.5"),
        ("workload=synthetic", "workload.stages=[{duration_s:2,rate:3}]"),
        ("backend=reference",),
    ],
)
def test_config_yaml_hashes_as_the_config(tmp_path, overrides):
    """What hashing an older run again rests on: its config.yaml gives its config_sha256."""
    cfg = make_config(*overrides)
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
    assert config_hash(tmp_path, HASH_VERSION) == config_sha256(cfg)
    assert config_hash(tmp_path / "nowhere", HASH_VERSION) is None


def renamed_version(monkeypatch):
    """A version 7 that renames a config key and a turn field: older hashes no longer hold."""
    seven = Version(
        HASH_VERSION + 1,
        "test",
        "renames",
        (Renamed(CONFIG, "workload.concurrency", "workload.users"), Renamed(TURN, "output_len", "max_tokens")),
    )
    monkeypatch.setattr(hash_versions, "VERSIONS", (*hash_versions.VERSIONS, seven))
    return seven


def test_a_renamed_key_hashes_older_runs_again(tmp_path, monkeypatch):
    p = plan()
    folder = old_run(tmp_path / "run", HASH_VERSION, config_as_written(HASH_VERSION), p, recorded=True)
    written = json.loads((folder / "summary.json").read_text())
    assert load_summary(folder)["config_sha256"] == written["config_sha256"]
    renamed_version(monkeypatch)
    assert not hash_versions.keeps_hashes(HASH_VERSION) and hash_versions.keeps_hashes(HASH_VERSION + 1)

    config = config_as_written(HASH_VERSION)
    config["workload"]["users"] = config["workload"].pop("concurrency")
    body = workload_json(p)
    for s in body["sessions"]:
        for t in s["turns"]:
            t["max_tokens"] = t.pop("output_len")
    loaded = load_summary(folder)
    assert loaded["config_sha256"] == config_digest(config) != written["config_sha256"]
    assert loaded["workload"]["sha256"] == WorkloadPlan.content_hash(body) != written["workload"]["sha256"]
    assert loaded["workload"]["prompts_sha256"] == WorkloadPlan.prompts_hash(body)

    # a run made at the new version is read as written; a compact workload.json cannot be hashed again
    (folder / "summary.json").write_text(json.dumps({**written, "hash_version": HASH_VERSION + 1}))
    assert load_summary(folder)["workload"] == written["workload"]
    (folder / "summary.json").write_text(json.dumps(written))
    (folder / "workload.json").write_text(json.dumps({**body, "compact": True}))
    assert load_summary(folder)["workload"]["sha256"] == written["workload"]["sha256"]


def test_a_key_added_then_renamed_is_hashed_when_set_by_its_new_name(monkeypatch):
    renamed_version(monkeypatch)
    monkeypatch.setattr(
        hash_versions,
        "VERSIONS",
        (
            *hash_versions.VERSIONS,
            Version(HASH_VERSION + 2, "test", "", (Renamed(CONFIG, "workload.ramp", "workload.slope"),)),
        ),
    )
    assert "workload.slope" in hash_versions.hashed_when_set(CONFIG)
    assert "workload.ramp" not in hash_versions.hashed_when_set(CONFIG)


def test_a_migration_is_idempotent_so_an_unrecorded_run_starts_at_the_first(monkeypatch):
    renamed_version(monkeypatch)
    old = config_as_written(1)
    once = migrate_config(copy.deepcopy(old), UNRECORDED)
    assert "users" in once["workload"] and "concurrency" not in once["workload"]
    assert migrate_config(copy.deepcopy(once), UNRECORDED) == once
    assert once["workload"]["duration_s"] is None and once["workload"]["warmup_s"] == 0.0  # added since version 1


@pytest.mark.parametrize(
    "versions,problem",
    [
        ((Version(2, "", "", ()),), "numbered"),
        ((Version(1, "", "", (LeftOut("report"),)), Version(2, "", "", (LeftOut("report"),))), "changes twice"),
        ((Version(1, "", "", (Added(PLAN, "lora"), Renamed(PLAN, "x", "lora"))),), "changes twice"),
        ((Version(1, "", "", (Added(TURN, "seed", 0),)),), "unset as None"),
    ],
)
def test_the_list_keeps_its_rules(versions, problem):
    with pytest.raises(ValueError, match=problem):
        hash_versions.check_versions(versions)
