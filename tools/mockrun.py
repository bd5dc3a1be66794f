"""Run the real Pulumi program offline, under the SDK's own mocks.

Used by the tests and by the offline plan: no cloud, no CLI, no engine. The
mocks answer the few invokes the program makes (AZ offerings, from EC2's own per-region data in
``tools/offerings.json``) and give every resource a fake id; remote components (pulumi-eks) are
recorded with the inputs *we* pass, which is exactly what we can vouch for.
"""

from __future__ import annotations

import asyncio
import json
import runpy
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import rpc as _rpc
from pulumi.runtime import settings as _settings
from google.protobuf import struct_pb2
from pulumi.runtime._callbacks import _CallbackServicer
from pulumi.runtime.mocks import MockMonitor
from pulumi.runtime.proto import resource_pb2

from . import aws_rules
from .mock_account import MockAccount

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PROGRAM = PROJECT_ROOT / "__main__.py"

OFFERINGS_PATH = Path(__file__).with_name("offerings.json")
OFFERINGS: dict[str, dict[str, Any]] = json.loads(OFFERINGS_PATH.read_text())["regions"]
"""Region -> {"azs": every AZ, "types": {type: [AZs offering it]}}: EC2 DescribeInstanceTypeOfferings for the
catalogue's types as moto ships it, generated with the catalogue (``ray-efa-eks catalogue --write``)."""


def offered_azs(region: str, instance_type: str) -> list[str]:
    """AZs of ``region`` where EC2 offers ``instance_type`` (by the generated offerings; [] when none)."""
    return list(OFFERINGS.get(region, {}).get("types", {}).get(instance_type, []))


def region_azs(region: str) -> list[str]:
    """Every AZ of ``region`` in the generated data (two made-up ones for a region it does not know)."""
    return list(OFFERINGS.get(region, {}).get("azs") or [f"{region}a", f"{region}b"])


OPTED_IN_ZONES: dict[str, dict[str, str]] = {
    "us-east-1": {"us-east-1-atl-2a": "local-zone", "us-east-1-wl1-bos-wlz-1": "wavelength-zone"},
    "us-west-2": {"us-west-2-lax-1a": "local-zone"},
}
"""Local and Wavelength Zones the mocked account opted in to (name -> ZoneType): DescribeAvailabilityZones returns
them beside the AZs, and sorted by name ``us-east-1-atl-2a`` comes before ``us-east-1a``; only a ``zone-type``
filter keeps EKS subnets out of them."""


def region_zone_ids(region: str) -> dict[str, str]:
    """AZ name -> zone ID in the mocked account (moto's DescribeAvailabilityZones data, ``tools/offerings.json``);
    an AZ without one, and an opted-in Local/Wavelength Zone, gets a made-up ID that differs from its name."""
    known = dict(OFFERINGS.get(region, {}).get("zoneIds") or {})
    short = "".join(p[0] for p in region.split("-")[:-1]) + region.split("-")[-1]  # us-east-1 -> ue1 (made up)
    return {z: known.get(z) or f"{short}-{z.rsplit('-', 1)[-1]}-mock" for z in region_zones(region)}


def region_zones(region: str) -> dict[str, str]:
    """Zone name -> ZoneType of every zone DescribeAvailabilityZones returns for ``region`` in the mocked account."""
    return {**{az: "availability-zone" for az in region_azs(region)}, **OPTED_IN_ZONES.get(region, {})}


DEPLOYER_ARN = "arn:aws:iam::123456789012:user/mock"
"""Who runs the program (GetCallerIdentity); EKS gives this principal the cluster creator's access entry."""

