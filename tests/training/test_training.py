"""Real Ray Train runs on a local 2-worker-node cluster (head has 0 CPUs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

from ray_efa_eks.training.data import RandomTokens  # noqa: E402
from ray_efa_eks.training.model import PRESETS, DecoderLM, approx_params, count_params  # noqa: E402
from ray_efa_eks.training.trainer import build_trainer, num_workers_for  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def test_presets_and_data_are_deterministic():
    assert count_params(DecoderLM(PRESETS["tiny"])) == approx_params(PRESETS["tiny"])
    assert 0.9e9 < approx_params(PRESETS["1b"]) < 1.3e9
    a, b = RandomTokens(1024, 64, 4, seed=0, rank=0), RandomTokens(1024, 64, 4, seed=0, rank=1)
    assert torch.equal(a.batch(7), RandomTokens(1024, 64, 4, seed=0, rank=0).batch(7))
    assert not torch.equal(a.batch(7), b.batch(7))
    assert not torch.equal(a.batch(7), a.batch(8))
    assert num_workers_for(2, 4) == 8


@pytest.fixture(scope="module")
def cluster():
    from ray_efa_eks.efacheck.local_cluster import local_cluster

    with local_cluster(worker_nodes=2) as c:
        yield c


BASE = {"steps": 20, "checkpoint_every": 10, "report_every": 5}


@pytest.fixture(scope="module")
def baseline(cluster, tmp_path_factory):
    """One uninterrupted run; runs that lose workers must end exactly where it does."""
    return build_trainer(
        num_workers=2, storage_path=str(tmp_path_factory.mktemp("basic")), name="basic", train_config=BASE
    ).fit()


def test_train_spreads_shards_and_learns(baseline):
    m = baseline.return_value
    assert m["step"] == 20 and m["world_size"] == 2 and m["backend"] == "gloo"
    assert len({n["node_id"] for n in m["nodes"]}) == 2
    head = ray.get_runtime_context().get_node_id()
    assert head not in {n["node_id"] for n in m["nodes"]}
    assert abs(m["shard_fraction"] - 0.5) < 0.05
    assert m["loss"] < m["loss_first"] - 0.5
    assert m["tokens_per_s"] > 0 and m["global_tokens_per_s"] == pytest.approx(2 * m["tokens_per_s"])
    assert m["steady_global_tokens_per_s"] > 0
    assert m["resumed_from_step"] == 0
    ckpt = Path(baseline.checkpoint.path)
    assert ckpt.name == "step_000020"
    names = {p.name for p in ckpt.iterdir()}
    assert {".metadata", "meta.pt", "fabric.json"} <= names
    assert json.loads((ckpt / "fabric.json").read_text())["verdict"] == "not-nccl"  # kept for a resumed run
    assert m["fabric"]["verdict"] == "not-nccl" and m["fabric"]["at"] == "end"
    assert 0 < m["fabric"]["capture_s"] < 10  # rank 0's time in the capture (benchmarks/fabric_overhead.py)
    assert len([n for n in names if n.endswith(".distcp")]) == 2  # one shard file per rank


def test_worker_killed_resumes_from_checkpoint(baseline, tmp_path):
    # Rank 1 is SIGKILLed at step 8; the last committed checkpoint is step 5. A retry that
    # did not get it would start at 0, be killed again and exhaust max_failures.
    trainer = build_trainer(
        num_workers=2,
        storage_path=str(tmp_path),
        name="fault",
        max_failures=1,
        train_config={**BASE, "checkpoint_every": 5, "fail_at_step": 8},
    )
    m = trainer.fit().return_value
    assert m["resumed_from_step"] == 5
    assert m["step"] == 20
    # No step lost or repeated beyond the checkpoint: same batches, same optimizer state, same loss.
    assert m["loss_first"] == pytest.approx(baseline.return_value["loss_first"], rel=1e-6)
    assert m["loss"] == pytest.approx(baseline.return_value["loss"], rel=1e-5)


def test_new_run_resumes_after_all_workers_killed(baseline, tmp_path):
    killed = {**BASE, "checkpoint_every": 5, "fail_at_step": 13, "fail_ranks": [0, 1]}
    with pytest.raises(ray.train.TrainingFailedError):
        build_trainer(
            num_workers=2, storage_path=str(tmp_path), name="resume", max_failures=0, train_config=killed
        ).fit()
    snapshot = json.loads((tmp_path / "resume" / "checkpoint_manager_snapshot.json").read_text())
    assert snapshot["latest_checkpoint_result"]["checkpoint_dir_name"] == "step_000010"

    # A new run (new controller, new workers) with the same name and storage path.
    m = build_trainer(num_workers=2, storage_path=str(tmp_path), name="resume", train_config=BASE).fit().return_value
    assert m["resumed_from_step"] == 10
    assert m["step"] == 20
    assert m["loss"] == pytest.approx(baseline.return_value["loss"], rel=1e-5)
    assert m["fabric"]["previous"] == {
        "verdict": "not-nccl",
        "network": None,
        "provider": None,
        "nodes": None,
        "step": 10,
    }  # read back from the checkpoint it resumed from


def test_storage_path_resolution(tmp_path, monkeypatch):
    from ray_efa_eks.training.submit import submit_entrypoint
    from ray_efa_eks.training.trainer import STORAGE_PATH_ENV, default_storage_path, resolve_storage_path

    env = {STORAGE_PATH_ENV: "s3://bucket/ray-train"}
    assert resolve_storage_path(None, env) == "s3://bucket/ray-train"
    assert resolve_storage_path("s3://other/x", env) == "s3://other/x"
    assert resolve_storage_path(str(tmp_path), env) == str(tmp_path)
    assert resolve_storage_path(None, {}) == default_storage_path()
    monkeypatch.chdir(tmp_path)
    assert resolve_storage_path("runs", {}) == str(tmp_path / "runs")
    assert resolve_storage_path(None, {STORAGE_PATH_ENV: ""}) == default_storage_path()

    cmd = submit_entrypoint(["--use-gpu", "--storage-path", "s3://b/my runs", "--name", "r1"])
    assert cmd == "python -m ray_efa_eks.training --address auto --use-gpu --storage-path 's3://b/my runs' --name r1"
    assert "--storage-path" not in submit_entrypoint(["--use-gpu"])  # the pods' env decides


def test_cli_json_last_line(tmp_path):
    # No --storage-path: the CLI must use $RAY_EFA_EKS_STORAGE_PATH, as on the cluster pods.
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_EFA_EKS_STORAGE_PATH": str(tmp_path)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ray_efa_eks.training",
            "--json",
            "--steps",
            "10",
            "--checkpoint-every",
            "10",
            "--name",
            "cli",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 10 and summary["world_size"] == 2 and summary["nodes"] == 2
    assert summary["loss_last"] < summary["loss_first"]
    assert summary["resumed_from_step"] == 0 and summary["tokens_per_s"] > 0
    assert summary["storage_path"] == str(tmp_path)
    assert (tmp_path / "cli" / "step_000010" / ".metadata").exists()
    assert "wall_s" in summary
    fab = summary["fabric"]  # a CPU run: gloo, so no NCCL network to judge, and it says so
    assert fab["verdict"] == "not-nccl" and fab["backend"] == "gloo" and "NCCL" in fab["reasons"][0]
    assert "[fabric] not-nccl (backend gloo" in proc.stdout  # from rank 0, through the log monitor
    assert "fabric=not-nccl" in [ln for ln in proc.stdout.splitlines() if ln.startswith("[summary]")][0]


def test_cli_require_efa_on_cpu_stops_at_the_first_collective(cluster, tmp_path):
    """Against the module's cluster (no new one): exit 5 right after start-up, one clear line, no checkpoint."""
    import time

    t0 = time.monotonic()
    proc = _cli(
        "--address",
        cluster.address,
        "--require-efa",
        "--json",
        "--storage-path",
        str(tmp_path),
        "--name",
        "strict",
        "--steps",
        "10",
        "--checkpoint-every",
        "5",
        timeout=170,
    )
    took = time.monotonic() - t0
    out = _one_clear_line(proc, 5, "--require-efa", "not-nccl", "nothing was checkpointed")
    assert out["fabric"]["verdict"] == "not-nccl" and "gloo" in out["fabric"]["reasons"][0]
    assert "[train] step" not in proc.stdout and not list(tmp_path.rglob("step_*"))
    print(f"--require-efa on CPU exited {proc.returncode} after {took:.1f} s (start-up included)")


