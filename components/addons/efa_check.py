"""EfaCheckJob: a post-deploy Kubernetes Job that fails ``pulumi up`` when NCCL is not on EFA.

The Job runs in the same DLC image, carries the EFA proof (the ``efacheck`` package: it imports nothing outside itself, the
FSDP message sizes it times included) in a ConfigMap, waits for the Ray head's Jobs API, submits
``python -m ray_efa_eks.efacheck.efa_check --json`` with the topology the stack declares (nodes, GPUs
and EFA interfaces per node, GPUDirect RDMA, from the catalogue), follows its log and exits with the check's own
exit code. ``backoffLimit: 0``: one verdict, no retries.

One deadline story (:class:`Deadlines`): the script waits for the head, then gives the check its topology wait,
start-up and sweep budgets; ``activeDeadlineSeconds`` is their sum plus slack, and the pulumi-kubernetes await
(``customTimeouts``, default 10 min for a Job) is longer still, so Kubernetes ends a stuck Job and Pulumi reads its
``Failed`` condition instead of timing out blind.

Re-runs: the Job's name carries a hash of what it vouches for (image, GPU type, node count, EFA setting, NCCL env,
the check's arguments, among them the RayCluster's spec hash, and the node identity), so a change to any of them
replaces the Job and the check runs again: anything in the RayCluster spec (auth mode, resources, the checkpoint
storage path: the hash is taken over the *resolved* spec, as KubeRay hashes what it receives), and anything that
makes EKS replace the nodes under the pods (a new GPU or system launch template version: root volume, IMDS hop limit,
encryption, capacity mode or reservation; the Kubernetes version). The check then fails ``stale`` on any Ray pod
whose ``RAY_EFA_EKS_IMAGE``/``RAY_EFA_EKS_SPEC_HASH`` is not what the Job was rendered for.

Stopping: the script traps SIGTERM (Job deleted on replacement or by ``pulumi destroy``, ``activeDeadlineSeconds``)
and stops its Ray job (``ray job stop``) before it exits, as the ``timeout`` path does; a new check first stops
every earlier ``efa-check-*`` Ray job still running (one orphaned by a SIGKILL), so it never waits on its own
predecessor's GPUs. ``terminationGracePeriodSeconds`` leaves the trap time to reach the head. A Job that failed
is replaced on the next ``pulumi up`` (``pulumi.com/replaceUnready``; without it pulumi-kubernetes keeps awaiting
the failed Job and every later up fails the same way), delete-before-replace since the name is fixed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shlex
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from .. import payload
from ..gate_request import CheckRequest
from ..nodes import cold_start
from ..nodes.instances import InstanceType
from ..kube import POD_SECURITY_CONTEXT, ROLE_LABEL, SYSTEM_ROLE, check_guaranteed, pod_resources
from ..ray.raycluster import GATE_LABELS, efa_env, restricted_container, token_client_env

SHIPPED = {"efacheck": None, "components": ("__init__.py", "gate_request.py")}
"""What the Job ships (components/payload.py), per package: every module of the EFA proof (None = every ``.py``), and
the check's typed options (gate_request.py, with the package's lazy ``__init__``: no Pulumi in the pod)."""
CHECK_MODULE = f"{payload.ROOT}.efacheck.efa_check"
IMAGE_FLEET_MODULE = f"{payload.ROOT}.efacheck.image_fleet"
GATE_STEPS = f"python -m {payload.ROOT}.efacheck.gate_steps"
"""The script's own steps (stop earlier checks, read the audit's digest, wait for and combine its verdict): a module
of the payload, run from the Job's working directory (:data:`MOUNT`)."""
MOUNT = "/opt/ray-efa-eks"
"""The Ray job's working_dir in the gate's container: the payload's ``ray_efa_eks/`` is mounted under it."""
CODE_VOLUME = "code"
TERMINATION_GRACE_S = 60
"""Time between SIGTERM and SIGKILL for the Job's pod: the trap's ``ray job stop`` (a few seconds) fits."""
AUDIT_LABELS = {ROLE_LABEL: "image-audit"}
"""Our label on the image audit Job's pod."""
AUDIT_RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]
"""All the image audit's ServiceAccount may do, in the Ray namespace only: read the pods' status (imageID)."""
NOBODY = 65534
"""The audit runs as this uid (``nobody``): it needs Python's standard library and its token file, nothing of root."""
AUDIT_TOKEN_VOLUME = "image-audit-token"
SA_TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where in-cluster clients (and efacheck/image_fleet.py) look for the token and the cluster CA."""
IMAGE_FLEET_DIR = "/var/run/ray-efa-eks"
IMAGE_FLEET_FILE = f"{IMAGE_FLEET_DIR}/image-fleet.json"
"""Where the image audit leaves its verdict for the gate's container (an emptyDir both mount)."""
SUBMIT_RETRY_S = 120
"""How long the script retries ``ray job submit`` (part of Deadlines.startup_s)."""
AUDIT_POLL_S = 10
"""Seconds between two passes of the image audit (it lists the Ray pods)."""
AUDIT_FINAL_S = 3 * AUDIT_POLL_S + 30
"""How long the script waits, after the check, for an audit pass taken after the check ended (part of slack_s)."""
AUDIT_STARTUP_S = 60
"""The audit sidecar's startupProbe allows this long for its first pass (the gate's container starts after it)."""


