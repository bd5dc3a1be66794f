"""The run's ``fabric`` (training/fabric.py): recorded NCCL logs through the run's summariser, the capture env and
the user's own NCCL_DEBUG* settings, counters, the verdict kept with checkpoints. No Ray cluster: the rank side
(:class:`Probe`) runs in-process with a one-rank stand-in for torch.distributed."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from ray_efa_eks.efacheck.nccl_log import analyze_paths
from ray_efa_eks.training import fabric
from ray_efa_eks.training.errors import EXIT_WRONG_FABRIC
from ray_efa_eks.training.run import refusal_message

REPO = Path(__file__).resolve().parents[2]
LOG_DIRS = [d for d in (REPO / "tests/fixtures/nccl-logs", Path("/work/shared/nccl-logs")) if d.is_dir()]
EFA = "real_efa_g7e_slurm_nccl2292_ofi1180_2node.log"
FALLBACK = "real_socket_g6e_k8s_ofi_no_eligible_providers_nccl2273.log"
SINGLE_NODE = "real_undet_p4d_single_node_ofi_init_failed_socket_nccl2277.log"


def _summary(path: Path, **kw) -> dict:
    return fabric.summarize("nccl", {str(path): path.read_bytes()}, **kw)


@pytest.mark.parametrize("d", LOG_DIRS, ids=lambda d: d.parent.name)
@pytest.mark.parametrize(
    "name, verdict, network, nodes",
    [(EFA, "efa", "Libfabric", 2), (FALLBACK, "fallback", "Socket", 4), (SINGLE_NODE, "undetermined", "Socket", 1)],
)
def test_recorded_logs_give_the_expected_fabric(d, name, verdict, network, nodes):
    fab = _summary(d / name)
    assert (fab["verdict"], fab["network"], fab["nodes"]) == (verdict, network, nodes)
    assert fab["deciding"] and fab["deciding"].startswith(f"{d / name}:") and fab["reasons"]
    if verdict == "efa":
        assert fab["provider"] == "efa"
    else:
        assert fab["hints"]
    assert "[fabric] " + verdict in fabric.line(fab)


@pytest.mark.parametrize("d", LOG_DIRS, ids=lambda d: d.parent.name)
def test_every_recorded_log_is_judged_by_the_gates_code(d):
    """Same verdict, network, nodes and deciding line as `nccl_log` (the gate) on each published log."""
    for log in sorted(d.glob("*.log")):
        rep, fab = analyze_paths([str(log)]), _summary(log)
        assert (fab["verdict"], fab["network"], fab["nodes"], fab["deciding"]) == (
            rep.verdict,
            rep.network,
            rep.nodes,
            rep.evidence[0] if rep.evidence else None,
        ), log.name


def _split_per_rank(log: Path, out: Path) -> dict[str, bytes]:
    """A combined log cut into one file per host:pid, as the run's per-rank NCCL_DEBUG_FILEs hold it."""
    per: dict[str, list[str]] = defaultdict(list)
    for ln in log.read_text().splitlines(keepends=True):
        m = re.match(r"([\w.\-]+):(\d+):\d+ \[", ln)
        if m:
            per[f"{m.group(1)}-{m.group(2)}"].append(ln)
    files = {}
    for key, lines in per.items():
        (out / f"nccl-{key}.log").write_text("".join(lines))
        files[str(out / f"nccl-{key}.log")] = "".join(lines).encode()
    return files


def test_per_rank_files_of_a_two_node_efa_run_are_efa(tmp_path):
    files = _split_per_rank(LOG_DIRS[0] / "real_efa_p3dn_k8s_mpijob_nccl264_16ranks.log", tmp_path)
    assert len(files) == 16
    fab = fabric.summarize("nccl", files)
    assert (fab["verdict"], fab["nodes"], fab["ranks"]) == ("efa", 2, 16)
    # A rank whose file stayed empty (it never spoke) keeps the run from being called efa.
    silent = {**files, str(tmp_path / "nccl-missing.log"): None}
    assert fabric.summarize("nccl", silent)["verdict"] == "undetermined"


