"""A team's training job as a KubeRay RayJob (ray.io/v1, KubeRay v1.7.0's CRD), queued by Kueue, as plain data.

The RayJob brings its own Ray cluster (docs/team-jobs.md: Kueue v0.19.2 does not queue a RayJob on an existing
cluster), rendered by :func:`~.raycluster.build_spec`, the code that renders the stack's shared RayCluster: the same
image, NCCL/EFA env, Guaranteed requests, ``efa-provider-check`` init container, Pod Security context. What differs:

* fixed worker count (``nodes``; no Ray autoscaler: Kueue admits the whole job, the Cluster Autoscaler adds nodes);
* ``authOptions: {mode: token}`` without a Secret name: KubeRay v1.7.0 creates a Secret named after the RayCluster
  (raycluster_controller.go ``reconcileAuthSecret``) and gives its token to the submitter (rayjob_controller.go,
  ``SetContainerTokenAuthEnvVars`` on the submitter container);
* the team's service account (its Pod Identity role reaches only the team's prefix) and storage path;
* ``shutdownAfterJobFinishes: true`` and ``suspend: true``: Kueue requires the first and unsuspends the job when it
  admits it (site/content/en/docs/tasks/run/rayjobs.md at v0.19.2, "Suspend control" and "Limitations");
* the training code (components/payload.py, under its installed name): a ConfigMap (:func:`code_configmap`) mounted
  in the submitter pod, whose ``ray job submit`` uploads it as the job's ``working_dir`` (KubeRay passes
  ``runtimeEnvYAML`` as ``--runtime-env-json``: ray-operator/controllers/ray/common/job.go
  ``BuildJobSubmitCommand``), as ``ray-efa-eks submit`` uploads it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import yaml

from .. import payload
from ..nodes.instances import InstanceType
from ..kube import CONTAINER_SECURITY_CONTEXT, POD_SECURITY_CONTEXT, ROLE_LABEL, SYSTEM_ROLE, pod_resources
from .raycluster import RayClusterArgs, WorkerGroupArgs, build_spec
from ..queues.team_queues import QUEUE_LABEL, TEAM_LABEL, TeamQueue

CODE_MOUNT = "/opt/ray-efa-eks/code"
"""Where the submitter pod mounts the training code (the job's ``working_dir``)."""
MAX_CONFIGMAP_BYTES = 1024 * 1024
"""A ConfigMap holds at most 1 MiB (Kubernetes "ConfigMaps": "The data stored in a ConfigMap cannot exceed 1 MiB")."""


@dataclass
class RayJobArgs:
    """What a team's RayJob is made of (``ray-efa-eks rayjob`` fills it from the stack's config)."""

    name: str
    """The RayJob's name (its code ConfigMap is ``<name>-code``)."""
    team: TeamQueue
    """The team whose namespace, LocalQueue and storage the job uses."""
    image: str
    """The image of the job's head and workers (the stack's DLC)."""
    ray_version: str
    """``rayClusterSpec.rayVersion``: the image's Ray."""
    instance_type: InstanceType
    """Catalogue entry of the GPU nodes: each worker asks for all their GPUs and EFA interfaces."""
    entrypoint: str
    """The driver's command (``python -m ray_efa_eks.training --address auto ...``)."""
    code: dict[str, bytes]
    """Files of the job's working_dir: relative path -> content."""
    nodes: int = 2
    """GPU workers, one per node."""
    efa: bool = True
    """The workers ask for EFA interfaces and get the EFA/NCCL environment."""
    nccl_debug: str = "WARN"
    """``NCCL_DEBUG`` of the workers."""
    region: str | None = None
    """AWS region of the stack, in every container's environment."""
    storage_path: str | None = None
    """The team's checkpoint URI (``s3://BUCKET/teams/TEAM``), as RAY_EFA_EKS_STORAGE_PATH on every pod."""
    service_account: str = "ray-train"
    """Service account of the job's pods (the team's storage role is bound to it)."""
    token_auth: bool = True
    """Ray token authentication on the job's cluster (KubeRay creates the Secret)."""
    efa_exporter_url: str | None = None
    """The node agent's exporter URL for EFA workers' counter witness; None: none."""
    active_deadline_s: int | None = None
    """KubeRay ``activeDeadlineSeconds``: the job fails once running longer (None: no limit)."""
    labels: dict[str, str] = field(default_factory=dict)
    """More labels on the RayJob, beside the queue and team labels."""


def code_configmap(name: str, namespace: str, code: dict[str, bytes]) -> dict[str, Any]:
    """The ConfigMap of the job's code; its name carries a hash of the content, so a job never runs other code."""
    keys = {path: payload.config_key(path) for path in sorted(code)}
    if len(set(keys.values())) != len(keys):
        raise ValueError("RayJob code: two files map to the same ConfigMap key")
    data = {keys[p]: code[p].decode() for p in keys}
    size = sum(len(k) + len(v.encode()) for k, v in data.items())
    if size > MAX_CONFIGMAP_BYTES:
        raise ValueError(f"RayJob code: {size} bytes, more than a ConfigMap holds ({MAX_CONFIGMAP_BYTES})")
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:10]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{name}-{digest}",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "ray-efa-eks"},
        },
        "data": data,
    }