@dataclass(frozen=True)
class Deadlines:
    """Every wait of the gate, in seconds; the Job's and Pulumi's limits are derived, so they always agree."""

    head_wait_s: int = 600
    """Ray head's Jobs API answering (system node boot + multi-GB image pull)."""
    topology_wait_s: int = cold_start.wait_budget_s()
    """The check waits this long for every declared GPU node to join Ray (GPU nodes boot, prove, pull the image):
    the cold-start model's budget for the default layout (components/nodes/cold_start.py)."""
    sweep_timeout_s: int = 600
    """One collective sweep, NCCL init included; a hung collective fails after this."""
    sweeps: int = 1
    """2 with the EFA-vs-Socket comparison."""
    startup_s: int = 330
    """Per sweep: rank placement, start-up and counter reads before it and after it (2 x the check's STARTUP_S,
    150 s) plus job submission and CLI start-ups."""
    slack_s: int = 300
    """Pod scheduling on the system node (image already cached there by the head) + SUBMIT_RETRY_S + the image
    audit's last pass (AUDIT_FINAL_S)."""

    @property
    def check_s(self) -> int:
        """Upper bound of the check itself (the script's `timeout` on following its log)."""
        return self.topology_wait_s + self.sweeps * (self.startup_s + self.sweep_timeout_s)

    @property
    def active_deadline_s(self) -> int:
        """The Job's ``activeDeadlineSeconds``."""
        return self.head_wait_s + self.check_s + self.slack_s

    @property
    def pulumi_timeout_s(self) -> int:
        """``customTimeouts`` create/update: after Kubernetes has ended the Job, so Pulumi sees why."""
        return self.active_deadline_s + 120


