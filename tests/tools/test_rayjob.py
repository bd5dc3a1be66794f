"""``ray-efa-eks rayjob``: the objects it prints (against KubeRay v1.7.0's RayJob CRD and Kubernetes' schemas), its
refusals, and applying and following a RayJob against a small fake Kubernetes API on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from ray_efa_eks.tools.command import main
from tests.helpers.crd import validate
from tests.helpers.fake_kube import FakeKube

TEAMS = 'jobQueues=["vision:2nodes", "nlp:1nodes:borrow"]'
BASE = ["rayjob", "--defaults", "--config", TEAMS, "--queue", "vision", "--bucket", "ckpt-bucket", "--name", "run1"]
ROOT = Path(__file__).resolve().parents[2]


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main([*BASE, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def printed():
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main([*BASE, "--dry-run", "--", "--use-gpu", "--require-efa", "--steps", "20"]) == 0
    return list(yaml.safe_load_all(buf.getvalue()))


def test_dry_run_prints_a_configmap_and_a_rayjob_the_crds_accept(printed):
    cm, job = printed
    assert (cm["kind"], job["kind"]) == ("ConfigMap", "RayJob")
    validate(job)
    kubernetes_validate.validate(cm, "1.33.0", strict=True)
    spec = job["spec"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe"},
        "spec": spec["submitterPodTemplate"]["spec"],
    }
    kubernetes_validate.validate(pod, "1.33.0", strict=True)
    for g in [spec["rayClusterSpec"]["headGroupSpec"], *spec["rayClusterSpec"]["workerGroupSpecs"]]:
        kubernetes_validate.validate({**pod, "spec": g["template"]["spec"]}, "1.33.0", strict=True)


def test_rayjob_is_queued_whole_on_its_own_cluster(printed):
    _, job = printed
    assert job["metadata"]["namespace"] == "team-vision"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-vision"
    spec = job["spec"]
    assert spec["suspend"] is True and spec["shutdownAfterJobFinishes"] is True and "clusterSelector" not in spec
    (workers,) = spec["rayClusterSpec"]["workerGroupSpecs"]
    assert workers["replicas"] == workers["minReplicas"] == workers["maxReplicas"] == 2
    assert spec["rayClusterSpec"]["enableInTreeAutoscaling"] is False
    assert spec["rayClusterSpec"]["authOptions"] == {"mode": "token"}


def test_same_image_entrypoint_env_and_team_storage(printed):
    _, job = printed
    spec = job["spec"]
    # the job's shape: a rank per GPU of both 4-GPU nodes, waiting (up to efaCheckWaitSeconds) for all of them
    assert spec["entrypoint"] == (
        "python -m ray_efa_eks.training --address auto --use-gpu --require-efa "
        "--steps 20 --workers 8 --wait-for-workers-s 1320"
    )
    cluster = spec["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]["template"]["spec"], cluster["workerGroupSpecs"][0]["template"]["spec"]]
    submitter = spec["submitterPodTemplate"]["spec"]["containers"][0]
    images = {c["image"] for p in pods for c in p["containers"]} | {submitter["image"]}
    assert images == {"public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"}
    worker = pods[1]
    env = {e["name"]: e.get("value") for e in worker["containers"][0]["env"]}
    assert env["RAY_EFA_EKS_STORAGE_PATH"] == "s3://ckpt-bucket/teams/vision"
    assert env["FI_PROVIDER"] == "efa" and "NCCL_DEBUG" in env
    assert {p["serviceAccountName"] for p in pods} == {"ray-train"}
    limits = worker["containers"][0]["resources"]["limits"]
    assert (limits["nvidia.com/gpu"], limits["vpc.amazonaws.com/efa"]) == ("4", "1")
    assert [c["name"] for c in worker["initContainers"]] == ["efa-provider-check"]


def test_the_code_configmap_fits_a_configmap_and_the_docs_say_how_big_it_is(printed):
    """docs/team-jobs.md: the object is applied server-side (a client-side apply's annotation holds 256 KiB at most,
    less than the code); a ConfigMap holds 1 MiB."""
    import json
    import re

    size = len(json.dumps(printed[0]))
    assert 256 * 1024 < size < 1024 * 1024
    said = re.search(r"ConfigMap holds about (\d+) KB of code", (ROOT / "docs/team-jobs.md").read_text())
    assert said and abs(int(said.group(1)) * 1000 - size) < 30_000, (said and said.group(1), size)


def test_the_code_is_the_training_package_mounted_as_working_dir(printed):
    cm, job = printed
    sub = job["spec"]["submitterPodTemplate"]["spec"]
    (vol,) = sub["volumes"]
    assert vol["configMap"]["name"] == cm["metadata"]["name"]
    paths = {i["path"]: cm["data"][i["key"]] for i in vol["configMap"]["items"]}
    assert paths["ray_efa_eks/training/train_func.py"] == (ROOT / "training/train_func.py").read_text()
    assert "ray_efa_eks/efacheck/nccl_log.py" in paths and "ray_efa_eks/training/__main__.py" in paths
    mount = sub["containers"][0]["volumeMounts"][0]["mountPath"]
    assert yaml.safe_load(job["spec"]["runtimeEnvYAML"]) == {"working_dir": mount}


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--queue", "audio", "--dry-run"], "not a team of this stack's jobQueues (vision, nlp)"),
        (["--nodes", "3", "--dry-run"], "--nodes 3: between 1 and the GPU node group's size (2)"),
        (["--name", "Run_1", "--dry-run"], "a lowercase DNS label"),
        ([], "--server (or $KUBE_SERVER) is needed"),
        (["--poll-s", "-1", "--dry-run"], "--poll-s -1: seconds above 0"),
        (["--request-timeout-s", "0", "--dry-run"], "--request-timeout-s 0: seconds above 0"),
        (
            ["--config", 'jobQueues=["vision:1nodes", "nlp:1nodes:borrow"]', "--dry-run"],
            "the job needs 8 GPUs and team vision can have at most 4 (its quota; no :borrow): Kueue would never admit it",
        ),
        (["--dry-run", "--", "--address", "auto"], "--address after -- is set by the job"),
        (
            ["--dry-run", "--", "--use-gpu", "--workers", "4"],
            "--workers 4 after --: the job's 2 node(s) hold 8 GPUs and a rank takes one, so the job runs 8 ranks",
        ),
        (["--dry-run", "--", "--use-gpu", "--workers=2"], "--workers 2 after --"),
    ],
)
def test_refused_before_anything_is_applied(capsys, monkeypatch, args, fragment):
    monkeypatch.delenv("KUBE_SERVER", raising=False)
    code, out, err = run(capsys, *args)
    assert code == 64 and fragment in err and not out


def test_no_queues_configured_is_a_usage_error(capsys):
    code = main(["rayjob", "--defaults", "--queue", "vision", "--bucket", "b", "--dry-run"])
    assert code == 64 and "none: set ray-efa-eks:jobQueues" in capsys.readouterr().err


# -- against a fake Kubernetes API (tests/helpers/fake_kube.py) ------------------------------------------------


@pytest.fixture
def kube(request):
    fakes = []

    def make(*statuses, **kw):
        fakes.append(FakeKube(statuses, **kw))
        return fakes[-1]

    yield make
    for f in fakes:
        f.close()


QUEUED = {"_suspend": True}
RUNNING = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}
FABRIC = "[fabric] efa: NCCL used the OFI plugin over EFA on 2 nodes"


@pytest.mark.parametrize(
    "final, code, shown",
    [
        (
            {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "message": "Job finished successfully."},
            0,
            [FABRIC, "exit 0"],
        ),
        (
            {
                "jobDeploymentStatus": "Complete",
                "jobStatus": "FAILED",
                "message": "Job entrypoint command failed with exit code 5, last available logs (truncated to 20,000 chars):\n"
                "[fabric] fallback: NCCL used Socket\nerror: --require-efa: the fabric was fallback",
            },
            5,
            ["[fabric] fallback: NCCL used Socket", "exit 5: Job entrypoint command failed with exit code 5"],
        ),
        (
            {
                "jobDeploymentStatus": "Failed",
                "reason": "DeadlineExceeded",
                "message": "The RayJob has passed the activeDeadlineSeconds.",
            },
            1,
            ["exit 1: The RayJob has passed"],
        ),
    ],
)
def test_apply_and_follow_exit_with_the_jobs_result(capsys, kube, monkeypatch, final, code, shown):
    fake = kube(QUEUED, QUEUED, RUNNING, final, log=f"{FABRIC}\n[summary] steps=20\n")
    monkeypatch.setenv("KUBE_TOKEN", "t0ken")
    got, out, err = run(capsys, "--server", fake.url, "--poll-s", "0.01", "--", "--use-gpu", "--require-efa")
    assert got == code, (out, err)
    assert "created team-vision/run1 in queue team-vision" in out
    assert out.count("queued: waiting for its quota in team-vision") == 1 and "Running: Ray job RUNNING" in out
    for s in shown:
        assert s in out
    posts = [c for c in fake.calls if c[0] == "POST"]
    assert [p[1] for p in posts] == [
        "/api/v1/namespaces/team-vision/configmaps",
        "/apis/ray.io/v1/namespaces/team-vision/rayjobs",
    ]
    assert posts[1][2]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-vision"
    assert {c[3] for c in fake.calls} == {"Bearer t0ken"}


def test_refused_create_is_no_answer_with_the_apis_reason(capsys, kube):
    fake = kube(RUNNING, create_status=403)
    code, out, err = run(capsys, "--server", fake.url)
    assert code == 2 and "HTTP 403 forbidden: User cannot create rayjobs" in err and "ray-efa-eks:team:TEAM" in err


def test_existing_name_is_refused(capsys, kube):
    fake = kube(RUNNING, create_status=409)
    code, _, err = run(capsys, "--server", fake.url)
    assert code == 1 and "exists already; pick another --name" in err


def test_follow_gives_up_at_its_deadline_and_says_the_job_stays(capsys, kube):
    fake = kube(QUEUED)
    code, out, err = run(capsys, "--server", fake.url, "--poll-s", "0.05", "--timeout-s", "0.3")
    assert code == 2 and "still 'queued" in err and "kubectl -n team-vision get rayjob run1" in err


def test_unreachable_api_is_no_answer(capsys):
    code, _, err = run(capsys, "--server", "http://127.0.0.1:9", "--request-timeout-s", "2")
    assert code == 2 and "did not answer POST /api/v1/namespaces/team-vision/configmaps within 2 s" in err