# -- the CLI: submit's working dir, and no tracebacks (exit codes in training/__main__.py's docstring) -------------


def test_submit_ships_the_training_package_alone(tmp_path):
    import importlib.resources

    from ray_efa_eks.training.submit import stage_package

    from ray_efa_eks.training.submit import COMPONENTS_FILES, EFACHECK_FILES

    wd = stage_package(tmp_path)
    # not the repo, not site-packages: training, and the efacheck modules it imports, in their installed layout
    assert sorted(p.name for p in wd.iterdir()) == ["ray_efa_eks"]
    assert sorted(p.name for p in (wd / "ray_efa_eks").iterdir()) == [
        "__init__.py",
        "components",
        "efacheck",
        "training",
    ]
    pkg = importlib.resources.files("ray_efa_eks.training")
    want = sorted(p.name for p in pkg.iterdir() if p.name.endswith(".py"))
    assert sorted(p.name for p in (wd / "ray_efa_eks" / "training").iterdir()) == want
    assert (wd / "ray_efa_eks" / "training" / "trainer.py").read_bytes() == (pkg / "trainer.py").read_bytes()
    assert sorted(p.name for p in (wd / "ray_efa_eks" / "efacheck").iterdir()) == sorted(EFACHECK_FILES)
    shipped = wd / "ray_efa_eks" / "components"
    assert sorted(str(p.relative_to(shipped)) for p in shipped.rglob("*.py")) == sorted(COMPONENTS_FILES)
    # In the job, training.fabric judges with the shipped copy of the gate's code (nothing else on the path).
    log = REPO / "tests/fixtures/nccl-logs/real_efa_g7e_slurm_nccl2292_ofi1180_2node.log"
    code = (
        "import ray_efa_eks.training.fabric as f, ray_efa_eks.training.__main__, ray_efa_eks.training.cli as c; "
        "assert c.url_problem('ftp://x', '--address').endswith('needs a scheme (http/https) and a host; e.g. "
        "--address http://127.0.0.1:8265'); "
        f"print(f.__file__, f.nccl_log.__file__, f.summarize('nccl', {{'r0': open({str(log)!r}, 'rb').read()}})"
        "['verdict'])"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code],
        cwd=wd,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ.get("PATH", "")},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    fabric, nccl_log, verdict = out.stdout.split()
    assert fabric == str(wd / "ray_efa_eks/training/fabric.py") and verdict == "efa"
    assert nccl_log == str(wd / "ray_efa_eks/efacheck/nccl_log.py")