def test_cpu_runs_are_not_nccl_with_the_reason():
    fab = fabric.summarize("gloo", {})
    assert fab["verdict"] == "not-nccl" and "gloo" in fab["reasons"][0] and "NCCL" in fab["reasons"][0]
    assert fabric.line(fab).startswith("[fabric] not-nccl (backend gloo")
    msg = refusal_message(fab, "r1")
    assert "--require-efa" in msg and "not-nccl" in msg and "nothing was checkpointed" in msg
    assert EXIT_WRONG_FABRIC not in (0, 1, 2, 4, 64, 130)


# -- the capture env and the user's own NCCL_DEBUG* settings ------------------------------------------------------


def test_capture_sets_info_init_net_and_a_per_rank_file(tmp_path):
    plan = fabric.plan_capture("nccl", {}, str(tmp_path), 3, "node-a", 4242)
    assert plan["env"] == {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
        "NCCL_DEBUG_FILE": str(tmp_path / "nccl-rank3-node-a-4242.log"),
    }
    assert plan["log"] == plan["env"]["NCCL_DEBUG_FILE"]
    assert fabric.plan_capture("gloo", {}, str(tmp_path), 0, "h", 1)["env"] == {}
    assert fabric.log_dir_for("/data/runs", "r1", "/tmp") == "/data/runs/r1/nccl-logs"
    assert fabric.log_dir_for("s3://b/p", "r1", "/tmp") == "/tmp/ray-efa-eks-nccl-logs/r1"


@pytest.mark.parametrize(
    "user, reads",
    [
        ({"NCCL_DEBUG": "WARN"}, None),
        ({"NCCL_DEBUG": "INFO"}, None),  # NCCL prints to the job's stdout: kept there, not redirected
        ({"NCCL_DEBUG_SUBSYS": "ALL"}, None),
        ({"NCCL_DEBUG_FILE": "/x/n.%h.%p"}, None),  # no level: NCCL logs nothing
        ({"NCCL_DEBUG": "info", "NCCL_DEBUG_FILE": "/logs/nccl.%h.%p.%%.%q"}, "/logs/nccl.node-a.4242.%.%q"),
    ],
)
def test_the_users_nccl_debug_settings_are_kept(tmp_path, user, reads):
    plan = fabric.plan_capture("nccl", {"PATH": "/bin", **user}, str(tmp_path), 0, "node-a", 4242)
    assert plan["env"] == {} and plan["log"] == reads
    if reads is None:
        assert all(f"{k}={v}" in plan["note"] for k, v in user.items()) and "unset" in plan["note"]


def test_nccl_hostname_is_cut_like_nccls():
    assert fabric.nccl_hostname("ip-10-0-1-2.ec2.internal") == "ip-10-0-1-2"
    assert fabric.nccl_hostname("a%b/c") == "a-b-c"


class OneRank:
    """torch.distributed for a world of one: what Probe.judge calls."""

    @staticmethod
    def get_world_size():
        return 1

    @staticmethod
    def gather_object(obj, out, dst=0):
        out[0] = obj

    @staticmethod
    def broadcast_object_list(box, src=0):
        pass


def test_probe_sets_the_env_then_judges_what_nccl_wrote(tmp_path):
    env: dict = {}
    probe = fabric.Probe("nccl", 0, 1, str(tmp_path / "logs"), environ=env)
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_FILE"].startswith(str(tmp_path / "logs"))
    Path(env["NCCL_DEBUG_FILE"]).write_bytes((LOG_DIRS[0] / FALLBACK).read_bytes())  # as NCCL would
    fab = probe.judge(OneRank, final=False, broadcast=True)
    assert fab["verdict"] == "fallback" and fab["at"] == "init" and fab["log_dir"] == str(tmp_path / "logs")