CAPACITY_BLOCKS: dict[str, dict[str, Any]] = {
    "cr-0123456789abcdef0": {
        "availabilityZone": "us-east-1a",
        "instanceType": "p5.48xlarge",
        "instanceCount": 4,
        "startDate": "2026-12-01T11:30:00Z",
        "endDate": "2026-12-15T11:30:00Z",
        "state": "active",
        "reservationType": "capacity-block",
    },
}
"""Capacity Blocks EC2 answers for (getCapacityBlockReservation); other ids answer empty fields (not judged)."""
CAPACITY_RESERVATIONS: dict[str, dict[str, Any]] = {
    "cr-0a1b2c3d4e5f60718": {
        "availabilityZone": "us-east-1c",
        "instanceType": "g6e.48xlarge",
        "instanceCount": 4,
        "instancePlatform": "Linux/UNIX",
        "tenancy": "default",
        "endDateType": "unlimited",
    },
    "cr-0fedcba9876543210": {
        "availabilityZone": "us-east-1a",
        "instanceType": "p5.48xlarge",
        "instanceCount": 2,
        "instancePlatform": "Linux/UNIX",
        "tenancy": "default",
        "endDateType": "unlimited",
        "placementGroupArn": "arn:aws:ec2:us-east-1:123456789012:placement-group/p5-odcr-pg",
    },
}
"""ODCRs as EC2 describes them, for ``aws.ec2.CapacityReservation.get`` (a read); other ids read empty (not judged)."""


def issuer_arn(arn: str) -> str:
    """The IAM role behind an STS assumed-role ARN (``aws iam get-session-context``); other ARNs unchanged."""
    parts = arn.split(":", 5)
    if len(parts) == 6 and parts[2] == "sts" and parts[5].startswith("assumed-role/"):
        role = parts[5].split("/")[1]
        return f"arn:{parts[1]}:iam::{parts[4]}:role/{role}"
    return arn


@dataclass
class Recorded:
    """One registered resource as the engine would see it."""

    type: str
    name: str
    inputs: dict[str, Any]
    parent: str | None
    custom: bool
    provider: str | None
    urn: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    """Resource options the engine would see: retain_on_delete, protect, dependencies; custom_timeouts (create,
    update) and delete_before_replace where the program set them."""
    transforms: list[Any] = field(default_factory=list)
    """Transforms declared on this resource (the mock engine does not run them; tests call them)."""

    def __getitem__(self, key: str) -> Any:
        return self.inputs[key]


@dataclass
class MockRun:
    """What a program run registered: resources in order, stack outputs, invokes made."""

    resources: list[Recorded] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    calls: list[tuple[str, dict]] = field(default_factory=list)
    ids: dict[str, str] = field(default_factory=dict)
    """URN -> the fake id the mocks handed out (subnets: ``subnet-<name>``), so ids found in inputs resolve."""

    def of_type(self, typ: str) -> list[Recorded]:
        return [r for r in self.resources if r.type == typ]

    def one(self, typ: str, name_contains: str = "") -> Recorded:
        found = [r for r in self.of_type(typ) if name_contains in r.name]
        if len(found) != 1:
            raise AssertionError(f"expected one {typ} named *{name_contains}*, found {[r.name for r in found]}")
        return found[0]

    def by_urn(self, urn: str | None) -> Recorded | None:
        return next((r for r in self.resources if r.urn == urn), None)


class ResourceRef:
    """A resource passed as another resource's input, as the mock engine records it: its URN, not a live object.

    The SDK's mock monitor would rebuild such a reference into a resource object (``urn=`` option), which
    reads its state through a task on the monitor thread's event loop; the program's loop then awaits that
    task and fails ("attached to a different loop") whenever it is still pending. ``plain()`` shows a ref
    as ``<Type>`` (the class is named after the resource type), as it showed the object before.
    """

    def __init__(self, urn: str):
        self.urn = urn

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.urn!r})"


_REF_CLASSES: dict[str, type] = {}


_IN_REGISTRATION = threading.local()
_SDK_DESERIALIZE_RESOURCE = _rpc.deserialize_resource


def resource_ref(ref_struct, keep_unknowns=None):  # noqa: ANN001 - the SDK's signature
    """The SDK's deserializer everywhere but inside a mock registration, where it makes a ResourceRef."""
    if not getattr(_IN_REGISTRATION, "active", False):
        return _SDK_DESERIALIZE_RESOURCE(ref_struct, keep_unknowns)
    urn = str(ref_struct["urn"])
    typ = str(ref_struct["type"]) if "type" in ref_struct else urn.split("::")[-2].split("$")[-1]
    name = typ.rsplit(":", 1)[-1] or "Resource"
    cls = _REF_CLASSES.setdefault(name, type(name, (ResourceRef,), {}))
    return cls(urn)


