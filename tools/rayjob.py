"""``ray-efa-eks rayjob``: a team's training run as a KubeRay RayJob in its Kueue queue (docs/team-jobs.md).

    ray-efa-eks rayjob --queue vision --bucket BUCKET --dry-run -- --use-gpu --require-efa   # print the objects
    ray-efa-eks rayjob --queue vision --bucket BUCKET --server URL -- --use-gpu              # apply and follow

The objects come from the stack's config (``Pulumi.<stack>.yaml``, ``--config``, as ``plan`` reads it): the same
image, env and ``train_func`` entrypoint as ``submit``, the team's service account and checkpoint prefix. Applying
and following talk to the Kubernetes API directly (a bearer token, e.g. from ``aws eks get-token``), every call
with a deadline; the command exits with the job's result: 0 it succeeded, its own exit code when it failed with one
(5: ``--require-efa`` and the fabric was not EFA), else 1; 2 when the API did not answer or ``--timeout-s`` passed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import ssl
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from ..components.config.config import ConfigError, StackConfig
from ..components.queues.job_queues import TEAM_PREFIX, TEAM_SERVICE_ACCOUNT
from ..components.addons.node_agent import exporter_url
from ..components.ray.rayjob import RayJobArgs, manifests
from ..training.parser import check_train_args, train_parser
from ..training.submit import stage_package, submit_entrypoint
from ..efacheck.cli import ArgumentParser, run_cli
from ..efacheck.exit_codes import EXIT_FAILED, EXIT_NO_ANSWER, EXIT_OK, EXIT_UNREADABLE, EXIT_USAGE
from .plan_model import PlanError, UsageError
from .stack_file import parse_overrides, read_stack

NAME = re.compile(r"[a-z]([-a-z0-9]{0,38}[a-z0-9])?")
"""A RayJob name KubeRay can derive its RayCluster and submitter Job names from (DNS label, short)."""
EXIT_IN_MESSAGE = re.compile(r"failed with exit code (\d+)")
"""Ray's JobInfo.message for a failed driver (ray/dashboard/modules/job/job_supervisor.py), which KubeRay copies
into the RayJob's ``status.message`` (rayjob_controller.go: ``Status.Message = jobInfo.Message``)."""
VERDICT_LINES = ("[fabric]", "[summary]")
TERMINAL = ("Complete", "Failed")
"""KubeRay ``status.jobDeploymentStatus`` values after which nothing changes (rayjob_types.go, v1.7.0)."""


class Failure(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class KubeApi:
    """The few Kubernetes API calls ``rayjob`` makes; each has ``timeout_s`` (no answer: :class:`Failure` 2)."""

    def __init__(self, server: str, token: str | None, ca_file: str | None, timeout_s: float):
        self.server, self.token, self.timeout_s = server.rstrip("/"), token, timeout_s
        self.context = ssl.create_default_context(cafile=ca_file) if server.startswith("https") else None

    def call(self, method: str, path: str, body: dict | None = None, raw: bool = False) -> tuple[int, Any]:
        req = urllib.request.Request(
            self.server + path, method=method, data=json.dumps(body).encode() if body is not None else None
        )
        req.add_header("Accept", "application/json")
        if body is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s, context=self.context) as resp:
                data = resp.read(4 * 1024 * 1024)
                return resp.status, data.decode(errors="replace") if raw else json.loads(data or b"{}")
        except urllib.error.HTTPError as e:
            try:
                detail = json.loads(e.read(65536) or b"{}")
            except ValueError:
                detail = {}
            return e.code, detail
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", e)
            raise Failure(
                EXIT_NO_ANSWER,
                f"the Kubernetes API at {self.server} did not answer {method} {path} "
                f"within {self.timeout_s:g} s: {reason}",
            ) from None


def _refused(status: int, detail: Any, what: str) -> Failure:
    msg = detail.get("message", "") if isinstance(detail, dict) else ""
    hint = (
        " (who you are: the token; what you may do: the team's Role, bound to group ray-efa-eks:team:TEAM)"
        if status in (401, 403)
        else ""
    )
    return Failure(EXIT_NO_ANSWER, f"the Kubernetes API refused {what}: HTTP {status} {msg}{hint}".rstrip())