def test_probe_keeps_the_users_settings_and_says_why(tmp_path):
    env = {"NCCL_DEBUG": "WARN"}
    fab = fabric.Probe("nccl", 0, 1, str(tmp_path), environ=env).judge(OneRank, final=True)
    assert env == {"NCCL_DEBUG": "WARN"}
    assert fab["verdict"] == "undetermined" and "NCCL_DEBUG=WARN" in fab["reasons"][0]
    user_file = tmp_path / "mine.log"
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": str(user_file)}
    user_file.write_bytes((LOG_DIRS[0] / EFA).read_bytes())
    fab = fabric.Probe("nccl", 0, 1, str(tmp_path / "unused"), environ=env).judge(OneRank, final=True)
    assert fab["verdict"] == "efa" and not (tmp_path / "unused").exists()


# -- EFA counters, and the verdict kept with the checkpoints ------------------------------------------------------


def _delta(tx: int, rx: int) -> dict:
    return {"rdmap0s6": {"errors": {}, "tx_bytes": tx, "rx_bytes": rx}}


def test_efa_bytes_per_node_and_flat_counters_turn_efa_into_fallback():
    log = {str(LOG_DIRS[0] / EFA): (LOG_DIRS[0] / EFA).read_bytes()}
    moved = {"node-a": _delta(9_000_000, 8_000_000), "node-b": _delta(8_500_000, 9_100_000)}
    fab = fabric.summarize("nccl", log, counter_deltas=moved, expected_bytes_per_node=4_000_000)
    assert fab["verdict"] == "efa"
    assert fab["efa_bytes"]["node-a"] == {"sent": 9_000_000, "received": 8_000_000, "devices": 1}
    assert "efa_bytes node-a: sent 9000000" in fabric.line(fab)
    flat = {"node-a": _delta(100, 90), "node-b": _delta(0, 0)}
    fab = fabric.summarize("nccl", log, counter_deltas=flat, expected_bytes_per_node=4_000_000)
    assert fab["verdict"] == "fallback" and any("traffic went elsewhere" in r for r in fab["reasons"])
    assert fabric.summarize("nccl", log)["efa_bytes"] is None


class _Ckpt:
    """The two attributes of ray.train.Checkpoint that previous_verdict reads."""

    def __init__(self, path: Path):
        import pyarrow.fs

        self.path, self.filesystem = str(path), pyarrow.fs.LocalFileSystem()


def test_a_resumed_run_says_was_efa_now_fallback(tmp_path):
    efa = _summary(LOG_DIRS[0] / EFA)
    (tmp_path / fabric.FABRIC_FILE).write_bytes(fabric.checkpoint_record(efa, 40))
    prev = fabric.previous_verdict(_Ckpt(tmp_path))
    assert prev["verdict"] == "efa" and prev["step"] == 40 and prev["network"] == "Libfabric"
    now = _summary(LOG_DIRS[0] / FALLBACK, previous=prev)
    assert fabric.changed(now) == "was efa (checkpoint of step 40), now fallback"
    assert "was efa (checkpoint of step 40), now fallback" in fabric.line(now)
    assert "was efa" in refusal_message(now, "r1")
    assert fabric.changed(_summary(LOG_DIRS[0] / EFA, previous=prev)) is None
    assert fabric.previous_verdict(_Ckpt(tmp_path / "old-checkpoint")) is None
    assert json.loads(fabric.checkpoint_record(efa, 1))["verdict"] == "efa"


# -- the capture with the environment the stack really renders on the GPU worker pods ---------------------


