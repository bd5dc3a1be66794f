"""A mocked AWS account that outlives one program run: what EKS holds between two ``pulumi up``s.

``tools.mockrun.run_program(..., account=MockAccount())`` answers the program's reads of the live cluster
(ListClusters, DescribeCluster, ListNodegroups, DescribeNodegroup) from it, lets the AWS rules (tools/aws_rules.py)
judge each request against it, and, when the run succeeds, commits the run to it the way EKS would have applied
the update. A sequence of runs on one account is then a sequence of deployments:

- the cluster keeps the version it was created or last updated to; a managed node group keeps its version unless
  the request names one (CreateNodegroup: "By default, the Kubernetes version of the cluster is used"; an update
  that names none changes nothing);
- the cluster's creator is the principal that ran the ``up`` that created it, and EKS holds an access entry for it
  when the cluster was created with ``bootstrapClusterCreatorAdminPermissions`` (pulumi-eks's child shape, after any
  transform the program declares on the component); later callers change neither;
- an access entry exists per principal, made by EKS (the creator's) or by the stack resource that created it; the
  stack's state (URN -> inputs) tells a create from an update, as the engine does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

EKS_CLUSTER = "eks:index:Cluster"
MNG = "eks:index:ManagedNodeGroup"
ACCESS_ENTRY = "aws:eks/accessEntry:AccessEntry"
PULUMI_EKS_CHILD = "aws:eks/cluster:Cluster"


@dataclass
class EksCluster:
    """One EKS cluster as EKS describes it."""

    name: str
    version: str
    bootstrap_creator_admin: bool
    creator_arn: str
    entries: dict[str, str | None] = field(default_factory=dict)
    """Principal ARN -> URN of the stack resource that created its entry (None: EKS's own creator entry)."""
    node_groups: dict[str, str] = field(default_factory=dict)
    """Node group (its resource name) -> Kubernetes version."""
    urn: str = ""


@dataclass
class MockAccount:
    """EKS state of one mocked account across program runs."""

    clusters: dict[str, EksCluster] = field(default_factory=dict)
    state: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The stack's state after the last successful run: URN -> inputs."""
    zone_ids: dict[str, str] = field(default_factory=dict)
    """AZ name -> zone ID where this account's mapping differs from the default one (moto's): AWS maps names to
    zone IDs independently for each account, so us-east-1a is use1-az6 in one and use1-az3 in another."""
    history: list[str] = field(default_factory=list)
    """One line per committed run: who ran it and what EKS did."""

    # -- during a run ------------------------------------------------------------------------------------------------

    def existed(self, urn: str) -> bool:
        """The resource is in the stack's state: registering it again is an update, not a create."""
        return urn in self.state

    def cluster_as_requested(self, rec: Any, caller_arn: str) -> EksCluster:
        """The cluster a registration of pulumi-eks's Cluster asks for: the live one, or the one CreateCluster makes."""
        name = str(rec.inputs.get("name") or rec.name)
        live = self.clusters.get(name)
        if live is not None:
            return live
        bootstrap = bool(child_access_config(rec).get("bootstrapClusterCreatorAdminPermissions", True))
        return EksCluster(
            name,
            str(rec.inputs.get("version") or ""),
            bootstrap,
            caller_arn,
            {caller_arn: None} if bootstrap else {},
            urn=rec.urn,
        )

    # -- after a successful run --------------------------------------------------------------------------------------

    def commit(self, run: Any, caller_arn: str) -> None:
        """Apply a successful run as EKS would: clusters created/updated, node group versions, access entries."""
        by_urn = {r.urn: r for r in run.resources}
        notes = []
        for rec in run.of_type(EKS_CLUSTER):
            c = self.cluster_as_requested(rec, caller_arn)
            if c.name not in self.clusters:
                notes.append(
                    f"created {c.name} {c.version} (creator {c.creator_arn}, creator entry "
                    f"{'yes' if c.bootstrap_creator_admin else 'no'})"
                )
                self.clusters[c.name] = c
            elif rec.inputs.get("version") and rec.inputs["version"] != c.version:
                notes.append(f"updated {c.name} {c.version} -> {rec.inputs['version']}")
                c.version = str(rec.inputs["version"])
        for rec in run.of_type(MNG):
            c = self._cluster_of(rec, by_urn)
            if c is None:
                continue
            wanted = rec.inputs.get("version")
            if wanted:
                c.node_groups[rec.name] = str(wanted)
            elif not self.existed(rec.urn) or rec.name not in c.node_groups:
                c.node_groups[rec.name] = c.version  # CreateNodegroup defaults to the cluster's version
        current = {r.urn for r in run.of_type(ACCESS_ENTRY)}
        for c in self.clusters.values():
            for principal, urn in list(c.entries.items()):
                if urn is not None and urn not in current:
                    del c.entries[principal]  # the engine deletes what the program no longer declares
        for rec in run.of_type(ACCESS_ENTRY):
            c = self.clusters.get(str(rec.inputs.get("clusterName")))
            if c is not None:
                c.entries[str(rec.inputs.get("principalArn"))] = rec.urn
        self.state = {r.urn: _plain(r.inputs) for r in run.resources}
        self.history.append(f"{caller_arn}: " + ("; ".join(notes) or "no cluster change"))

    def _cluster_of(self, rec: Any, by_urn: dict[str, Any]) -> EksCluster | None:
        ref = rec.inputs.get("cluster")
        urn = getattr(ref, "urn", ref)
        owner = by_urn.get(urn)
        name = str(owner.inputs.get("name") or owner.name) if owner is not None else str(ref)
        return self.clusters.get(name)


def child_access_config(rec: Any) -> dict[str, Any]:
    """The ``accessConfig`` pulumi-eks 4.4.0 gives its ``aws:eks/cluster`` child (authenticationMode set: bootstrap
    true, nodejs/eks/cluster/cluster.ts), after the transforms declared on the component (the engine runs them on
    the component's children; the mock engine does not, so they run here)."""
    import pulumi

    props: dict[str, Any] = {
        "accessConfig": {
            "authenticationMode": rec.inputs.get("authenticationMode"),
            "bootstrapClusterCreatorAdminPermissions": True,
        },
        "version": rec.inputs.get("version"),
    }
    for t in rec.transforms or []:
        out = t(
            pulumi.ResourceTransformArgs(
                custom=True,
                type_=PULUMI_EKS_CHILD,
                name=f"{rec.name}-eksCluster",
                props=props,
                opts=pulumi.ResourceOptions(),
            )
        )
        if out is not None:
            props = dict(out.props)
    return dict(props.get("accessConfig") or {})


def _plain(v: Any) -> Any:
    return json.loads(json.dumps(v, default=lambda o: getattr(o, "urn", f"<{type(o).__name__}>")))
