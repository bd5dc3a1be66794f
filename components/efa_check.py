"""EfaCheckJob: a post-deploy Kubernetes Job that fails ``pulumi up`` when NCCL is not on EFA.

The Job runs in the same DLC image, carries the project's ``training``
package in a ConfigMap, waits for the Ray head, submits
``python -m training.efa_check --json`` through the Ray Jobs API and exits
with the check's verdict. ``backoffLimit: 0`` means one verdict, no retries;
pulumi-kubernetes awaits a Job until it completes and fails the update when
it fails, unless ``blocking`` is off (``pulumi.com/skipAwait``).
"""

from __future__ import annotations

import importlib.resources
import shlex
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from .node_groups import ROLE_LABEL, SYSTEM_ROLE
from .raycluster import check_guaranteed, pod_resources, token_client_env

TRAINING_PACKAGE = f"{__package__.rpartition('.')[0]}.training".lstrip(".")
"""The sibling ``training`` package: ``ray_efa_eks.training`` when installed, ``training`` from a checkout."""
MOUNT = "/opt/ray-efa-eks"


@dataclass
class EfaCheckJobArgs:
    """Inputs of :class:`EfaCheckJob`."""

    provider: k8s.Provider
    image: str
    """Must be the RayCluster's image: the check runs the same stack it vouches for."""
    namespace: str
    dashboard_address: str
    ray_cluster: pulumi.Resource
    blocking: bool = True
    min_busbw_gbps: float = 0.0
    ttl_seconds_after_finished: int = 86400
    auth_secret_name: str | None = None
    """The RayCluster's token Secret (Ray token auth): the container gets RAY_AUTH_MODE=token and
    RAY_AUTH_TOKEN from its ``auth_token`` key, so ``ray job submit/logs/status`` authenticate."""
    active_deadline_seconds: int = 1800


def training_files() -> dict[str, str]:
    """The ``training`` package sources, shipped to the Ray job as its working_dir."""
    root = importlib.resources.files(TRAINING_PACKAGE)  # found through the import system, installed or not
    files = {p.name: p.read_text() for p in sorted(root.iterdir(), key=lambda p: p.name) if p.name.endswith(".py")}
    if "efa_check.py" not in files or "nccl_log.py" not in files:
        raise FileNotFoundError(f"EfaCheckJob: package {TRAINING_PACKAGE} ({root}) lacks efa_check.py/nccl_log.py")
    return files


def check_script(dashboard_address: str, min_busbw_gbps: float) -> str:
    """Shell run by the Job: wait for the head, submit, follow logs, exit with the job's outcome."""
    addr = shlex.quote(dashboard_address)
    floor = f" --min-busbw-gbps {min_busbw_gbps}" if min_busbw_gbps > 0 else ""
    return f"""set -u
addr={addr}
for i in $(seq 90); do ray job list --address "$addr" >/dev/null 2>&1 && break; echo "waiting for Ray head ($i)"; sleep 10; done
id="efa-check-$(date +%s)"
ray job submit --address "$addr" --submission-id "$id" --no-wait --working-dir {MOUNT} -- python -m training.efa_check --json --address auto{floor} || exit 2
ray job logs --address "$addr" --follow "$id"
status=$(ray job status --address "$addr" "$id")
echo "$status"
case "$status" in *SUCCEEDED*) exit 0;; *) echo "EFA check failed: NCCL is not using EFA (see the JSON above)"; exit 1;; esac
"""


class EfaCheckJob(pulumi.ComponentResource):
    """ConfigMap with the check code + the gating batch/v1 Job."""

    job: k8s.batch.v1.Job
    job_name: str
    logs_command: str

    def __init__(self, name: str, args: EfaCheckJobArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:index:EfaCheckJob", name, None, opts)
        resources = pod_resources("500m", "1Gi")
        check_guaranteed(resources, "EFA check container")
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        code = k8s.core.v1.ConfigMap(f"{name}-code", metadata={"name": f"{name}-code", "namespace": args.namespace},
                                     data=training_files(), opts=child)
        annotations = {} if args.blocking else {"pulumi.com/skipAwait": "true"}
        self.job_name = f"{name}-job"
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata={"name": self.job_name, "namespace": args.namespace, "annotations": annotations},
            spec={
                "backoffLimit": 0,
                "ttlSecondsAfterFinished": args.ttl_seconds_after_finished,
                "activeDeadlineSeconds": args.active_deadline_seconds,
                "template": {
                    "metadata": {"labels": {"ray-efa-eks/role": "efa-check"}},
                    "spec": {
                        "restartPolicy": "Never",
                        "nodeSelector": {ROLE_LABEL: SYSTEM_ROLE},
                        "containers": [{
                            "name": "efa-check",
                            "image": args.image,
                            "command": ["/bin/bash", "-c", check_script(args.dashboard_address, args.min_busbw_gbps)],
                            "resources": resources,
                            **({"env": token_client_env(args.auth_secret_name)} if args.auth_secret_name else {}),
                            "volumeMounts": [{"name": "code", "mountPath": f"{MOUNT}/training"}],
                        }],
                        "volumes": [{"name": "code", "configMap": {"name": f"{name}-code"}}],
                    },
                },
            },
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[args.ray_cluster, code]),
        )
        self.logs_command = f"kubectl -n {args.namespace} logs job/{self.job_name}"
        self.register_outputs({"jobName": self.job_name, "logsCommand": self.logs_command})
