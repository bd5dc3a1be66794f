"""RayCluster: one DLC image for head and workers, Guaranteed QoS, EFA wired in from outside.

The role of a pod comes from KubeRay ``rayStartParams`` (head vs worker
group), never from a second image. GPU/EFA requests, the NCCL/libfabric
environment and pip packages are set here, so the image stays untouched.

Ray token authentication (KubeRay ``spec.authOptions``, Ray >= 2.52) is on by
default, behind the head NetworkPolicy: the token is a ``RandomPassword``
(generated once, kept in the stack state, so every ``pulumi up`` keeps it) in a
Secret this component manages; the operator injects ``RAY_AUTH_MODE=token`` and
``RAY_AUTH_TOKEN`` (from the Secret's ``auth_token`` key) into every Ray
container, and Ray then refuses any Jobs API, dashboard or GCS request without it.

Changes reach the pods: ``spec.upgradeStrategy.type: Recreate``. KubeRay 1.7.0
(ray-operator/controllers/ray/raycluster_controller.go ``shouldRecreatePodsForUpgrade``) restarts nothing when
``upgradeStrategy`` is nil; with Recreate it hashes the spec (utils/util.go
``GenerateHashWithoutReplicasAndWorkersToDelete``: replicas, min/maxReplicas, workersToDelete, tolerations,
schedulingGates and upgradeStrategy muted) and compares it with the head pod's ``ray.io/upgrade-strategy-recreate-hash``
annotation; when they differ it deletes *all* pods and creates them from the new spec. ``createHeadPod`` writes that
annotation on every head it creates, Recreate or not (v1.6.0 and v1.7.0), so a head created before Recreate was set is
recreated on the first spec change too; only a head created by KubeRay before v1.6.0 (no annotation) or a changed
KubeRay version (the annotation is rewritten, nothing recreated) recreates nothing. So a new image, NCCL env,
resources or auth mode restarts the whole cluster (a running training job is stopped; it resumes from its last
checkpoint with the same ``--name``), while ``gpuNodeCount`` only adds or removes workers.

Every Ray container carries ``RAY_EFA_EKS_IMAGE`` (its image) and ``RAY_EFA_EKS_SPEC_HASH`` (:func:`spec_hash`,
the same fields muted as KubeRay's hash, so a worker added by a scale-up carries the hash of the pods beside it);
the gate compares both with what its Job was rendered for.

The token Secret exists whatever ``token_auth`` says: switching auth off must not delete a Secret that running pods
still reference (Pulumi deletes removed resources at the end of the update, while KubeRay may still be replacing the
pods, and a container restarting in between would fail with CreateContainerConfigError); switching it back on
finds the same token.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from ..nodes.instances import InstanceType
from ..nodes.node_allocatable import allocatable_memory_mib
from ..network.network_policies import allow_all_egress
from ..kube import (
    CONTAINER_SECURITY_CONTEXT,
    GPU_ROLE,
    GPU_TOLERATION,
    METRICS_NAMESPACE,
    METRICS_PORTS,
    NAMESPACE_NAME_LABEL,
    POD_SECURITY_CONTEXT,
    POD_SECURITY_LABELS,
    ROLE_LABEL,
    SYSTEM_ROLE,
    check_guaranteed,
    pod_resources,
)
from .ray_autoscaler import AutoscalerArgs, autoscaler_options, token_volume

HEAD_PORTS = {"gcs-server": 6379, "dashboard": 8265, "client": 10001}
HEAD_LABELS = {ROLE_LABEL: "head"}
"""Our label on the head pod template; the head NetworkPolicy selects it."""
GATE_LABELS = {ROLE_LABEL: "efa-check"}
"""Our label on the gate Job's pod template; the head NetworkPolicy admits it to the Jobs API."""
RAY_CLUSTER_LABEL = "ray.io/cluster"
"""KubeRay's label on every pod of a RayCluster, set to the RayCluster's name (common/pod.go ``labelPod``)."""
STORAGE_PATH_ENV = "RAY_EFA_EKS_STORAGE_PATH"
"""Where ``python -m ray_efa_eks.training`` puts checkpoints by default (RunConfig.storage_path)."""
NCCL_SOCKET_IFNAME = "^lo,docker"
"""Exclude loopback and docker bridges: NCCL's bootstrap must use the pod's VPC interface."""
EFA_EXPORTER_ENV = "RAY_EFA_EKS_EFA_EXPORTER"
"""On EFA worker containers: the node agent exporter's node-local URL (components/addons/node_agent.py). The EFA counter
witness (efacheck/efa_counters.py ``EXPORTER_ENV``) reads the node's port counters there: Ray pods mount no host path
(a pod's own /sys has no port counters, and hostPath would need the ``privileged`` Pod Security level)."""
NODE_NAME_ENV = "RAY_EFA_EKS_NODE_NAME"
"""On EFA worker containers (downward API ``spec.nodeName``): the exporter must answer for this node."""
AUTH_TOKEN_KEY = "auth_token"
"""The Secret key KubeRay reads the Ray token from (its ``RAY_AUTH_TOKEN_SECRET_KEY``)."""
AUTH_SECRET_NAME = "ray-auth-token"
"""Default name of the token Secret (KubeRay's own default would be the cluster's name, owned by the CR)."""
MIN_TOKEN_AUTH_RAY = (2, 52)
"""KubeRay refuses ``authOptions.mode: token`` below Ray 2.52."""
IMAGE_ENV = "RAY_EFA_EKS_IMAGE"
"""Every Ray container's image, as env (read by the gate: efacheck/stale.py and stack_probe.IMAGE_ENV)."""
SPEC_HASH_ENV = "RAY_EFA_EKS_SPEC_HASH"
"""Every Ray container's :func:`spec_hash` of the RayCluster spec it was created from."""
UPGRADE_STRATEGIES = ("Recreate", "None")
"""KubeRay 1.7 CRD ``spec.upgradeStrategy.type`` enum."""
TOKEN_LENGTH = 64
"""Alphanumeric characters of the token (sent as an HTTP bearer token and a gRPC header)."""
CHART_ANNOTATION = "ray-efa-eks/kuberay-chart-version"
"""On the RayCluster: the KubeRay chart version the stack ran it with (read by :func:`chart_bump_problem`)."""
PATCH_FORCE_ANNOTATION = {"pulumi.com/patchForce": "true"}
"""On the RayCluster: Pulumi's server-side apply takes ``spec.workerGroupSpecs`` back from Ray's autoscaler.

The CRD gives ``workerGroupSpecs`` no ``x-kubernetes-list-type``, so server-side apply treats the list as one atomic
field, and Ray's KubeRay node provider, which patches ``replicas`` and ``scaleStrategy.workersToDelete`` into it,
becomes its owner. pulumi-kubernetes applies without force unless the resource carries this annotation (or its
provider ``enablePatchForce``: provider/pkg/await/await.go ``patchForce``, used by ``ssaUpdate``), so without it the
next ``pulumi up`` that changes the RayCluster after a scale-up fails with a field-manager conflict. Forcing resets
the fields the stack does not render (from zero: ``replicas`` to the CRD's default 0); KubeRay deletes no worker for
that while in-tree autoscaling is on (raycluster_controller.go v1.7.0 ``reconcilePods``: "Random Pod deletion is
disabled ... the only decision-maker for Pod deletions is Autoscaler"), and the autoscaler writes its count back on
its next round. Only the RayCluster is forced: every other object keeps conflicts as errors."""
STACK_NCCL_ENV = "RAY_EFA_EKS_STACK_NCCL_ENV"
"""JSON ``{name: value}`` of the ``NCCL_*`` variables this stack rendered on the container. A run's fabric capture
(training/fabric.py ``STACK_NCCL_ENV``) reads it to tell the stack's defaults (``ncclDebug``: WARN) from a user's
own ``NCCL_DEBUG*`` settings: the stack's are replaced for the run's capture, a user's are kept."""
GPU_MODEL_ENV = "RAY_EFA_EKS_GPU_MODEL"
"""The GPU model of the worker nodes (catalogue ``gpu_model``, e.g. ``L4``), on every Ray container."""
GPU_MEMORY_ENV = "RAY_EFA_EKS_GPU_MEMORY_MIB"
"""Memory of one worker GPU, MiB (catalogue ``gpu_memory_mib``; the smallest when groups differ), on every Ray
container: ``ray_efa_eks.training`` refuses a preset/batch/rank combination that cannot fit before any rank starts."""