class HookRefused(Exception):
    """A ``before_update`` resource hook failed: the engine fails that resource's update step, in a preview too when
    the hook runs on dry runs (pulumi/pulumi pkg/resource/deploy/step.go ``UpdateStep.Apply``, deployment.go
    ``RunHooks``)."""

    def __init__(self, hook: str, resource: str, error: str):
        self.hook, self.resource, self.error = hook, resource, error
        super().__init__(f"before_update hook {hook!r} refused the update of {resource}: {error}")


class ParentAwareMonitor(MockMonitor):
    """MockMonitor that tells the mocks each registration's parent URN and own URN, and keeps the resource hooks
    the program registers (name -> callback token, on_dry_run)."""

    _local = threading.local()
    hooks: dict[str, tuple[str, bool]]

    def RegisterResourceHook(self, request):  # noqa: N802 - gRPC method name
        if not hasattr(self, "hooks"):
            self.hooks = {}
        self.hooks[request.name] = (request.callback.token, bool(request.on_dry_run))
        return super().RegisterResourceHook(request)

    @property
    def current(self) -> tuple[str | None, str, dict[str, Any]]:
        return getattr(self._local, "current", (None, "", {}))

    def RegisterResource(self, request):  # noqa: N802 - gRPC method name
        # Registrations run on executor threads: keep "current" per thread.
        options = {
            "retain_on_delete": bool(request.retainOnDelete),
            "protect": bool(request.protect),
            "dependencies": list(request.dependencies),
        }
        if request.HasField("hooks") and request.hooks.before_update:
            options["before_update"] = list(request.hooks.before_update)
        if request.HasField("customTimeouts"):
            options["custom_timeouts"] = (request.customTimeouts.create, request.customTimeouts.update)
        if request.deleteBeforeReplace:
            options["delete_before_replace"] = True
        self._local.current = (
            request.parent or None,
            self.make_urn(request.parent, request.type, request.name),
            options,
        )
        _IN_REGISTRATION.active = True  # resource refs in these inputs stay refs (see ResourceRef)
        try:
            return super().RegisterResource(request)
        finally:
            _IN_REGISTRATION.active = False

    def ReadResource(self, request):  # noqa: N802 - gRPC method name; ``Resource.get`` of an existing resource
        self._local.current = (
            request.parent or None,
            self.make_urn(request.parent, request.type, request.name),
            {"read": True, "dependencies": list(request.dependencies)},
        )
        return super().ReadResource(request)