def rayjob(args: RayJobArgs, configmap_name: str) -> dict[str, Any]:
    """The RayJob object (validated against KubeRay v1.7.0's RayJob CRD in tests)."""
    if args.nodes < 1:
        raise ValueError(f"RayJob {args.name}: nodes must be >= 1, got {args.nodes}")
    cluster = build_spec(
        RayClusterArgs(
            provider=None,  # type: ignore[arg-type]  # plain data: build_spec registers nothing
            image=args.image,
            ray_version=args.ray_version,
            namespace=args.team.namespace,
            nccl_debug=args.nccl_debug,
            service_account_name=args.service_account,
            create_service_account=False,
            storage_path=args.storage_path,
            token_auth=False,
            region=args.region,
            efa_exporter_url=args.efa_exporter_url,
            worker_groups=[
                WorkerGroupArgs(name="gpu", instance_type=args.instance_type, replicas=args.nodes, efa=args.efa)
            ],
        )
    )
    cluster.pop("upgradeStrategy", None)  # a one-shot cluster is never upgraded
    if args.token_auth:
        cluster["authOptions"] = {"mode": "token"}  # KubeRay makes the Secret (module docstring)
    items = [{"key": payload.config_key(path), "path": path} for path in sorted(args.code)]
    submitter = {
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {ROLE_LABEL: SYSTEM_ROLE},
            "securityContext": json.loads(json.dumps(POD_SECURITY_CONTEXT)),
            "containers": [
                {
                    "name": "ray-job-submitter",
                    "image": args.image,
                    "imagePullPolicy": "IfNotPresent",
                    "resources": pod_resources("500m", "1Gi"),
                    "securityContext": json.loads(json.dumps(CONTAINER_SECURITY_CONTEXT)),
                    "volumeMounts": [{"name": "code", "mountPath": CODE_MOUNT, "readOnly": True}],
                }
            ],
            "volumes": [{"name": "code", "configMap": {"name": configmap_name, "items": items}}],
        },
    }
    spec: dict[str, Any] = {
        "entrypoint": args.entrypoint,
        "runtimeEnvYAML": yaml.safe_dump({"working_dir": CODE_MOUNT}),
        "shutdownAfterJobFinishes": True,
        "suspend": True,
        "backoffLimit": 0,
        "submissionMode": "K8sJobMode",
        "submitterPodTemplate": submitter,
        "rayClusterSpec": cluster,
    }
    if args.active_deadline_s:
        spec["activeDeadlineSeconds"] = args.active_deadline_s
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": args.name,
            "namespace": args.team.namespace,
            "labels": {QUEUE_LABEL: args.team.namespace, TEAM_LABEL: args.team.name, **args.labels},
        },
        "spec": spec,
    }


def manifests(args: RayJobArgs) -> list[dict[str, Any]]:
    """The ConfigMap with the code, then the RayJob: what a pipeline applies (or commits for GitOps)."""
    cm = code_configmap(f"{args.name}-code", args.team.namespace, args.code)
    return [cm, rayjob(args, cm["metadata"]["name"])]