@dataclass
class EfaCheckJobArgs:
    """Inputs of :class:`EfaCheckJob`."""

    provider: k8s.Provider
    """Kubernetes provider of the cluster the Job runs in."""
    image: str
    """Must be the RayCluster's image: the check runs the same stack it vouches for."""
    namespace: str
    """The RayCluster's namespace: the Job runs beside the head whose Jobs API it calls."""
    dashboard_address: str
    """The head's Jobs API address (``RayCluster.dashboard_address``, ``http://<svc>:8265``)."""
    ray_cluster: pulumi.Resource
    """The RayCluster resource: the Job waits for it, so it never asks a head that does not exist yet."""
    instance_type: InstanceType | None = None
    """GPU node type (catalogue): GPUs, EFA interfaces per node and GPUDirect RDMA the check expects."""
    node_count: int = 2
    """GPU nodes the stack declares; fewer within the deadline fails the check."""
    efa: bool = True
    """The GPU nodes have EFA: the check expects NCCL on the EFA transport (False: the Socket transport)."""
    nccl_debug: str = "WARN"
    """``NCCL_DEBUG`` of the check's ranks, as the RayCluster's workers get it."""
    nccl_net_plugin: str = "ofi"
    """As the RayCluster's workers get them (their NCCL env is part of what the check vouches for)."""
    blocking: bool = True
    """``pulumi up`` waits for the Job and fails with it; False: the Job runs, the update does not wait
    (``pulumi.com/skipAwait``)."""
    min_busbw_gbps: float = 0.0
    """Fail below this peak all-reduce bus bandwidth, GB/s (``--min-busbw-gbps``); 0 = off."""
    ttl_seconds_after_finished: int | None = None
    """Seconds Kubernetes keeps the finished Job; None keeps it (the record of the last proof). With a TTL the Job
    disappears, and the next ``pulumi up`` (the project refreshes on every up: Pulumi.yaml ``options.refresh``) would
    create it again and re-run the whole gate, GPU nodes and all."""
    auth_secret_name: str | None = None
    """The RayCluster's token Secret (Ray token auth): the container gets RAY_AUTH_MODE=token and
    RAY_AUTH_TOKEN from its ``auth_token`` key, so ``ray job submit/logs/status`` authenticate."""
    min_busbw_fraction: float = 0.0
    """Fail below this fraction of the type's EFA line rate (catalogue ``efa_gbps``); 0 = off."""
    compare_socket: bool = False
    """Second sweep with NCCL on TCP sockets (EFA/Socket ratio); the sweep budget doubles."""
    strict_versions: bool = False
    """A library version that differs from the image manifest fails the check (``--strict-versions``);
    False: reported only."""
    require_counters: bool = False
    """Unreadable EFA hardware counters make an efa verdict undetermined (``--require-counters``); with EFA only."""
    storage_proof: bool = False
    """A GPU worker pod writes, lists, reads back and deletes an object under its $RAY_EFA_EKS_STORAGE_PATH
    (``--storage-proof``; efacheck/storage_proof.py); on when the stack creates the checkpoint bucket."""
    deadlines: Deadlines = field(default_factory=Deadlines)
    """``sweeps`` follows ``compare_socket``."""
    spec_hash: pulumi.Input[str] | None = None
    """The RayCluster's spec hash (``RayCluster.spec_hash``, resolved): every Ray pod must carry it (else stage
    ``stale``)."""
    node_identity: pulumi.Input[str] | None = None
    """What the Ray pods run on (hash of the GPU and system launch templates' resolved data and the Kubernetes
    version): a change replaces the nodes ("Customize managed nodes with launch templates"), so it names a new Job and
    the gate proves EFA again on the new nodes."""
    ray_cluster_name: str | None = None
    """The RayCluster's name (its pods' ``ray.io/cluster`` label): with it the gate pod's image audit sidecar checks
    that every Ray pod seen while the check runs ran one image digest (``image_audit``)."""
    image_audit: bool = True
    """Run the image audit (efacheck/image_fleet.py) when ``ray_cluster_name`` is given."""
    extra_check_args: list[str] = field(default_factory=list)
    """More arguments of the check (e.g. ``--compare-socket``; set ``deadlines.sweeps`` to match)."""
    depends_on: list[pulumi.Resource] = field(default_factory=list)
    """More resources the Job waits for (the node agent's DaemonSet: every EFA node's exporter ready, so the
    counter witness can read it)."""


def check_files() -> dict[str, str]:
    """The files the Job ships to the Ray job's working_dir (components/payload.py): ``ray_efa_eks/__init__.py``
    and ``ray_efa_eks/efacheck/<module>.py``."""
    files = payload.build(SHIPPED)
    if not {f"{payload.ROOT}/efacheck/efa_check.py", f"{payload.ROOT}/efacheck/nccl_log.py"} <= set(files):
        raise FileNotFoundError(f"EfaCheckJob: package {payload.ROOT}.efacheck lacks efa_check.py/nccl_log.py")
    return files


GATE_ALWAYS = ("address", "expect_nodes", "wait_s", "timeout_s")
"""The check's options the gate writes even at their defaults (:meth:`CheckRequest.argv`), so the Job's command
states the address, the topology and both deadlines it was rendered for; the others are written where they differ
from the check's default."""


def gate_transport(efa: bool, node_count: int) -> str:
    """What the gate can prove for a shape the config accepts: ``efa`` across >= 2 EFA nodes; ``socket`` across
    >= 2 nodes without EFA (NCCL's Socket transport); ``intra-node`` on one GPU node (no peer: EFA is not
    exercised, with or without ``allowSingleEfaNode``)."""
    if node_count == 1:
        return "intra-node"
    return "efa" if efa else "socket"