def restricted_container(container: dict[str, Any]) -> dict[str, Any]:
    """``container`` with :data:`CONTAINER_SECURITY_CONTEXT` (the head's and the gate's containers)."""
    return {**container, "securityContext": json.loads(json.dumps(CONTAINER_SECURITY_CONTEXT))}


def ray_version_tuple(version: str) -> tuple[int, ...]:
    """``2.58.0`` -> (2, 58, 0); a version Ray token auth cannot judge raises ValueError."""
    try:
        return tuple(int(p) for p in version.split(".")[:3])
    except ValueError:
        raise ValueError(f"rayVersion {version!r}: expected MAJOR.MINOR[.PATCH], e.g. 2.58.0") from None


def token_client_env(secret_name: str) -> list[dict[str, Any]]:
    """Env for a container that talks to the cluster as a client (``ray job submit``, the Jobs SDK).

    Ray's clients send the token only when ``RAY_AUTH_MODE=token`` (``get_auth_headers_if_auth_enabled``);
    the token itself comes from the Secret, as KubeRay wires it into the Ray pods.
    """
    return [
        {"name": "RAY_AUTH_MODE", "value": "token"},
        {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": secret_name, "key": AUTH_TOKEN_KEY}}},
    ]


def auth_options(token_auth: bool, ray_version: str, secret_name: str) -> dict[str, str] | None:
    """KubeRay ``spec.authOptions`` for token mode with our Secret, or None (no auth) when off."""
    if not token_auth:
        return None
    if ray_version_tuple(ray_version)[:2] < MIN_TOKEN_AUTH_RAY:
        raise ValueError(
            f"RayCluster: Ray token auth needs Ray >= 2.52, rayVersion is {ray_version}; "
            "use a newer image or turn token auth off (rayTokenAuth: false)"
        )
    return {"mode": "token", "secretName": secret_name}


def aws_env(region: str | None) -> list[dict[str, str]]:
    """AWS SDK environment for the Ray pods: the region, and no EC2 instance metadata (IMDS) probing.

    The nodes' IMDSv2 hop limit of 1 keeps pods away from IMDS, so an SDK that probes it for a region or
    credentials waits for timeouts instead (Arrow's S3 filesystem measured 12 s before apache/arrow#46723).
    ``AWS_REGION`` / ``AWS_DEFAULT_REGION`` answer the region question (botocore reads ``AWS_DEFAULT_REGION``,
    the newer SDKs and the AWS SDK for C++ under pyarrow ``AWS_REGION`` first); ``AWS_EC2_METADATA_DISABLED``
    turns IMDS off in botocore (utils.IMDSFetcher) and the AWS SDK for C++ (its EC2 metadata client). Pod
    Identity credentials are untouched: they come from ``AWS_CONTAINER_CREDENTIALS_FULL_URI`` (botocore's
    ContainerProvider, ahead of the instance-metadata provider in credentials.create_credential_resolver).
    """
    env = [{"name": "AWS_EC2_METADATA_DISABLED", "value": "true"}]
    if region:
        env = [{"name": "AWS_REGION", "value": region}, {"name": "AWS_DEFAULT_REGION", "value": region}, *env]
    return env


def ray_start_params(params: dict[str, Any]) -> dict[str, str]:
    """KubeRay wants every rayStartParams value as a string; convert and validate."""
    out: dict[str, str] = {}
    for key, value in params.items():
        if not isinstance(key, str) or not key or key.startswith("-"):
            raise ValueError(f"rayStartParams key {key!r}: use the flag name without dashes, e.g. 'num-cpus'")
        if value is None or isinstance(value, (dict, list, tuple)):
            raise ValueError(f"rayStartParams[{key!r}] = {value!r}: must be a scalar (str, int, float, bool)")
        out[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def stack_nccl_env(env: list[dict[str, Any]]) -> dict[str, str]:
    """:data:`STACK_NCCL_ENV` for a container whose env is ``env``: the NCCL_* values it renders, as JSON."""
    rendered = {e["name"]: e["value"] for e in env if e["name"].startswith("NCCL_") and "value" in e}
    return {"name": STACK_NCCL_ENV, "value": json.dumps(rendered, sort_keys=True, separators=(",", ":"))}


def gpu_env(instance_types: list[InstanceType]) -> list[dict[str, str]]:
    """:data:`GPU_MODEL_ENV` and :data:`GPU_MEMORY_ENV` from the catalogue entries of the worker groups' types."""
    gpus = [it for it in instance_types if it.gpus and it.gpu_memory_mib]
    if not gpus:
        return []
    models = ",".join(dict.fromkeys(str(it.gpu_model) for it in gpus))
    return [
        {"name": GPU_MODEL_ENV, "value": models},
        {"name": GPU_MEMORY_ENV, "value": str(min(it.gpu_memory_mib for it in gpus))},
    ]


def efa_env(instance_type: InstanceType, efa: bool, nccl_debug: str, nccl_net_plugin: str) -> list[dict[str, str]]:
    """NCCL/libfabric environment for training pods; empty of EFA settings when EFA is off."""
    env = [{"name": "NCCL_DEBUG", "value": nccl_debug}, {"name": "NCCL_SOCKET_IFNAME", "value": NCCL_SOCKET_IFNAME}]
    if efa:
        env += [
            {"name": "FI_PROVIDER", "value": "efa"},
            {"name": "NCCL_NET_PLUGIN", "value": nccl_net_plugin},
            {"name": "FI_EFA_FORK_SAFE", "value": "1"},
        ]
        if instance_type.gpudirect_rdma:
            env.append({"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"})
    return env


DAEMONSET_MEMORY_MIB = 1024
"""Left on a GPU node for its DaemonSets (node agent, device plugins, DCGM exporter, EKS's agents: about 470 MiB of
requests in the default stack; tools/layout_fit.py places them)."""


@dataclass
class WorkerGroupArgs:
    """One GPU worker group: one pod per node, taking the whole node."""

    name: str
    """The group's name in the RayCluster (``workerGroupSpecs[].groupName``)."""
    instance_type: InstanceType
    """Catalogue entry of the nodes' type: the pod asks for all its GPUs and EFA interfaces."""
    replicas: int
    """Worker pods, one per node; with ``scale_from_zero`` the maximum."""
    efa: bool = True
    """The pod asks for the node's EFA interfaces and gets the EFA/NCCL environment."""
    node_selector: dict[str, str] = field(default_factory=lambda: {ROLE_LABEL: GPU_ROLE})
    """Nodes the workers may run on (our GPU role label)."""
    cpu_reserve: int | None = None
    """vCPUs left for kubelet and daemonsets; default max(2, vcpus // 12)."""
    memory_reserve_mib: int | None = None
    """Memory left for kubelet/daemonsets; default max(8 GiB, 10%, what the kubelet keeps + 1 GiB for the GPU
    node's DaemonSets): a type whose many pod slots make nodeadm reserve more (``node_allocatable``) still fits."""
    ray_start_params: dict[str, Any] = field(default_factory=dict)
    """More ``ray start`` parameters (flag names without dashes, scalar values)."""
    scale_from_zero: bool = False
    """Ray's autoscaler (``RayClusterArgs.autoscaler``) runs this group from 0 to ``replicas`` workers: the spec
    carries ``minReplicas: 0``, ``maxReplicas: replicas`` and no ``replicas`` (the autoscaler owns it; a value here
    would be written back on every ``pulumi up``)."""
    workers_to_delete: list[str] = field(default_factory=list)
    """Worker pods KubeRay deletes first (``scaleStrategy.workersToDelete``; KubeRay v1.7.0 raycluster_controller.go
    lines 1132-1153 delete them whatever ``replicas`` says; muted in the Recreate hash, so nothing is recreated)."""

    def resources(self) -> dict[str, dict[str, str]]:
        it = self.instance_type
        cpu = it.vcpus - (self.cpu_reserve if self.cpu_reserve is not None else max(2, it.vcpus // 12))
        mem = it.memory_mib - (
            self.memory_reserve_mib
            if self.memory_reserve_mib is not None
            else max(8192, it.memory_mib // 10, it.memory_mib - allocatable_memory_mib(it) + DAEMONSET_MEMORY_MIB)
        )
        if cpu < 1 or mem < 1024:
            raise ValueError(f"worker group {self.name}: reserve leaves cpu={cpu}, memory={mem}Mi on {it.name}")
        extra = {"nvidia.com/gpu": it.gpus}
        if self.efa:
            extra["vpc.amazonaws.com/efa"] = it.max_efa_interfaces
        return pod_resources(str(cpu), f"{(mem // 1024)}Gi", extra)


@dataclass
class RayClusterArgs:
    """Inputs of :class:`RayCluster`."""

    provider: k8s.Provider
    """Kubernetes provider of the cluster the RayCluster is created in."""
    image: str
    """The one image of the head and the workers (the DLC), so every process runs one build."""
    worker_groups: list[WorkerGroupArgs]
    """The GPU worker groups (the stack has one)."""
    ray_version: str = "2.58.0"
    """``spec.rayVersion``: must be the image's Ray (2.52 or newer with ``token_auth``)."""
    namespace: str = "ray"
    """Namespace of the Ray pods, at Pod Security ``baseline`` (:data:`POD_SECURITY_LABELS`)."""
    nccl_debug: str = "WARN"
    """``NCCL_DEBUG`` of the workers (``WARN``; ``INFO`` logs the transport NCCL picks)."""
    nccl_net_plugin: str = "ofi"
    """``NCCL_NET_PLUGIN`` of EFA workers (``ofi``: aws-ofi-nccl)."""
    head_cpu: str = "2"
    """CPU of the head pod (requests == limits); the head runs no training (``num-cpus: 0``)."""
    head_memory: str = "8Gi"
    """Memory of the head pod (requests == limits): GCS, the dashboard and the Jobs API."""
    service_account_name: str | None = None
    """Service account of every Ray pod (head and workers); pod identity binds IAM to it."""
    create_service_account: bool = True
    """Create ``service_account_name`` in the namespace (False: it exists already)."""
    storage_path: pulumi.Input[str] | None = None
    """Checkpoint storage (e.g. ``s3://bucket/ray-train``), exported to every pod as RAY_EFA_EKS_STORAGE_PATH."""
    runtime_env_pip: list[str] = field(default_factory=list)
    """Pip packages for jobs, exposed as RAY_RUNTIME_ENV_PIP for ``training submit``."""
    network_policy: bool = True
    """NetworkPolicies on every Ray pod: all ports between the cluster's own pods, the gate Job to the head's
    Jobs API, the metrics ports from ``metrics_from_namespaces``; everything else refused."""
    network_policy_from_namespaces: list[str] = field(default_factory=list)
    """Extra namespaces allowed to the head's dashboard/Jobs port (8265) only."""
    metrics_from_namespaces: list[str] = field(default_factory=lambda: [METRICS_NAMESPACE])
    """Namespaces whose pods may scrape the Ray pods' metrics ports (:data:`METRICS_PORTS`) only."""
    upgrade_strategy: str = "Recreate"
    """``spec.upgradeStrategy.type``: Recreate restarts every pod on a spec change (what the gate then checks);
    None leaves running pods on the old spec (the gate then fails ``stale`` until they are replaced by hand)."""
    token_auth: bool = True
    """Ray token authentication: Jobs API, dashboard and GCS refuse requests without the token (``auth_token``)."""
    auth_secret_name: str = AUTH_SECRET_NAME
    """The token Secret this component creates in ``namespace`` (key ``auth_token``)."""
    region: str | None = None
    """AWS region of the stack: every Ray container gets :func:`aws_env` (region set, IMDS probing off)."""
    efa_exporter_url: str | None = None
    """The node agent's node-local exporter URL (``NodeAgent.exporter_url``), given to EFA worker containers as
    RAY_EFA_EKS_EFA_EXPORTER; None: the counter witness has no exporter (it then reads the pod's own /sys)."""
    autoscaler: AutoscalerArgs | None = None
    """Ray's autoscaler v2 (components/ray/ray_autoscaler.py); required by a worker group with ``scale_from_zero``."""
    kuberay_chart_version: str | None = None
    """The operator's chart version, recorded on the RayCluster (:data:`CHART_ANNOTATION`): a chart bump and a spec
    change in one update are refused (KubeRay recreates nothing on an operator version change)."""
    depends_on: list[pulumi.Resource] = field(default_factory=list)
    """What the RayCluster waits for besides its namespace (device plugins, Pod Identity, add-ons)."""
    after_namespace: Callable[[k8s.core.v1.Namespace], list[pulumi.Resource]] | None = None
    """Called with the Ray namespace once it is registered; the RayCluster also waits for what it returns. The
    stack installs the KubeRay operator here: watching only this namespace, its chart creates a Role in it, so the
    namespace must come first, and the RayCluster CRD comes with the operator."""


def _container(name: str, image: str, resources: dict, env: list[dict], ports: list[dict] | None = None) -> dict:
    check_guaranteed(resources, f"container {name}")
    c = {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "resources": resources,
        "env": env,
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "ray stop"]}}},
    }
    if ports:
        c["ports"] = ports
    return c


PROVIDER_CHECK = "efa-provider-check"
PROVIDER_CHECK_SCRIPT = (
    'out=$(fi_info -p efa -t FI_EP_RDM 2>&1); rc=$?\n'
    'if [ "$rc" -eq 0 ] && printf "%s\\n" "$out" | grep -q "provider: efa"; then\n'
    '  echo "[efa-provider-check] libfabric opened the efa provider on node $NODE_NAME"; exit 0\n'
    'fi\n'
    'echo "[efa-provider-check] FAIL on node $NODE_NAME: fi_info -p efa -t FI_EP_RDM exited $rc: $out" >&2\n'
    'exit 1\n'
)
"""The device-level half of a node's fabric proof, in the Ray worker's own pod (components/addons/node_agent.py proves the
rest). ``fi_info -p efa`` needs ``/dev/infiniband/uverbs*``, which the EFA device plugin mounts only into containers
that request ``vpc.amazonaws.com/efa`` (rdma-core libibverbs/init.c ``try_access_device``); an init container with
the worker's own requests gets the worker's devices (the kubelet's device manager hands an init container's devices
on to the app containers), so the check costs no device. It fails: Ray never starts in this pod, and the pod's
status and Events name the node and what fi_info said."""


def provider_check_container(image: str, resources: dict, env: list[dict]) -> dict:
    """Init container: ``fi_info -p efa`` with the worker's image, env, devices and requests (requests == limits, so
    the pod's effective request is the worker's: max(init, sum of app containers))."""
    return {
        "name": PROVIDER_CHECK,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", PROVIDER_CHECK_SCRIPT],
        "resources": resources,
        "env": [*env, {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def _shm(size: str) -> list[dict]:
    return [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": size}}]


def _muted(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` without what KubeRay's Recreate hash mutes (GenerateHashWithoutReplicasAndWorkersToDelete) and
    without our own hash variable."""
    s = json.loads(json.dumps(spec, default=lambda o: f"<{type(o).__name__}>"))  # an Output is hashed as a marker
    s.pop("upgradeStrategy", None)
    groups = [("head", s["headGroupSpec"])] + [("worker", g) for g in s.get("workerGroupSpecs", [])]
    for role, g in groups:
        if role == "worker":
            for k in ("replicas", "minReplicas", "maxReplicas"):
                g.pop(k, None)
            g.get("scaleStrategy", {}).pop("workersToDelete", None)
            # ScaleStrategy is a struct value in KubeRay's types (raycluster_types.go v1.7.0 line 481): an absent one
            # and an empty one marshal alike, so hash them alike
            if not g.get("scaleStrategy", True):
                g.pop("scaleStrategy")
        pod = g["template"]["spec"]
        pod.pop("tolerations", None)
        pod.pop("schedulingGates", None)
        for c in pod.get("containers", []):
            c["env"] = [e for e in c.get("env", []) if e.get("name") != SPEC_HASH_ENV]
    return s


def spec_hash(spec: dict[str, Any]) -> str:
    """Short hash of a plain RayCluster spec, blind to scaling (replicas) as KubeRay's Recreate hash is.

    Hash the *resolved* spec (:func:`resolved_spec_hash`): KubeRay hashes the values it receives, so a checkpoint
    prefix change (the storage path is an Output) recreates every pod, and the gate must know.
    """
    blob = json.dumps(_muted(spec), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def resolved_spec_hash(spec: dict[str, Any]) -> pulumi.Output[str] | str:
    """:func:`spec_hash` of ``spec`` with every Output in it resolved (a plain string when there is none)."""
    if not _has_output(spec):
        return spec_hash(spec)
    return pulumi.Output.from_input(_snapshot(spec)).apply(spec_hash)


def _snapshot(value: Any) -> Any:
    """A copy of the dict/list structure (leaves shared): the caller goes on to add the hash to the spec's env."""
    if isinstance(value, dict):
        return {k: _snapshot(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_snapshot(v) for v in value]
    return value


def _has_output(value: Any) -> bool:
    if isinstance(value, pulumi.Output):
        return True
    if isinstance(value, dict):
        return any(_has_output(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_output(v) for v in value)
    return False


def build_spec(args: RayClusterArgs) -> dict[str, Any]:
    """The RayCluster ``spec`` as plain data (validated against the KubeRay CRD in tests)."""
    if args.upgrade_strategy not in UPGRADE_STRATEGIES:
        raise ValueError(
            f"RayCluster: upgrade_strategy {args.upgrade_strategy!r} is not one of {UPGRADE_STRATEGIES}; "
            "use Recreate (a spec change restarts every pod)"
        )
    if not args.worker_groups:
        raise ValueError("RayCluster: at least one worker group is required")
    names = [g.name for g in args.worker_groups]
    if len(set(names)) != len(names):
        raise ValueError(f"RayCluster: worker group names must be unique, got {names}")
    storage_env = [{"name": STORAGE_PATH_ENV, "value": args.storage_path}] if args.storage_path else []
    head_env = (
        [{"name": "RAY_RUNTIME_ENV_PIP", "value": ",".join(args.runtime_env_pip)}] if args.runtime_env_pip else []
    )
    head_env += storage_env + gpu_env([g.instance_type for g in args.worker_groups]) + aws_env(args.region)
    head_pod: dict[str, Any] = {
        "nodeSelector": {ROLE_LABEL: SYSTEM_ROLE},
        "securityContext": json.loads(json.dumps(POD_SECURITY_CONTEXT)),
        "containers": [
            restricted_container(
                _container(
                    "ray-head",
                    args.image,
                    pod_resources(args.head_cpu, args.head_memory),
                    head_env,
                    [{"name": n, "containerPort": p} for n, p in HEAD_PORTS.items()],
                )
            )
        ],
        "volumes": _shm("2Gi"),
    }
    if args.service_account_name:
        head_pod["serviceAccountName"] = args.service_account_name
    groups = []
    for g in args.worker_groups:
        if g.replicas < 0:
            raise ValueError(f"worker group {g.name}: replicas must be >= 0, got {g.replicas}")
        if g.efa and not g.instance_type.efa_supported:
            raise ValueError(f"worker group {g.name}: {g.instance_type.name} has no EFA; set efa=False")
        res = g.resources()
        nccl = efa_env(g.instance_type, g.efa, args.nccl_debug, args.nccl_net_plugin)
        env = nccl + [stack_nccl_env(nccl)] + storage_env + gpu_env([g.instance_type]) + aws_env(args.region)
        pod: dict[str, Any] = {
            "nodeSelector": dict(g.node_selector),
            "tolerations": [dict(GPU_TOLERATION)],
            "securityContext": json.loads(json.dumps(POD_SECURITY_CONTEXT)),
            "containers": [restricted_container(_container("ray-worker", args.image, res, env))],
            "volumes": _shm(f"{max(1, g.instance_type.memory_mib // 1024 // 4)}Gi"),
        }
        if g.efa:  # the node's libfabric must open the efa provider on the worker's own device before Ray starts
            pod["initContainers"] = [
                restricted_container(provider_check_container(args.image, res, [dict(e) for e in env]))
            ]
        if g.efa and args.efa_exporter_url:  # the EFA counter witness reads its node's exporter
            pod["containers"][0]["env"] += [
                {"name": EFA_EXPORTER_ENV, "value": args.efa_exporter_url},
                {"name": NODE_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            ]
        if args.service_account_name:
            pod["serviceAccountName"] = args.service_account_name
        if g.scale_from_zero and args.autoscaler is None:
            raise ValueError(
                f"worker group {g.name}: scale_from_zero needs RayClusterArgs.autoscaler (Ray's "
                "autoscaler v2 adds and removes its workers)"
            )
        if g.scale_from_zero and g.workers_to_delete:
            raise ValueError(
                f"worker group {g.name}: workers_to_delete is for a fixed group; with scale_from_zero "
                "Ray's autoscaler owns scaleStrategy.workersToDelete"
            )
        scaling = (
            {"minReplicas": 0, "maxReplicas": g.replicas}
            if g.scale_from_zero
            else {"replicas": g.replicas, "minReplicas": g.replicas, "maxReplicas": g.replicas}
        )
        group: dict[str, Any] = {
            "groupName": g.name,
            **scaling,
            "rayStartParams": ray_start_params(g.ray_start_params),
            "template": {"metadata": {"labels": {"ray-efa-eks/worker-group": g.name}}, "spec": pod},
        }
        if g.workers_to_delete:
            group["scaleStrategy"] = {"workersToDelete": list(g.workers_to_delete)}
        groups.append(group)
    spec: dict[str, Any] = {
        "rayVersion": args.ray_version,
        "enableInTreeAutoscaling": args.autoscaler is not None,
        "headGroupSpec": {
            "serviceType": "ClusterIP",
            "rayStartParams": ray_start_params({"num-cpus": 0, "dashboard-host": "0.0.0.0"}),
            "template": {"metadata": {"labels": dict(HEAD_LABELS)}, "spec": head_pod},
        },
        "workerGroupSpecs": groups,
        "upgradeStrategy": {"type": args.upgrade_strategy},
    }
    if args.autoscaler is not None:
        spec["autoscalerOptions"] = autoscaler_options(args.autoscaler)
        head_pod["volumes"] = [*head_pod["volumes"], token_volume()]
    auth = auth_options(args.token_auth, args.ray_version, args.auth_secret_name)
    if auth:
        spec["authOptions"] = auth
    containers = [c for g in [spec["headGroupSpec"], *groups] for c in g["template"]["spec"]["containers"]]
    for c in containers:
        c["env"] = [*c["env"], {"name": IMAGE_ENV, "value": c["image"]}]
    digest = resolved_spec_hash(spec)
    for c in containers:
        c["env"].append({"name": SPEC_HASH_ENV, "value": digest})
    return spec


def ray_pods_network_policy_spec(cluster: str, metrics_from_namespaces: list[str] | None = None) -> dict[str, Any]:
    """NetworkPolicy spec selecting every Ray pod of ``cluster`` (head and workers).

    KubeRay labels each pod it creates ``ray.io/cluster: <cluster>`` (ray-operator/controllers/ray/common/pod.go
    ``labelPod``, not overridable by the template), so the selector follows the pods KubeRay really runs.
    Admitted: every port from the cluster's own Ray pods (GCS 6379, dashboard 8265, client 10001, raylet and
    object manager ports, dashboard agent 52365, worker ports 10002-19999, and the ephemeral ports NCCL's bootstrap
    and torch's TCPStore pick between workers: Ray's own port list leaves most of them random, and KubeRay's
    RayClusterNetworkPolicy feature, networkpolicy_controller.go ``buildBaseIngressRules``, allows all ports
    within the cluster for the same reason); the metrics ports (:data:`METRICS_PORTS`) from
    ``metrics_from_namespaces`` (Prometheus). EFA's RDMA traffic bypasses the kernel's IP stack and is not
    subject to NetworkPolicy at all.
    """
    pods = {"podSelector": {"matchLabels": {RAY_CLUSTER_LABEL: cluster}}}
    ingress: list[dict[str, Any]] = [{"from": [pods]}]
    if metrics_from_namespaces:
        ingress.append(
            {
                "from": [
                    {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: ns}}} for ns in metrics_from_namespaces
                ],
                "ports": [{"protocol": "TCP", "port": p} for p in METRICS_PORTS.values()],
            }
        )
    return {
        "podSelector": {"matchLabels": {RAY_CLUSTER_LABEL: cluster}},
        "policyTypes": ["Ingress"],
        "ingress": ingress,
    }


DEFAULT_DENY_SPEC = {"podSelector": {}, "policyTypes": ["Ingress"]}
"""Selects every pod of the namespace and admits nothing: what the other policies do not allow is refused (the
gate Job's pod, and any pod added to the namespace later, take no ingress)."""


def head_network_policy_spec(from_namespaces: list[str] | None = None) -> dict[str, Any]:
    """NetworkPolicy spec for the head's client port: the gate Job's pods, plus ``from_namespaces``, reach the
    dashboard / Jobs API (8265) and nothing else; the Ray pods reach it through :func:`ray_pods_network_policy_spec`
    (policies add up). Every other pod, in this namespace or any other, is refused. ``kubectl port-forward``
    enters through the pod's own network namespace and is not subject to the policy, so the dashboard stays
    reachable that way.
    """
    dashboard = [{"protocol": "TCP", "port": HEAD_PORTS["dashboard"]}]
    ingress: list[dict[str, Any]] = [
        {"from": [{"podSelector": {"matchLabels": dict(GATE_LABELS)}}], "ports": dashboard}
    ]
    if from_namespaces:
        ingress.append(
            {
                "from": [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: ns}}} for ns in from_namespaces],
                "ports": list(dashboard),
            }
        )
    return {"podSelector": {"matchLabels": dict(HEAD_LABELS)}, "policyTypes": ["Ingress"], "ingress": ingress}


class RayCluster(pulumi.ComponentResource):
    """The ``ray.io/v1`` RayCluster custom resource, its namespace, service account and head NetworkPolicy."""

    custom_resource: k8s.apiextensions.CustomResource
    name: str
    namespace: str
    head_service_name: str
    dashboard_address: str
    spec: dict[str, Any]
    auth_secret_name: str | None
    """The token Secret (key ``auth_token``); None when token auth is off."""
    auth_token: pulumi.Output[str] | None
    """The Ray token (a secret output); None when token auth is off."""
    spec_hash: str
    """:func:`spec_hash` of ``spec``, as every Ray container's ``RAY_EFA_EKS_SPEC_HASH``."""

    def __init__(self, name: str, args: RayClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:index:RayCluster", name, None, opts)
        self.spec = build_spec(args)  # validates before anything is registered
        self.name = name
        self.namespace = args.namespace
        ns = k8s.core.v1.Namespace(
            f"{name}-ns",
            metadata={"name": args.namespace, "labels": dict(POD_SECURITY_LABELS)},
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider),
        )
        in_ns = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[ns])
        deps: list[pulumi.Resource] = [ns]
        if args.after_namespace is not None:
            deps += args.after_namespace(ns)
        if args.service_account_name and args.create_service_account:
            deps.append(
                k8s.core.v1.ServiceAccount(
                    f"{name}-sa",
                    metadata={"name": args.service_account_name, "namespace": args.namespace},
                    automount_service_account_token=False,
                    opts=in_ns,
                )
            )
        if args.network_policy:
            deps.append(
                k8s.networking.v1.NetworkPolicy(
                    f"{name}-head-ingress",
                    metadata={"name": f"{name}-head-ingress", "namespace": args.namespace},
                    spec=head_network_policy_spec(args.network_policy_from_namespaces),
                    opts=in_ns,
                )
            )
            deps.append(
                k8s.networking.v1.NetworkPolicy(
                    f"{name}-default-deny",
                    metadata={"name": f"{name}-default-deny", "namespace": args.namespace},
                    spec=DEFAULT_DENY_SPEC,
                    opts=in_ns,
                )
            )
            deps.append(
                k8s.networking.v1.NetworkPolicy(  # strict mode: the pods' DNS, S3 and API calls
                    f"{name}-egress",
                    metadata={"name": f"{name}-egress", "namespace": args.namespace},
                    spec=allow_all_egress(),
                    opts=in_ns,
                )
            )
            deps.append(
                k8s.networking.v1.NetworkPolicy(
                    f"{name}-pods-ingress",
                    metadata={"name": f"{name}-pods-ingress", "namespace": args.namespace},
                    spec=ray_pods_network_policy_spec(name, args.metrics_from_namespaces),
                    opts=in_ns,
                )
            )
        self.auth_secret_name = self.auth_token = None
        # No keepers: generated on the first `pulumi up`, then read from state, so the token is stable. Kept with
        # auth off too (module docstring): turning auth off never deletes a Secret that running pods reference.
        token = random.RandomPassword(
            f"{name}-auth-token", length=TOKEN_LENGTH, special=False, opts=pulumi.ResourceOptions(parent=self)
        )
        deps.append(
            k8s.core.v1.Secret(
                f"{name}-auth-token",
                metadata={"name": args.auth_secret_name, "namespace": args.namespace},
                type="Opaque",
                string_data={AUTH_TOKEN_KEY: token.result},
                opts=in_ns,
            )
        )
        if args.token_auth:
            self.auth_secret_name = args.auth_secret_name
            self.auth_token = pulumi.Output.secret(token.result)
        self.spec_hash = self.spec["headGroupSpec"]["template"]["spec"]["containers"][0]["env"][-1]["value"]
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": args.namespace,
            "annotations": dict(PATCH_FORCE_ANNOTATION),
        }
        hooks = None
        if args.kuberay_chart_version:
            metadata["annotations"][CHART_ANNOTATION] = args.kuberay_chart_version
            hooks = pulumi.ResourceHookBinding(
                before_update=[
                    pulumi.ResourceHook(
                        f"{name}-raycluster-chart-bump", _check_chart_bump, pulumi.ResourceHookOptions(on_dry_run=True)
                    )
                ]
            )
        self.custom_resource = k8s.apiextensions.CustomResource(
            f"{name}-raycluster",
            api_version="ray.io/v1",
            kind="RayCluster",
            metadata=metadata,
            spec=self.spec,
            opts=pulumi.ResourceOptions(
                parent=self, provider=args.provider, depends_on=[*deps, *args.depends_on], hooks=hooks
            ),
        )
        # KubeRay names the head service <cluster>-head-svc.
        self.head_service_name = f"{name}-head-svc"
        self.dashboard_address = f"http://{self.head_service_name}.{args.namespace}.svc.cluster.local:8265"
        self.register_outputs({"headServiceName": self.head_service_name, "dashboardAddress": self.dashboard_address})


def chart_bump_problem(old: dict[str, Any] | None, new: dict[str, Any] | None) -> str | None:
    """Why a RayCluster update from ``old`` to ``new`` inputs would leave stale pods, or None.

    KubeRay v1.6.0-v1.7.0 recreate nothing when the head was created by another operator version:
    ``shouldRecreatePodsForUpgrade`` (raycluster_controller.go v1.7.0 lines 1482-1491) rewrites the head's
    ``ray.io/kuberay-version`` and ``ray.io/upgrade-strategy-recreate-hash`` (to the hash of the spec it sees now) and
    returns false. A spec change that reaches the new operator together with the chart bump is thereby recorded as
    done: the old pods stay and the gate fails ``stale`` on every run.
    """

    def chart(inputs: dict[str, Any] | None) -> str | None:
        return (((inputs or {}).get("metadata") or {}).get("annotations") or {}).get(CHART_ANNOTATION)

    before, after = chart(old), chart(new)
    if not before or not after or before == after:
        return None
    old_spec, new_spec = (old or {}).get("spec"), (new or {}).get("spec")
    if old_spec is None or new_spec is None:
        return None
    try:
        same = spec_hash(_plain(old_spec)) == spec_hash(_plain(new_spec))
    except (KeyError, TypeError, AttributeError):  # not a spec this module wrote: compare it whole
        same = _plain(old_spec) == _plain(new_spec)
    if same:
        return None
    return (
        f"the KubeRay chart moves {before} -> {after} in the same update as a RayCluster spec change: KubeRay "
        "recreates no pod when the operator version changes (raycluster_controller.go v1.7.0 "
        "shouldRecreatePodsForUpgrade, lines 1482-1491: it rewrites the head's ray.io/kuberay-version and recreate "
        "hash instead), so the pods keep the old spec and the EFA gate fails stale. Fix: bump "
        "kuberayChartVersion alone first (`pulumi up`), then apply the other change in a second `pulumi up` "
        "(docs/upgrades.md: KubeRay chart and CRDs)"
    )


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=lambda o: f"<{type(o).__name__}>"))


def _check_chart_bump(args: pulumi.ResourceHookArgs) -> None:
    problem = chart_bump_problem(dict(args.old_inputs or {}), dict(args.new_inputs or {}))
    if problem:
        raise ValueError(problem)