class RecordingMocks(pulumi.runtime.Mocks):
    """Mocks that record each resource and answer invokes deterministically."""

    def __init__(
        self,
        run: MockRun,
        region: str,
        offerings: dict[str, list[str]] | None = None,
        caller_arn: str = DEPLOYER_ARN,
        strict: bool = True,
        account: MockAccount | None = None,
        previous: MockRun | None = None,
    ):
        self.run = run
        self.previous = {r.urn: r for r in previous.resources} if previous is not None else {}
        """The deployed stack (an earlier run): a resource whose inputs differ is an update, and its
        ``before_update`` hooks run with the old and new inputs, as the engine runs them."""
        self.region = region
        self.offerings = offerings
        """Override: region -> AZs that offer every type; None: EC2's offerings per type (``tools/offerings.json``)."""
        self.monitor: ParentAwareMonitor | None = None
        self.caller_arn = caller_arn
        self.strict = strict
        """Refuse, at the resource, what the real AWS APIs refuse (tools/aws_rules.py)."""
        self.by_id: dict[str, Recorded] = {}
        self.world = account if account is not None else MockAccount()
        """EKS state across runs: the live clusters this run reads and changes (tools/mock_account.py)."""
        by_urn = {}
        self.by_urn = by_urn
        self.account = aws_rules.Account(
            self.by_id.get,
            region_zones(region),
            issuer_arn(caller_arn),
            self.world,
            by_urn=by_urn.get,
            region=region,
            zone_ids={**region_zone_ids(region), **self.world.zone_ids},
        )

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        parent, urn, options = self.monitor.current if self.monitor else (None, "", {})
        rec = Recorded(
            args.typ,
            args.name,
            dict(args.inputs),
            parent,
            bool(args.custom),
            args.provider,
            urn,
            options,
            list(args.transforms),
        )
        self.run.resources.append(rec)
        # A ResourceRef cannot be serialized back; the resource's state keeps the referenced URN.
        state = {k: v.urn if isinstance(v, ResourceRef) else v for k, v in args.inputs.items()}
        rid = f"{args.name}-id"
        if args.typ == "eks:index:Cluster":
            state.update(
                kubeconfig={"apiVersion": "v1", "clusters": [], "contexts": [], "users": []},
                kubeconfigJson=json.dumps({"apiVersion": "v1"}),
                oidcProviderArn=f"arn:aws:iam::123456789012:oidc-provider/{args.name}",
                oidcProviderUrl=f"oidc.eks.{self.region}.amazonaws.com/id/MOCK",
                clusterSecurityGroupId=f"sg-{args.name}-pulumi",
                nodeSecurityGroupId=f"sg-{args.name}-nodes",
            )
        elif args.typ == "aws:iam/role:Role":
            state["arn"] = f"arn:aws:iam::123456789012:role/{args.name}"
            state["name"] = args.name
        elif args.typ == "aws:ec2/subnet:Subnet":
            rid = f"subnet-{args.name}"
        elif args.typ == "aws:s3/bucketV2:BucketV2" or args.typ == "aws:s3/bucket:Bucket":
            state.setdefault("bucket", args.name)
            state["arn"] = f"arn:aws:s3:::{state['bucket']}"
        elif args.typ == "aws:ec2/placementGroup:PlacementGroup":
            state["name"] = rid  # the provider's id of a placement group is its (auto-)name
        elif args.typ == "aws:ec2/launchTemplate:LaunchTemplate":
            state["latestVersion"] = 1
        elif args.typ == "aws:ec2/capacityReservation:CapacityReservation" and args.resource_id:
            rid = args.resource_id  # a read: EC2's description of the reservation
            state.update(CAPACITY_RESERVATIONS.get(rid, {}))
            rec.inputs.update(CAPACITY_RESERVATIONS.get(rid, {}))  # a read's record is what EC2 describes
        elif args.typ == "aws:kms/key:Key":
            state["arn"] = f"arn:aws:kms:{self.region}:123456789012:key/{args.name}"
        self.run.ids[urn] = rid
        if rid not in self.by_id or args.typ in (aws_rules.LAUNCH_TEMPLATE, aws_rules.SUBNET):
            self.by_id[rid] = (
                rec  # ids are ``<name>-id``: an Eip and its NAT gateway share one; keep the kinds rules read
            )
        self.by_urn[urn] = rec
        if args.typ == aws_rules.EKS_CLUSTER:  # the cluster as this request leaves it (created now: by this caller)
            c = self.world.cluster_as_requested(rec, self.account.caller_arn)
            self.account.pending_clusters[c.name] = c
        if self.strict:
            self.account.urn = urn
            aws_rules.check(args.typ, args.name, rec.inputs, self.account)
        old = self.previous.get(urn)
        if old is not None and _plain(old.inputs) != _plain(rec.inputs):
            for hook in options.get("before_update", []):
                self._run_hook(hook, urn, rid, args, old.inputs, rec.inputs)
        return rid, state

    def _run_hook(self, hook: str, urn: str, rid: str, args: Any, old: dict[str, Any], new: dict[str, Any]) -> None:
        """Call a registered hook through the SDK's own callback service, with the request the engine sends."""
        token, _on_dry_run = getattr(self.monitor, "hooks", {})[hook]
        servicer = next(s for s in _CallbackServicer._servicers if token in s._callbacks)
        request = resource_pb2.ResourceHookRequest(
            urn=urn, id=rid, name=args.name, type=args.typ, new_inputs=_struct(new), old_inputs=_struct(old)
        )
        future = asyncio.run_coroutine_threadsafe(
            servicer._callbacks[token](request.SerializeToString()), servicer._loop
        )
        response = future.result(timeout=120)
        if response.error:
            raise HookRefused(hook, f"{args.typ} {args.name}", response.error)

    def call(self, args: pulumi.runtime.MockCallArgs):
        self.run.calls.append((args.token, dict(args.args)))
        if args.token == "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings":
            if self.offerings is not None:
                azs = self.offerings.get(self.region, [])
            else:
                wanted = [
                    v
                    for f in args.args.get("filters") or []
                    if f.get("name") == "instance-type"
                    for v in f.get("values") or []
                ]
                azs = sorted({az for t in wanted for az in offered_azs(self.region, t)})
            return {
                "id": self.region,
                "locations": azs,
                "locationTypes": ["availability-zone"] * len(azs),
                "instanceTypes": [""] * len(azs),
            }, []
        if args.token == "aws:ec2/getSubnets:getSubnets":  # DescribeSubnets over the subnets registered so far
            want = {f["name"]: list(f.get("values") or []) for f in args.args.get("filters") or []}
            ids = [
                self.run.ids[r.urn]
                for r in self.run.of_type("aws:ec2/subnet:Subnet")
                if self.run.ids.get(r.urn) in want.get("subnet-id", [self.run.ids.get(r.urn)])
                and r.inputs.get("availabilityZone")
                in want.get("availability-zone", [r.inputs.get("availabilityZone")])
            ]
            return {"id": self.region, "ids": ids, "filters": args.args.get("filters")}, []
        if args.token == "aws:ec2/getCapacityBlockReservation:getCapacityBlockReservation":
            rid = args.args.get("id", "")
            return {"id": rid, "capacityBlockId": rid, **CAPACITY_BLOCKS.get(rid, {})}, []
        if args.token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            # DescribeAvailabilityZones: every zone the account is opted in to, Local/Wavelength Zones included,
            # unless a zone-type filter says otherwise.
            zones = self.account.zone_types
            for f in args.args.get("filters") or []:
                if f.get("name") == "zone-type":
                    zones = {n: t for n, t in zones.items() if t in (f.get("values") or [])}
            names = sorted(zones)  # DescribeAvailabilityZones answers names and this account's zone IDs
            return {"id": self.region, "names": names, "zoneIds": [self.account.zone_ids[n] for n in names]}, []
        if args.token == "aws:eks/getClusters:getClusters":  # ListClusters: the account's live clusters
            return {"id": self.region, "names": sorted(self.world.clusters)}, []
        if args.token == "aws:eks/getCluster:getCluster":
            name = args.args["name"]
            out = {
                "id": name,
                "name": name,
                "arn": f"arn:aws:eks:{self.region}:123456789012:cluster/{name}",
                "vpcConfig": {"clusterSecurityGroupId": f"sg-{name}-cluster"},
            }
            live = self.world.clusters.get(name)
            if live is not None:  # DescribeCluster of a cluster that exists
                out.update(
                    version=live.version,
                    accessConfigs=[
                        {
                            "authenticationMode": "API",
                            "bootstrapClusterCreatorAdminPermissions": live.bootstrap_creator_admin,
                        }
                    ],
                )
            return out, []
        if args.token == "aws:eks/getNodeGroups:getNodeGroups":
            live = self.world.clusters.get(args.args.get("clusterName"))
            return {
                "id": str(args.args.get("clusterName")),
                "clusterName": args.args.get("clusterName"),
                "names": sorted(live.node_groups) if live else [],
            }, []
        if args.token == "aws:eks/getNodeGroup:getNodeGroup":
            live = self.world.clusters.get(args.args.get("clusterName"))
            ng = args.args.get("nodeGroupName")
            return {
                "id": f"{args.args.get('clusterName')}:{ng}",
                "clusterName": args.args.get("clusterName"),
                "nodeGroupName": ng,
                "version": live.node_groups.get(ng) if live else None,
            }, []
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": "123456789012", "arn": self.caller_arn, "id": "mock", "userId": "mock"}, []
        if args.token == "aws:iam/getSessionContext:getSessionContext":
            arn = args.args.get("arn", "")
            return {
                "id": arn,
                "arn": arn,
                "issuerArn": issuer_arn(arn),
                "issuerId": "mock",
                "issuerName": issuer_arn(arn).rsplit("/", 1)[-1],
            }, []
        return {}, []


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=lambda o: getattr(o, "urn", f"<{type(o).__name__}>")))


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(_plain(value))
    return out