def check_args(
    instance_type: InstanceType | None,
    node_count: int,
    deadlines: Deadlines,
    min_busbw_gbps: float = 0.0,
    extra: list[str] | None = None,
    *,
    image: str | None = None,
    min_busbw_fraction: float = 0.0,
    compare_socket: bool = False,
    strict_versions: bool = False,
    require_counters: bool = False,
    storage_proof: bool = False,
    transport: str = "efa",
    spec_hash: str | None = None,
) -> list[str]:
    """The check's arguments (:data:`CHECK_MODULE`): the declared topology and the deadlines, from the catalogue and
    config.

    transport (:func:`gate_transport`): for ``socket`` and ``intra-node`` nothing EFA-specific is demanded (no EFA
    interfaces, GPUDirect RDMA, line-rate fraction, counters or Socket comparison): the gate demands only what the
    shape can have."""
    efa = transport == "efa"
    it = instance_type
    gbps = getattr(it, "efa_gbps", None) if efa else None
    if gbps and float(gbps).is_integer():
        gbps = int(gbps)  # 3200, not 3200.0: the line rate as the gate writes it (the Job's name hashes its command)
    request = CheckRequest(
        json=True,
        expect_nodes=node_count,
        wait_s=deadlines.topology_wait_s,
        timeout_s=deadlines.sweep_timeout_s,
        expect_transport=transport,
        expect_gpus_per_node=it.gpus if it is not None else 0,
        expect_nics=(it.max_efa_interfaces or None) if efa and it is not None else None,
        expect_gdrdma=bool(efa and it is not None and it.gpudirect_rdma),
        efa_gbps=gbps or None,
        image=image or None,
        spec_hash=spec_hash or None,
        min_busbw_gbps=min_busbw_gbps if min_busbw_gbps > 0 else None,
        min_busbw_fraction=min_busbw_fraction if efa and min_busbw_fraction > 0 else None,
        compare_socket=efa and compare_socket,
        strict_versions=strict_versions,
        require_counters=efa and require_counters,
        storage_proof=storage_proof,
    )
    gpus = ("expect_gpus_per_node",) if it is not None else ()  # the declared GPUs, 0 included
    return request.argv(always=GATE_ALWAYS + gpus) + list(extra or [])


def _fail_json(stage: str, reason: str) -> str:
    failure = {"stage": stage, "reason": reason}
    return shlex.quote(json.dumps({"verdict": "undetermined", "code": 2, "failure": failure}))


