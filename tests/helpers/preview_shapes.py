"""Resources shaped like a real ``pulumi preview`` hands them to CrossGuard, built from pulumi_policy's own classes.

Two shapes of the GPU node group: ``own`` (the default, what the program declares: the
EfaGpuNodeGroup component owns the launch template and the placement group, pulumi-eks's ManagedNodeGroup
only has the aws:eks/nodeGroup child, whose ``launchTemplate`` depends on our template) and ``pulumi-eks``
(``enableEfaSupport``: the launch template and placement group are the ManagedNodeGroup's children).
In a real preview pulumi-eks's ManagedNodeGroup is a component whose *children* carry the
node group layout (aws:eks/nodeGroup, and with enableEfaSupport the launch template and placement group), values
computed from resources not yet created are unknown (the engine's sentinels, behind
pulumi_policy's unknown-checking proxy), and the analyzer links parents and property
dependencies as PolicyResource objects. These builders produce exactly that, so the rules
and the policy pack are tested on the shape they meet in CI, not only on mock records.
"""

from __future__ import annotations

import copy
from typing import Any

from pulumi_policy import PolicyCustomTimeouts, PolicyResource, PolicyResourceOptions
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

from ray_efa_eks.components.nodes.instances import CATALOGUE
from ray_efa_eks.tools.layout import LAUNCH_TEMPLATE, MNG, NODE_GROUP, PLACEMENT_GROUP, RAY_CLUSTER, SG_EGRESS, SUBNET

UNKNOWN_STR = UNKNOWN_STRING_VALUE
STACK = "urn:pulumi:dev::ray-efa-eks::pulumi:pulumi:Stack::ray-efa-eks-dev"
IMAGE = "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"
CLUSTER_SG = "sg-0123cluster"


def urn(typ: str, name: str, parent_types: str = "") -> str:
    chain = f"{parent_types}${typ}" if parent_types else typ
    return f"urn:pulumi:dev::ray-efa-eks::{chain}::{name}"


def efa_interfaces(count: int, sg: str = CLUSTER_SG) -> list[dict[str, Any]]:
    """What pulumi-eks's getEfaNetworkInterfaces writes: efa first, efa-only after, all in the cluster SG."""
    return [
        {
            "deleteOnTermination": "true",
            "networkCardIndex": i,
            "deviceIndex": 0 if i == 0 else 1,
            "interfaceType": "efa" if i == 0 else "efa-only",
            "securityGroups": [sg],
        }
        for i in range(count)
    ]


def ray_spec(instance_type: str = "g6.12xlarge", efa: bool = True, replicas: int = 2) -> dict[str, Any]:
    """A RayCluster spec from the real builder (plain data, no Pulumi resources)."""
    from ray_efa_eks.components.ray.raycluster import RayClusterArgs, WorkerGroupArgs, build_spec

    return build_spec(
        RayClusterArgs(  # type: ignore[arg-type]
            provider=None,
            image=IMAGE,
            region="us-east-1",
            worker_groups=[
                WorkerGroupArgs(name="gpu", instance_type=CATALOGUE[instance_type], replicas=replicas, efa=efa)
            ],
        )
    )