def _quiet_refusals(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Drop "exception was never retrieved" for a refusal the run already raised to its caller, and the task
    bookkeeping error a Ctrl-C leaves behind.

    When the program fails halfway, the SDK leaves futures holding the same exception; asyncio would log each one
    with a formatted traceback when it is garbage-collected, at any later moment (and Python 3.11 formats carets with
    ``ast.parse``, which a collection inside another ``ast.parse`` breaks: "AST constructor recursion depth mismatch").
    """
    exc = context.get("exception")
    if isinstance(exc, Exception) and "never retrieved" in str(context.get("message", "")):
        return
    if isinstance(exc, RuntimeError) and str(exc).startswith("Leaving task"):
        # Ctrl-C raised inside a task's step: asyncio's current-task record no longer matches, and the next step of
        # that task fails so (asyncio/tasks.py ``_leave_task``). The run is being interrupted; the CLI says so.
        return
    loop.default_exception_handler(context)


def run_program(
    config: dict[str, Any] | None = None,
    *,
    region: str = "us-east-1",
    program: Path | str = PROGRAM,
    stack: str = "dev",
    offerings: dict[str, list[str]] | None = None,
    record: MockRun | None = None,
    caller_arn: str = DEPLOYER_ARN,
    strict: bool = True,
    account: MockAccount | None = None,
    previous: MockRun | None = None,
) -> MockRun:
    """Run ``program`` under mocks with ``ray-efa-eks:`` config ``config``; return what it registered.

    Exceptions raised by the program (config errors) propagate unchanged; pass
    ``record`` to inspect what was registered before one was raised. ``strict`` (default) refuses what AWS would
    refuse (:class:`~.aws_rules.AwsRejected` at that resource); ``caller_arn`` is the deploying identity.
    ``previous``: the run that deployed the stack; resources whose inputs changed since run their ``before_update``
    hooks (:class:`HookRefused` when one fails), as the engine does in a preview and an update.
    ``account``: the AWS account across runs (:class:`~.mock_account.MockAccount`): the program reads its live
    cluster from it, and a run that succeeds is committed to it as EKS would apply it (a sequence of ``pulumi up``).
    """
    run = record if record is not None else MockRun()
    all_config = {"aws:region": region}
    for key, value in (config or {}).items():
        full = key if ":" in key else f"ray-efa-eks:{key}"
        all_config[full] = value if isinstance(value, str) else json.dumps(value)
    try:
        asyncio.get_event_loop().close()
    except RuntimeError:
        pass
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(_quiet_refusals)
    asyncio.set_event_loop(loop)  # no future may outlive its run
    _settings.ROOT.set(None)
    _rpc.deserialize_resource = resource_ref  # idempotent; a no-op outside mock registrations
    pulumi.runtime.set_all_config(all_config)
    mocks = RecordingMocks(
        run, region, offerings, caller_arn=caller_arn, strict=strict, account=account, previous=previous
    )
    mocks.monitor = ParentAwareMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, project="ray-efa-eks", stack=stack, preview=False, monitor=mocks.monitor)

    from pulumi.runtime.stack import run_pulumi_func
    from pulumi.runtime.sync_await import _sync_await

    _settings.SETTINGS.rpc_manager.clear()
    _settings.SETTINGS.outputs.clear()
    _sync_await(run_pulumi_func(lambda: runpy.run_path(str(program), run_name="__main__")))
    root = _settings.get_root_resource()
    outs = dict(getattr(root, "outputs", {}) or {})
    captured = _sync_await(pulumi.Output.all(**outs).future()) if outs else {}
    run.outputs = captured
    if account is not None:
        account.commit(run, issuer_arn(caller_arn))
    return run