def check_script(
    dashboard_address: str,
    args: list[str] | float | None = None,
    deadlines: Deadlines = Deadlines(),
    working_dir: str = MOUNT,
    image_fleet_file: str | None = None,
) -> str:
    """Shell run by the Job: wait for the head, submit, follow the log, exit with the check's own exit code.

    ``args``: the check's arguments (:func:`check_args`); a number is taken as ``min_busbw_gbps`` with the
    default topology. Exit codes are the check's (0 efa, 1 fallback/failed, 2 undetermined, 3 unreadable); the
    script adds 2 for "the head never answered", "submission failed" and "the check overran its budget" (it
    then stops the job), and 143 when it is itself stopped (SIGTERM/SIGINT: it stops the Ray job first). Before
    submitting it stops earlier ``efa-check-*`` jobs still running (:data:`GATE_STEPS` ``stop-earlier``).
    """
    if not isinstance(args, list):
        args = check_args(None, 2, deadlines, float(args or 0))
    addr = shlex.quote(dashboard_address)
    cmd = " ".join(shlex.quote(a) for a in ["python", "-m", CHECK_MODULE, *args])
    # The image audit (sidecar) wrote the digest the Ray pods seen so far run; the check records it (its
    # $RAY_EFA_EKS_IMAGE_DIGEST, set through the Ray job's runtime env so the check's own arguments stay as rendered).
    read_digest = (
        f"renv=$({GATE_STEPS} read-digest {shlex.quote(image_fleet_file)} 2>/dev/null)"
        if image_fleet_file
        else 'renv=""'
    )
    head = _fail_json(
        "unreachable", f"Ray Jobs API at {dashboard_address} did not answer within {deadlines.head_wait_s} s"
    )
    submit = _fail_json("submit", f"ray job submit failed for {SUBMIT_RETRY_S} s (see above)")
    overrun = _fail_json("timeout", f"the check did not finish within {deadlines.check_s} s; job stopped")
    stopped = _fail_json(
        "stopped", "the gate Job was stopped (SIGTERM) before the check finished; its Ray job was stopped"
    )
    if image_fleet_file:  # the audit sidecar's verdict over every Ray pod it saw, from a pass after the check ended
        f = shlex.quote(image_fleet_file)
        audit = f"""done_at=$(date +%s); end=$((done_at + {AUDIT_FINAL_S}))
while [ -e {f} ] && ! {GATE_STEPS} audit-ready {f} "$done_at" 2>/dev/null \\
    && [ "$(date +%s)" -lt "$end" ]; do
  sleep 2 & wait $!
done
{GATE_STEPS} combine {f} "$done_at" "$check"; exit $?
"""
    else:
        audit = 'exit "$check"\n'
    return f"""set -u
addr={addr}
id=""; follow=""
{read_digest}
on_term() {{  # Job deleted or past its deadline: stop the Ray job we started, then exit 143
  trap - TERM INT
  if [ -n "$follow" ]; then kill "$follow" 2>/dev/null; fi
  if [ -n "$id" ]; then echo "stopping EFA check job $id"; ray job stop --address "$addr" "$id" >/dev/null 2>&1; fi
  echo {stopped}; exit 143
}}
trap on_term TERM INT
end=$(( $(date +%s) + {deadlines.head_wait_s} )); i=0
until ray job list --address "$addr" >/dev/null 2>&1; do
  if [ "$(date +%s)" -ge "$end" ]; then echo {head}; exit 2; fi
  i=$((i + 1)); echo "waiting for Ray head ($i)"; sleep 5 & wait $!
done
{GATE_STEPS} stop-earlier "$addr" || echo "could not list earlier EFA check jobs (continuing)"
end=$(( $(date +%s) + {SUBMIT_RETRY_S} )); n=0
until  # the Jobs API can answer before the head's agent takes jobs ("No available agent"): retry, fresh id each time
  n=$((n + 1)); id="efa-check-$(date +%s)-$$-$n"
  ray job submit --address "$addr" --submission-id "$id" --no-wait --working-dir {shlex.quote(working_dir)} \
    ${{renv:+--runtime-env-json "$renv"}} -- {cmd}
do
  if [ "$(date +%s)" -ge "$end" ]; then echo {submit}; exit 2; fi
  sleep 10 & wait $!
done
# in the background + wait: bash runs a trap only between commands, and `wait` returns at once on a signal
timeout {deadlines.check_s} ray job logs --address "$addr" --follow "$id" & follow=$!
wait "$follow"; rc=$?; follow=""
if [ $rc -eq 124 ]; then ray job stop --address "$addr" "$id" >/dev/null 2>&1; echo {overrun}; check=2
else
  status=$(ray job status --address "$addr" "$id" 2>&1)
  echo "$status"
  code=$(printf '%s\\n' "$status" | sed -n 's/.*failed with exit code \\([0-9][0-9]*\\).*/\\1/p' | head -n 1)
  if [ -n "$code" ]; then echo "EFA check failed (exit $code): see the JSON above"; check=$code
  else
    case "$status" in *succeeded*|*SUCCEEDED*) check=0;; *) echo "EFA check did not succeed: $status"; check=2;; esac
  fi
fi
{audit}"""


def vouched(
    image: str,
    instance_type: InstanceType | None,
    node_count: int,
    efa: bool,
    nccl_env: list[dict[str, str]],
    args: list[str],
    node_identity: str | None = None,
) -> str:
    """Short hash of what the check vouches for; part of the Job's name, so a change re-runs the check.

    ``args`` carry the resolved spec hash of the Ray pods; ``node_identity`` what the nodes under them are."""
    what = {
        "image": image,
        "type": instance_type.name if instance_type else None,
        "nodes": node_count,
        "efa": efa,
        "nccl_env": nccl_env,
        "args": args,
    }
    if node_identity:
        what["node_identity"] = node_identity
    blob = json.dumps(what, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:8]