def _worker_env(run) -> dict:
    """The GPU worker container's env as the stack renders it (values only; secret refs are not NCCL's)."""
    cr = run.one("kubernetes:ray.io/v1:RayCluster")
    container = cr["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


@pytest.mark.parametrize("gpu_type", ["g6.12xlarge", "p5.48xlarge"])
def test_the_deployed_worker_env_captures_and_a_recorded_efa_log_there_is_efa(gpu_type, default_run, p5_run, tmp_path):
    run = default_run if gpu_type == "g6.12xlarge" else p5_run
    env = _worker_env(run)
    assert env["NCCL_DEBUG"] == "WARN"  # the stack's ncclDebug default, on every GPU worker
    rendered = dict(env)
    probe = fabric.Probe("nccl", 0, 1, str(tmp_path / "nccl-logs"), environ=env)
    assert probe.plan["log"] and probe.plan["note"] is None, probe.plan
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_FILE"] == probe.plan["log"]
    assert {k: v for k, v in env.items() if not k.startswith("NCCL_DEBUG")} == {
        k: v for k, v in rendered.items() if not k.startswith("NCCL_DEBUG")
    }  # nothing else touched
    Path(probe.plan["log"]).write_bytes((LOG_DIRS[0] / EFA).read_bytes())  # what NCCL writes there
    fab = probe.judge(OneRank, final=True)
    assert fab["verdict"] == "efa", fab["reasons"]
    assert fab["capture"] == {"by": "run", "replaced": {"NCCL_DEBUG": "WARN"}}
    assert "capture=run (replaced the stack's NCCL_DEBUG=WARN)" in fabric.line(fab)


def test_a_users_own_nccl_debug_beside_the_stacks_is_kept(tmp_path):
    stack = {"NCCL_DEBUG": "WARN", fabric.STACK_NCCL_ENV: '{"NCCL_DEBUG":"WARN","NCCL_SOCKET_IFNAME":"^lo,docker"}'}
    # another value than the stack rendered: the user's (submit --env NCCL_DEBUG=VERSION)
    plan = fabric.plan_capture("nccl", {**stack, "NCCL_DEBUG": "VERSION"}, str(tmp_path), 0, "h", 1)
    assert plan["env"] == {} and plan["capture"] == {"by": "user", "kept": {"NCCL_DEBUG": "VERSION"}}
    assert "NCCL_DEBUG=VERSION" in plan["note"]
    # a file of their own beside the stack's level: kept, and the stack's WARN logs no INFO line
    plan = fabric.plan_capture("nccl", {**stack, "NCCL_DEBUG_FILE": "/x/%h"}, str(tmp_path), 0, "h", 1)
    assert plan["env"] == {} and plan["log"] is None and "NCCL_DEBUG is WARN" in plan["note"]
    # their INFO with their file: read from there
    plan = fabric.plan_capture(
        "nccl", {**stack, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": "/x/n.%h"}, str(tmp_path), 0, "h", 1
    )
    assert plan["log"] == "/x/n.h" and plan["capture"]["by"] == "user"
    # the stack asked for TRACE: the capture keeps TRACE; a marker that is not JSON marks nothing as the stack's
    trace = {"NCCL_DEBUG": "TRACE", fabric.STACK_NCCL_ENV: '{"NCCL_DEBUG":"TRACE"}'}
    assert fabric.plan_capture("nccl", trace, str(tmp_path), 0, "h", 1)["env"]["NCCL_DEBUG"] == "TRACE"
    assert (
        fabric.plan_capture("nccl", {**stack, fabric.STACK_NCCL_ENV: "{oops"}, str(tmp_path), 0, "h", 1)["capture"][
            "by"
        ]
        == "user"
    )


def test_the_summary_says_whose_settings_applied():
    from ray_efa_eks.training.run import fabric_words

    run = {"by": "run", "replaced": {"NCCL_DEBUG": "WARN"}}
    mine = {"by": "user", "kept": {"NCCL_DEBUG": "WARN"}}
    assert fabric.merge_captures([run, run]) == run
    mixed = fabric.merge_captures([run, mine])
    assert mixed["by"] == "mixed" and len(mixed["ranks"]) == 2
    fab = fabric.summarize("nccl", {}, notes=["n"], capture=mine)
    assert fab["capture_text"] == "yours (NCCL_DEBUG=WARN)"
    assert fabric_words(fab) == "undetermined capture=yours (NCCL_DEBUG=WARN)"
    assert fabric_words(fabric.summarize("gloo", {}, capture={"by": "none"})) == "not-nccl"