def apply(api: KubeApi, objs: list[dict[str, Any]]) -> None:
    """Create the code ConfigMap (already there: the same code, by its hashed name) and the RayJob."""
    cm, job = objs
    ns = job["metadata"]["namespace"]
    status, detail = api.call("POST", f"/api/v1/namespaces/{ns}/configmaps", cm)
    if status not in (200, 201, 409):
        raise _refused(status, detail, f"creating ConfigMap {ns}/{cm['metadata']['name']}")
    status, detail = api.call("POST", f"/apis/ray.io/v1/namespaces/{ns}/rayjobs", job)
    if status == 409:
        raise Failure(EXIT_FAILED, f"RayJob {ns}/{job['metadata']['name']} exists already; pick another --name")
    if status not in (200, 201):
        raise _refused(status, detail, f"creating RayJob {ns}/{job['metadata']['name']}")


def describe(obj: dict[str, Any]) -> str:
    """One line for the job's state as its status says it."""
    st, spec = obj.get("status") or {}, obj.get("spec") or {}
    dep, job = st.get("jobDeploymentStatus") or "", st.get("jobStatus") or ""
    if spec.get("suspend") and dep not in TERMINAL:
        return (
            f"queued: waiting for its quota in {obj['metadata'].get('labels', {}).get('kueue.x-k8s.io/queue-name')}"
            " (Kueue keeps it suspended until the whole job fits)"
        )
    return f"{dep or 'admitted'}{': Ray job ' + job if job else ''}"


def outcome(obj: dict[str, Any]) -> int | None:
    """The exit code once the RayJob is finished, else None."""
    st = obj.get("status") or {}
    if st.get("jobDeploymentStatus") not in TERMINAL:
        return None
    if st.get("jobDeploymentStatus") == "Complete" and st.get("jobStatus") == "SUCCEEDED":
        return EXIT_OK
    m = EXIT_IN_MESSAGE.search(st.get("message") or "")
    return int(m[1]) if m and int(m[1]) else EXIT_FAILED