class EfaCheckJob(pulumi.ComponentResource):
    """ConfigMap with the check code + the gating batch/v1 Job."""

    job: k8s.batch.v1.Job
    job_name: pulumi.Output[str] | str
    logs_command: pulumi.Output[str] | str

    def __init__(self, name: str, args: EfaCheckJobArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:index:EfaCheckJob", name, None, opts)
        resources = pod_resources("500m", "1Gi")
        check_guaranteed(resources, "EFA check container")
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        files = check_files()
        code = k8s.core.v1.ConfigMap(
            f"{name}-code",
            metadata={"name": f"{name}-code", "namespace": args.namespace},
            data=payload.config_map_data(files),
            opts=child,
        )
        transport = gate_transport(args.efa, args.node_count)
        d = dataclasses.replace(args.deadlines, sweeps=2 if args.compare_socket and transport == "efa" else 1)
        self.transport = transport
        nccl_env = (
            efa_env(args.instance_type, args.efa, args.nccl_debug, args.nccl_net_plugin)
            if args.instance_type is not None
            else []
        )
        annotations = {"pulumi.com/replaceUnready": "true"}
        if not args.blocking:
            annotations["pulumi.com/skipAwait"] = "true"

        def render(spec_hash: str | None, node_identity: str | None) -> tuple[str, str]:
            """(Job name, script) for the resolved spec hash and node identity."""
            cargs = check_args(
                args.instance_type,
                args.node_count,
                d,
                args.min_busbw_gbps,
                args.extra_check_args,
                image=args.image,
                min_busbw_fraction=args.min_busbw_fraction,
                compare_socket=args.compare_socket,
                strict_versions=args.strict_versions,
                require_counters=args.require_counters and args.efa,
                storage_proof=args.storage_proof,
                transport=transport,
                spec_hash=spec_hash,
            )
            digest = vouched(args.image, args.instance_type, args.node_count, args.efa, nccl_env, cargs, node_identity)
            fleet = IMAGE_FLEET_FILE if args.image_audit and args.ray_cluster_name else None  # as pod_extra below
            return f"{name}-{digest}", check_script(args.dashboard_address, cargs, d, image_fleet_file=fleet)

        if isinstance(args.spec_hash, pulumi.Output) or isinstance(args.node_identity, pulumi.Output):
            rendered = pulumi.Output.all(args.spec_hash, args.node_identity).apply(lambda v: render(v[0], v[1]))
            self.job_name = rendered.apply(lambda r: r[0])
            script: Any = rendered.apply(lambda r: r[1])
        else:
            self.job_name, script = render(args.spec_hash, args.node_identity)
        self.deadlines = d
        audit: list[pulumi.Resource] = []
        pod_extra: dict[str, Any] = {}
        if args.image_audit and args.ray_cluster_name:
            init, token_volumes, audit = self._image_audit(name, args, child, files, d)
            pod_extra = {"serviceAccountName": f"{name}-image-audit", "initContainers": [init]}
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata={"name": self.job_name, "namespace": args.namespace, "annotations": annotations},
            spec={
                "backoffLimit": 0,
                **(
                    {"ttlSecondsAfterFinished": args.ttl_seconds_after_finished}
                    if args.ttl_seconds_after_finished is not None
                    else {}
                ),
                "activeDeadlineSeconds": d.active_deadline_s,
                "template": {
                    "metadata": {"labels": dict(GATE_LABELS)},
                    "spec": {
                        # The gate talks to Ray only (Jobs API): no Kubernetes API token in its container; the
                        # image audit (sidecar) gets a projected one of its own ServiceAccount.
                        "automountServiceAccountToken": False,
                        **pod_extra,
                        "securityContext": json.loads(json.dumps(POD_SECURITY_CONTEXT)),
                        "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": TERMINATION_GRACE_S,
                        "nodeSelector": {ROLE_LABEL: SYSTEM_ROLE},
                        "containers": [
                            restricted_container(
                                {
                                    "name": "efa-check",
                                    "image": args.image,
                                    "command": ["/bin/bash", "-c", script],
                                    "workingDir": MOUNT,  # where the payload's ray_efa_eks is (GATE_STEPS)
                                    "resources": resources,
                                    **(
                                        {"env": token_client_env(args.auth_secret_name)}
                                        if args.auth_secret_name
                                        else {}
                                    ),
                                    "volumeMounts": [payload.mount(CODE_VOLUME, MOUNT)]
                                    + (
                                        [{"name": "image-fleet", "mountPath": IMAGE_FLEET_DIR, "readOnly": True}]
                                        if pod_extra
                                        else []
                                    ),
                                }
                            )
                        ],
                        "volumes": [payload.volume(CODE_VOLUME, f"{name}-code", files)]
                        + (token_volumes if pod_extra else []),
                    },
                },
            },
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.provider,
                depends_on=[args.ray_cluster, code, *args.depends_on, *audit],
                delete_before_replace=True,
                custom_timeouts=pulumi.CustomTimeouts(create=f"{d.pulumi_timeout_s}s", update=f"{d.pulumi_timeout_s}s"),
            ),
        )
        self.logs_command = (
            pulumi.Output.concat(f"kubectl -n {args.namespace} logs job/", self.job_name)
            if isinstance(self.job_name, pulumi.Output)
            else f"kubectl -n {args.namespace} logs job/{self.job_name}"
        )
        self.register_outputs({"jobName": self.job_name, "logsCommand": self.logs_command})

    def _image_audit(
        self, name: str, args: EfaCheckJobArgs, child: pulumi.ResourceOptions, files: dict[str, str], d: Deadlines
    ) -> tuple[dict[str, Any], list[dict[str, Any]], list]:
        """The image audit (efacheck/image_fleet.py ``--watch``) as the gate pod's native sidecar: (container,
        volumes, resources to wait for).

        Why a sidecar and not an init container that runs first: with scale-from-zero (``gpuScaleToZero``, the
        default) no GPU worker pod exists until the gate's own check asks Ray for nodes, so an audit that must see
        every Ray pod before the check starts waits for pods only the check would bring, and fails the Job. A
        sidecar (an init container with ``restartPolicy: Always``: Kubernetes docs "Sidecar Containers", on by
        default since 1.29, the oldest version the stack accepts) starts before the gate's container, keeps
        auditing beside it, and is stopped once it has exited. It lists the Ray pods every AUDIT_POLL_S and keeps
        every one it has seen running, so the verdict covers each pod that ran during the check (the workers stay
        up until the idle timeout, past the check's end); the gate's script waits for a pass taken after its check
        ended and combines the two (``gate_steps combine``): a passed check with a mixed fleet fails, with no audit
        verdict is undetermined. The fixed fleet (``replicas`` set) works the same way: its pods are there from the
        start. The other designs: counting only the pods present at start and auditing again later needs the token in
        the gate's container or a second pod; moving the digest read into the check needs a pod-reading token on
        the Ray pods. Both widen who holds a Kubernetes token; the sidecar keeps it in one container, as ``nobody``,
        with get/list of pods in the Ray namespace only, and the gate's container still has none. The sidecar's
        ``startupProbe`` holds the gate's container until the first pass is written (the head's digest is then
        known to the check's ``--image-digest``)."""
        ns, sa = args.namespace, f"{name}-image-audit"
        account = k8s.core.v1.ServiceAccount(
            f"{name}-audit-sa",
            metadata={"name": sa, "namespace": ns},
            automount_service_account_token=False,
            opts=child,
        )
        role = k8s.rbac.v1.Role(
            f"{name}-audit-role", metadata={"name": sa, "namespace": ns}, rules=AUDIT_RULES, opts=child
        )
        binding = k8s.rbac.v1.RoleBinding(
            f"{name}-audit-binding",
            metadata={"name": sa, "namespace": ns},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sa},
            subjects=[{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
            opts=child,
        )
        cmd = [
            "python",
            "-m",
            IMAGE_FLEET_MODULE,
            "--namespace",
            ns,
            "--cluster",
            str(args.ray_cluster_name),
            "--expect-pods",
            str(1 + args.node_count),
            "--watch",
            "--poll-s",
            str(AUDIT_POLL_S),
            "--out",
            IMAGE_FLEET_FILE,
            "--token-dir",
            SA_TOKEN_DIR,
        ]
        init = restricted_container(
            {
                "name": "image-audit",
                "image": args.image,
                "command": cmd,
                "workingDir": MOUNT,
                "restartPolicy": "Always",
                "startupProbe": {
                    "exec": {"command": ["test", "-s", IMAGE_FLEET_FILE]},
                    "periodSeconds": 1,
                    "failureThreshold": AUDIT_STARTUP_S,
                },
                "resources": pod_resources("100m", "256Mi"),
                "volumeMounts": [
                    payload.mount(CODE_VOLUME, MOUNT),
                    {"name": AUDIT_TOKEN_VOLUME, "mountPath": SA_TOKEN_DIR, "readOnly": True},
                    {"name": "image-fleet", "mountPath": IMAGE_FLEET_DIR},
                ],
            }
        )
        init["securityContext"].update(runAsNonRoot=True, runAsUser=NOBODY, runAsGroup=NOBODY)
        token = {
            "name": AUDIT_TOKEN_VOLUME,
            "projected": {
                "defaultMode": 0o444,
                "sources": [
                    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                ],
            },
        }
        result = {"name": "image-fleet", "emptyDir": {"sizeLimit": "1Mi"}}
        return init, [token, result], [account, role, binding]