def preview_specs(
    *,
    instance_type: str = "g6.12xlarge",
    efa_count: int | None = None,
    subnet_azs=("us-east-1a",),
    subnet_ids_known: bool = True,
    sg_known: bool = True,
    self_rule: bool = True,
    pod_instance_type: str | None = None,
    shape: str = "own",
    capacity: str = "on-demand",
    reservation: str = "cr-0123456789abcdef0",
) -> list[dict[str, Any]]:
    """Plain descriptions (type, name, urn, parent, props, deps) of a preview of the default layout.

    ``shape``: ``own`` (our launch template, the program today) or ``pulumi-eks`` (enableEfaSupport's children);
    ``capacity`` (own shape): on-demand (cluster placement group), reservation or capacity-block (none).
    """
    assert shape in ("own", "pulumi-eks") and capacity in ("on-demand", "reservation", "capacity-block")
    it = CATALOGUE[instance_type]
    efa_count = it.max_efa_interfaces if efa_count is None else efa_count
    gpu_comp = urn("ray-efa-eks:index:EfaGpuNodeGroup", "gpu", "pulumi:pulumi:Stack")
    net_comp = urn("ray-efa-eks:index:Network", "net", "pulumi:pulumi:Stack")
    mng = urn(MNG, "gpu-mng", "pulumi:pulumi:Stack$ray-efa-eks:index:EfaGpuNodeGroup")
    in_mng = "pulumi:pulumi:Stack$ray-efa-eks:index:EfaGpuNodeGroup$eks:index:ManagedNodeGroup"
    specs: list[dict[str, Any]] = [
        {"type": "ray-efa-eks:index:Network", "name": "net", "urn": net_comp, "parent": STACK, "props": {}},
        {
            "type": "ray-efa-eks:index:EfaGpuNodeGroup",
            "name": "gpu",
            "urn": gpu_comp,
            "parent": STACK,
            "props": {"efaInterfacesPerNode": efa_count, "labels": {"ray-efa-eks/role": "gpu"}},
        },
    ]
    subnet_urns = []
    for az in subnet_azs:
        u = urn(SUBNET, f"net-private-{az}", "pulumi:pulumi:Stack$ray-efa-eks:index:Network")
        subnet_urns.append(u)
        specs.append(
            {
                "type": SUBNET,
                "name": f"net-private-{az}",
                "urn": u,
                "parent": net_comp,
                "props": {
                    "id": f"subnet-{az}" if subnet_ids_known else UNKNOWN_STR,
                    "availabilityZone": az,
                    "cidrBlock": "10.0.0.0/20",
                    "vpcId": UNKNOWN_STR,
                },
            }
        )
    sg = CLUSTER_SG if sg_known else UNKNOWN_STR
    in_comp = "pulumi:pulumi:Stack$ray-efa-eks:index:EfaGpuNodeGroup"
    lt_parent, lt_chain, lt_name = (
        (mng, in_mng, "gpu-mng-launchTemplate") if shape == "pulumi-eks" else (gpu_comp, in_comp, "gpu-lt")
    )
    lt_urn = urn(LAUNCH_TEMPLATE, lt_name, lt_chain)
    lt_props: dict[str, Any] = {
        "id": UNKNOWN_STR,
        "networkInterfaces": efa_interfaces(efa_count, sg),
        "metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 1},
    }
    lt_deps: dict[str, list[str]] = {}
    specs.append(
        {
            "type": MNG,
            "name": "gpu-mng",
            "urn": mng,
            "parent": gpu_comp,
            "props": {"nodeGroup": UNKNOWN_STR, "placementGroupName": UNKNOWN_STR if shape == "pulumi-eks" else ""},
        }
    )
    if shape == "pulumi-eks" or capacity == "on-demand":
        pg_name, pg_chain = ("gpu-mng", in_mng) if shape == "pulumi-eks" else ("gpu-pg", in_comp)
        pg_urn = urn(PLACEMENT_GROUP, pg_name, pg_chain)
        specs.append(
            {
                "type": PLACEMENT_GROUP,
                "name": pg_name,
                "urn": pg_urn,
                "parent": lt_parent,
                "props": {"strategy": "cluster", "name": UNKNOWN_STR},
            }
        )
        lt_props["placement"] = {"groupName": UNKNOWN_STR}
        lt_deps["placement"] = [pg_urn]
    if capacity != "on-demand":
        key = "capacityReservationResourceGroupArn" if reservation.startswith("arn:") else "capacityReservationId"
        lt_props["capacityReservationSpecification"] = {"capacityReservationTarget": {key: reservation}}
    if capacity == "capacity-block":
        lt_props["instanceMarketOptions"] = {"marketType": "capacity-block"}
    specs.append(
        {
            "type": LAUNCH_TEMPLATE,
            "name": lt_name,
            "urn": lt_urn,
            "parent": lt_parent,
            "props": lt_props,
            "deps": lt_deps,
        }
    )
    specs.append(
        {
            "type": NODE_GROUP,
            "name": "gpu-mng",
            "urn": urn(NODE_GROUP, "gpu-mng", in_mng),
            "parent": mng,
            "props": {
                "instanceTypes": [instance_type],
                "amiType": "AL2023_x86_64_NVIDIA",
                "capacityType": "CAPACITY_BLOCK" if capacity == "capacity-block" else "ON_DEMAND",
                "scalingConfig": {"desiredSize": 2, "minSize": 2, "maxSize": 2},
                "labels": {"ray-efa-eks/role": "gpu", "ray-efa-eks/instance-type": instance_type},
                "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}],
                "subnetIds": [f"subnet-{az}" for az in subnet_azs] if subnet_ids_known else UNKNOWN_STR,
                "launchTemplate": {"id": UNKNOWN_STR, "version": UNKNOWN_STR},
            },
            # the nodeGroup's launchTemplate comes from our template's outputs (pulumi-eks: its own child's)
            "deps": {"subnetIds": subnet_urns, "launchTemplate": [lt_urn]},
        }
    )
    if self_rule:
        specs.append(
            {
                "type": SG_EGRESS,
                "name": "gpu-efa-self-egress",
                "urn": urn(SG_EGRESS, "gpu-efa-self-egress", "pulumi:pulumi:Stack$ray-efa-eks:index:EfaGpuNodeGroup"),
                "parent": gpu_comp,
                "props": {"securityGroupId": sg, "referencedSecurityGroupId": sg, "ipProtocol": "-1"},
            }
        )
    ray_comp = urn("ray-efa-eks:index:RayCluster", "ray", "pulumi:pulumi:Stack")
    specs += [
        {"type": "ray-efa-eks:index:RayCluster", "name": "ray", "urn": ray_comp, "parent": STACK, "props": {}},
        {
            "type": RAY_CLUSTER,
            "name": "ray-raycluster",
            "urn": urn(RAY_CLUSTER, "ray-raycluster", "pulumi:pulumi:Stack$ray-efa-eks:index:RayCluster"),
            "parent": ray_comp,
            "props": {
                "apiVersion": "ray.io/v1",
                "kind": "RayCluster",
                "metadata": {"name": "ray", "namespace": "ray"},
                "spec": ray_spec(pod_instance_type or instance_type),
            },
        },
    ]
    return specs


def policy_resources(specs: list[dict[str, Any]]) -> list[PolicyResource]:
    """PolicyResource objects as pulumi_policy's analyzer builds them (proxied props, linked parents and deps)."""
    out: dict[str, PolicyResource] = {}
    for s in specs:
        opts = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [], s.get("parent"))
        out[s["urn"]] = PolicyResource(
            s["type"], unknown_checking_proxy(copy.deepcopy(s["props"])), s["urn"], s["name"], opts, None, None, [], {}
        )
    for s in specs:
        r = out[s["urn"]]
        r.parent = out.get(s.get("parent"))
        for prop, urns in (s.get("deps") or {}).items():
            r.property_dependencies[prop] = [out[u] for u in urns if u in out]
    return list(out.values())


def edit(specs: list[dict[str, Any]], typ: str, name: str, **props: Any) -> list[dict[str, Any]]:
    """A copy of ``specs`` with ``props`` set on the resource ``typ``/``name`` (None deletes a key)."""
    out = copy.deepcopy(specs)
    target = next(s for s in out if s["type"] == typ and s["name"] == name)
    for k, v in props.items():
        if v is None:
            target["props"].pop(k, None)
        else:
            target["props"][k] = v
    return out