def _cli(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ray_efa_eks.training", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def _one_clear_line(proc: subprocess.CompletedProcess, code: int, *words: str) -> dict:
    assert proc.returncode == code, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and all(w in errors[0] for w in words), proc.stderr[-2000:]
    last = json.loads(proc.stdout.strip().splitlines()[-1]) if "--json" in proc.args else {}
    assert not last or last["exit_code"] == code
    return last


def test_cli_unreachable_address_exits_2():
    _one_clear_line(_cli("--address", "127.0.0.1:1", "--json"), 2, "cannot reach the Ray cluster", "127.0.0.1:1")
    _one_clear_line(
        _cli("submit", "--address", "http://127.0.0.1:1", "--", "--steps", "2"), 2, "cannot reach the Ray Jobs API"
    )


def test_cli_ray_that_cannot_start_exits_4(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    out = _one_clear_line(_cli("--json", env={"RAY_TMPDIR": str(not_a_dir)}), 4, "Ray could not start")
    assert "Not a directory" in out["error"]


@pytest.mark.parametrize(
    "args",
    [
        ["--steps", "0"],
        ["--fail-at-step", "3"],
        ["--bogus"],
        ["submit", "--env", "NOEQUALS"],
        ["submit", "--", "--stepz", "3"],
        ["submit", "--", "--address", "auto"],
        ["submit", "--address", "127.0.0.1:8265"],
    ],
)
def test_cli_usage_errors_exit_64(args):
    proc = _cli(*args)
    assert proc.returncode == 64 and "Traceback" not in proc.stderr, proc.stderr[-2000:]


# -- --use-gpu places one rank per GPU the cluster offers ----------------------------------------------


@pytest.fixture
def gpu_nodes(cluster):
    """Two more nodes on the module's cluster declaring 4 logical GPUs (and 4 CPUs) each, removed afterwards."""
    from ray_efa_eks.efacheck.local_cluster import add_worker_node

    nodes = [add_worker_node(cluster, num_cpus=4, num_gpus=4) for _ in range(2)]
    cluster.wait_for_nodes()
    yield nodes
    for node in nodes:
        cluster.remove_node(node)


def test_use_gpu_runs_one_rank_per_gpu_and_warns_when_fewer(cluster, gpu_nodes, tmp_path, capsys):
    """`train --use-gpu` without --workers on 2 nodes x 4 (logical) GPUs: 8 ranks, 4 per node (gloo, on CPU).
    --workers 2 on the same cluster warns that 6 GPUs sit idle (judged from this cluster's own node table by the
    function the CLI calls after connecting; a second run would only cost another Ray Train start-up)."""
    proc = _cli(
        "--address",
        cluster.address,
        "--use-gpu",
        "--json",
        "--storage-path",
        str(tmp_path),
        "--name",
        "all-gpus",
        "--steps",
        "1",
        "--checkpoint-every",
        "1",
        "--report-every",
        "1",
        env={"RAY_EFA_EKS_TRAIN_BACKEND": "gloo"},
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (out["world_size"], out["nodes"], out["ranks_per_node"]) == (8, 2, [4, 4])
    assert "[train] --use-gpu: 8 ranks, one per GPU the cluster offers (2 node(s) x 4 GPUs)" in proc.stderr
    assert "warning:" not in proc.stderr
    from ray_efa_eks.training.reach import place_gpu_ranks
    from ray_efa_eks.training.request import TrainRequest

    assert place_gpu_ranks(TrainRequest(workers=2), ray.nodes()).workers == 2
    assert (
        "warning: --workers 2 uses 2 of the 8 GPUs the cluster offers (2 node(s) x 4 GPUs); 6 sit idle: omit "
        "--workers for one rank per GPU" in capsys.readouterr().err
    )