def verdict_lines(api: KubeApi, ns: str, name: str, message: str) -> list[str]:
    """The run's ``[fabric]``/``[summary]`` lines: from the failure message Ray keeps, else the submitter's log."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip().startswith(VERDICT_LINES)]
    if lines:
        return lines
    sel = urllib.parse.quote(f"batch.kubernetes.io/job-name={name}")
    status, pods = api.call("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector={sel}")
    items = pods.get("items") if status == 200 and isinstance(pods, dict) else None
    if not items:
        return []
    pod = items[-1]["metadata"]["name"]
    status, log = api.call("GET", f"/api/v1/namespaces/{ns}/pods/{pod}/log?tailLines=2000", raw=True)
    if status != 200 or not isinstance(log, str):
        return []
    return [ln.strip() for ln in log.splitlines() if ln.strip().startswith(VERDICT_LINES)]


def follow(api: KubeApi, ns: str, name: str, timeout_s: float, poll_s: float) -> int:
    deadline, last = time.monotonic() + timeout_s, None
    while True:
        status, obj = api.call("GET", f"/apis/ray.io/v1/namespaces/{ns}/rayjobs/{name}")
        if status != 200:
            raise _refused(status, obj, f"reading RayJob {ns}/{name}")
        state = describe(obj)
        if state != last:
            print(f"[rayjob] {ns}/{name}: {state}", flush=True)
            last = state
        code = outcome(obj)
        if code is not None:
            message = (obj.get("status") or {}).get("message") or ""
            for line in verdict_lines(api, ns, name, message):
                print(line, flush=True)
            first = message.splitlines()[0] if message else ""
            print(f"[rayjob] {ns}/{name}: exit {code}{': ' + first if code and first else ''}", flush=True)
            return code
        left = deadline - time.monotonic()
        if left <= 0:
            raise Failure(
                EXIT_NO_ANSWER,
                f"RayJob {ns}/{name} is still '{state}' after --timeout-s {timeout_s:g}; "
                f"it keeps its place: kubectl -n {ns} get rayjob {name}",
            )
        time.sleep(min(poll_s, left))


def job_topology(train: list[str], nodes: int, gpus_per_node: int, wait_s: int) -> list[str]:
    """The training args with the job's shape: ``--use-gpu`` takes one rank per GPU of all ``nodes`` nodes
    (``--workers nodes x gpus_per_node``) and waits up to ``wait_s`` for them (``--wait-for-workers-s``).

    Each worker pod requests all of its node's GPUs and Ray counts a node's GPUs from its pod's limit, so these ranks
    (one GPU each, training/trainer.py) fit on no fewer than ``nodes`` nodes: the run starts no step on one node of a
    two-node job. Without it, ``--use-gpu`` takes the GPUs the cluster offers when the driver starts, one node's if
    the other's raylet has not registered yet. Ray Train's ``placement_strategy`` cannot say this: ``SPREAD`` is
    best-effort, and ``STRICT_SPREAD`` puts each rank (bundle) on its own node, which a node with several GPUs breaks.
    """
    if "--use-gpu" not in train:
        return list(train)
    want = nodes * gpus_per_node
    out, i, given = list(train), 0, None
    while i < len(out):
        if out[i] == "--workers" and i + 1 < len(out):
            given = out[i + 1]
        elif out[i].startswith("--workers="):
            given = out[i].partition("=")[2]
        i += 1
    if given is not None and given != str(want):
        raise UsageError(
            f"--workers {given} after --: the job's {nodes} node(s) hold {want} GPUs and a rank takes "
            f"one, so the job runs {want} ranks; omit --workers (or change --nodes)"
        )
    if given is None:
        out += ["--workers", str(want)]
    if not any(x == "--wait-for-workers-s" or x.startswith("--wait-for-workers-s=") for x in out):
        out += ["--wait-for-workers-s", str(wait_s)]
    return out


def parser(prog: str) -> ArgumentParser:
    p = ArgumentParser(
        prog=prog,
        exit_codes="rayjob",
        usage="%(prog)s --queue TEAM --bucket BUCKET [options] [-- TRAIN_ARGS...]",
        description="Run training as a RayJob in a team's Kueue queue: print it (--dry-run), or "
        "apply it and follow it to its result. TRAIN_ARGS go to the job unchanged.",
    )
    p.add_argument("--queue", required=True, help="the team (a name in jobQueues)")
    p.add_argument(
        "--bucket",
        required=True,
        help="the stack's checkpoint bucket (pulumi stack output checkpointBucket); the job writes under teams/TEAM/",
    )
    p.add_argument("--name", default=None, help="RayJob name (default train-<UTC time>)")
    p.add_argument("--nodes", type=int, default=2, help="GPU nodes for the job (one Ray worker each; default 2)")
    p.add_argument("--stack", default="dev", help="stack whose Pulumi.<stack>.yaml is read (default dev)")
    p.add_argument("--defaults", action="store_true", help="no Pulumi.<stack>.yaml: every key at its default")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="override a stack key")
    p.add_argument("--dry-run", action="store_true", help="print the ConfigMap and the RayJob as YAML and exit")
    p.add_argument(
        "--server",
        default=os.environ.get("KUBE_SERVER"),
        help="Kubernetes API URL (default $KUBE_SERVER; aws eks describe-cluster ... endpoint)",
    )
    p.add_argument("--token-file", default=None, help="file with the bearer token (default $KUBE_TOKEN)")
    p.add_argument("--ca-file", default=None, help="the cluster's CA certificate (PEM)")
    p.add_argument("--request-timeout-s", type=float, default=10.0, help="deadline of each API call (default 10)")
    p.add_argument(
        "--timeout-s",
        type=float,
        default=86400.0,
        help="stop following after this long, queued time included (default a day; the job stays)",
    )
    p.add_argument("--poll-s", type=float, default=5.0, help="seconds between status reads (default 5)")
    return p


def build(a: argparse.Namespace, train: list[str]) -> list[dict[str, Any]]:
    overrides, region = parse_overrides(a.config)
    sf = read_stack(Path.cwd(), a.stack, defaults=a.defaults)
    values = {k.partition(":")[2]: v for k, v in {**sf.values, **overrides}.items() if k.startswith("ray-efa-eks:")}
    cfg = StackConfig.from_mapping(values, region=region or sf.region)
    teams = {t.name: t for t in cfg.job_queues}
    if a.queue not in teams:
        raise UsageError(
            f"--queue {a.queue!r}: not a team of this stack's jobQueues "
            f"({', '.join(teams) or 'none: set ray-efa-eks:jobQueues'})"
        )
    name = a.name or time.strftime("train-%Y%m%d-%H%M%S", time.gmtime())
    if not NAME.fullmatch(name):
        raise UsageError(
            f"--name {name!r}: a lowercase DNS label of at most 40 characters (KubeRay derives the "
            "cluster's and the submitter's names from it)"
        )
    if not 1 <= a.nodes <= cfg.gpuNodeCount:
        raise UsageError(f"--nodes {a.nodes}: between 1 and the GPU node group's size ({cfg.gpuNodeCount})")
    team, gpus = teams[a.queue], cfg.gpu_type.gpus
    most = sum(t.gpus(gpus) for t in teams.values()) if team.borrow else team.gpus(gpus)
    if a.nodes * gpus > most:
        whose = "its quota plus what the others lend" if team.borrow else "its quota; no :borrow"
        raise UsageError(
            f"--nodes {a.nodes}: the job needs {a.nodes * gpus} GPUs and team {team.name} can have at "
            f"most {most} ({whose}): Kueue would never admit it; use fewer --nodes or raise the quota"
        )
    train = job_topology(train, a.nodes, gpus, cfg.efa_check_wait_s)
    with tempfile.TemporaryDirectory(prefix="ray-efa-eks-rayjob-") as tmp:
        root = stage_package(Path(tmp))
        code = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.py"))}
    return manifests(
        RayJobArgs(
            name=name,
            team=team,
            image=cfg.dlcImage,
            ray_version=cfg.rayVersion,
            instance_type=cfg.gpu_type,
            entrypoint=submit_entrypoint(train),
            code=code,
            nodes=a.nodes,
            efa=cfg.efa,
            nccl_debug=cfg.ncclDebug,
            region=cfg.region,
            storage_path=f"s3://{a.bucket}/{TEAM_PREFIX.format(team=team.name)}",
            service_account=TEAM_SERVICE_ACCOUNT,
            token_auth=cfg.rayTokenAuth,
            efa_exporter_url=exporter_url() if cfg.efa else None,
        )
    )


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, train = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    p = parser(prog or "python -m ray_efa_eks.tools.rayjob")
    a = p.parse_args(own)
    tp = train_parser(prog=f"{p.prog} ... --")
    shaped = (
        train
        if "--use-gpu" not in train or any(x == "--workers" or x.startswith("--workers=") for x in train)
        else [*train, "--workers", "1"]
    )  # job_topology sets the job's --workers
    if check_train_args(tp, tp.parse_args(shaped), local=False).address is not None:
        tp.error("--address after -- is set by the job (--address auto)")
    for option, value in (
        ("--request-timeout-s", a.request_timeout_s),
        ("--timeout-s", a.timeout_s),
        ("--poll-s", a.poll_s),
    ):
        if not 0 < value <= 7 * 86400:
            p.error(f"{option} {value:g}: seconds above 0, at most a week")
    if not a.dry_run and not a.server:
        p.error("--server (or $KUBE_SERVER) is needed to apply the RayJob; or pass --dry-run")
    try:
        objs = build(a, train)
        if a.dry_run:
            print(yaml.safe_dump_all(objs, sort_keys=False), end="")
            return EXIT_OK
        token = Path(a.token_file).read_text().strip() if a.token_file else os.environ.get("KUBE_TOKEN")
        api = KubeApi(a.server, token, a.ca_file, a.request_timeout_s)
        apply(api, objs)
        job = objs[1]["metadata"]
        queue = job["labels"]["kueue.x-k8s.io/queue-name"]
        print(f"[rayjob] created {job['namespace']}/{job['name']} in queue {queue}", flush=True)
        return follow(api, job["namespace"], job["name"], a.timeout_s, a.poll_s)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as e:  # the stack's config is refused, as `plan` refuses it
        print(f"error: {e}", file=sys.stderr)
        return EXIT_NO_ANSWER
    except PlanError as e:  # the stack file: missing or unreadable
        print(f"error: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    except OSError as e:  # --token-file
        print(f"error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return EXIT_UNREADABLE
    except Failure as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code


if __name__ == "__main__":
    sys.exit(run_cli(main, None, "python -m ray_efa_eks.tools.rayjob"))
