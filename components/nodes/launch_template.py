"""The node launch templates, declared by our components (system and GPU), not built by pulumi-eks.

pulumi-eks's ``enableEfaSupport`` builds its own launch template (``createMNGCustomLaunchTemplate`` in
nodejs/eks/nodes/nodegroup.ts, ``getEfaNetworkInterfaces`` in instances.ts), refuses a user launch
template next to it, hard-codes IMDS hop limit 2, leaves the root volume unencrypted and always adds a
cluster placement group, which breaks On-Demand Capacity Reservations and Capacity Blocks. So the
managed node groups get this template instead, with ``enableEfaSupport`` off. It keeps what pulumi-eks
wrote and adds what the issue asks:

* one EFA interface per EFA-capable network card (the catalogue's ``efa_card_indexes``; p5.48xlarge: 32), laid
  out as EC2's guide recommends where the type supports ``efa-only``: a plain ENA primary interface (card 0, device
  0: the node's IP and the VPC CNI's), ``efa-only`` at card 0 device 1 when card 0 carries EFA, and ``efa-only`` at
  device 0 of every further card (no IP address used, no routing conflicts); a type without efa-only keeps ``efa``
  (EFA with ENA) at card 0 device 0 and device 1 of the other cards;
  every interface in the security groups EFA needs (the EKS cluster security group, which has the
  all-traffic self rules) and deleted with the instance;
* ``metadataOptions``: IMDSv2 required, hop limit 1 (pods one hop further cannot reach the node role);
* the root volume (``/dev/xvda`` on AL2023) written here, gp3 and encrypted, with the IOPS and throughput a
  caller provisions (:class:`Gp3Performance`: the GPU nodes pull a tens-of-GB image onto it from zero);
* the cluster placement group and the Capacity Reservation / Capacity Block fields (components/nodes/capacity.py).

No ``imageId``: the node group's ``amiType`` keeps the EKS-optimized AL2023 NVIDIA AMI and EKS then writes the
node bootstrap itself (with an AMI id in the template EKS would supply none). User data, when a caller adds some
(:func:`node_config_user_data`: the GPU nodes' ``FastImagePull`` feature gate), is the MIME multi-part document EKS
merges with its own ("Amazon EC2 user data in launch templates used with managed node groups must be in the MIME
multi-part archive format, because your user data is merged with Amazon EKS user data", EKS user guide, "Customize
managed nodes with launch templates"); nodeadm merges every ``NodeConfig`` part it finds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import base64
import hashlib
import json

import pulumi
import pulumi_aws as aws

from .capacity import GpuCapacity
from .ebs_limits import GP3_BASELINE_IOPS, GP3_BASELINE_THROUGHPUT, GP3_DOC, gp3_problem
from .instances import InstanceType

LAUNCH_TEMPLATE_TYPE = "aws:ec2/launchTemplate:LaunchTemplate"
ROOT_DEVICE = "/dev/xvda"
"""Root device of the EKS-optimized Amazon Linux 2023 AMIs (standard and NVIDIA)."""


@dataclass(frozen=True)
class Gp3Performance:
    """Provisioned IOPS and throughput of a gp3 root volume (EBS bills what is above the baseline)."""

    iops: int = GP3_BASELINE_IOPS
    throughput_mibps: int = GP3_BASELINE_THROUGHPUT

    def ebs(self) -> dict[str, Any]:
        """The ``ebs`` block's fields (the provider's snake_case names)."""
        return {"iops": self.iops, "throughput": self.throughput_mibps}


FAST_IMAGE_PULL = "FastImagePull"
"""nodeadm feature gate (awslabs/amazon-eks-ami nodeadm/doc/examples.md, "Enabling fast image pull (experimental)";
nodeadm/internal/containerd/config.go): containerd pulls and unpacks an image's layers in parallel through the SOCI
snapshotter, which every AL2023 EKS AMI installs (templates/al2023/provisioners/install-worker.sh, "SOCI
Snapshotter"); nodeadm ignores it below 4 vCPUs or 7 GiB (``UseSOCISnapshotter``). The kubelet half is already on:
nodeadm writes ``serializeImagePulls: false`` (nodeadm/internal/kubelet/config.go)."""
FAST_IMAGE_PULL_MIN_MIBPS = 600
"""examples.md: "We recommend at least 600MiB/s throughput. Below that value, you may see longer image pull times with
this flag. Higher values up to 1000MiB/s and 16k IOPs may result in better performance." """


def node_config_user_data(feature_gates: dict[str, bool]) -> str:
    """Base64 user data: one nodeadm ``NodeConfig`` part in the MIME multi-part form EKS merges with its own.

    nodeadm's API (awslabs/amazon-eks-ami nodeadm/doc/api.md, ``spec.featureGates``; examples.md shows a feature
    gate alone in a NodeConfig) takes a partial NodeConfig; EKS supplies the cluster part for a managed node group
    that runs its own AMI type.
    """
    gates = "".join(f"    {name}: {'true' if on else 'false'}\n" for name, on in sorted(feature_gates.items()))
    doc = (
        "MIME-Version: 1.0\n"
        'Content-Type: multipart/mixed; boundary="//"\n'
        "\n"
        "--//\n"
        "Content-Type: application/node.eks.aws\n"
        "\n"
        "---\n"
        "apiVersion: node.eks.aws/v1alpha1\n"
        "kind: NodeConfig\n"
        "spec:\n"
        "  featureGates:\n"
        f"{gates}"
        "\n"
        "--//--\n"
    )
    return base64.b64encode(doc.encode()).decode()


@dataclass(frozen=True)
class NodeHardening:
    """What every node's launch template must say."""

    imds_hop_limit: int = 1
    """1 keeps pods (one network hop further) away from IMDS and the node role; pods use Pod Identity."""
    encrypt_root_volume: bool = True
    """Encrypt the EBS root volume (AWS-managed ``aws/ebs`` key unless ``kms_key_id`` is set)."""
    kms_key_id: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.imds_hop_limit <= 64:
            raise ValueError(f"imds_hop_limit must be 1..64 (EC2's range), got {self.imds_hop_limit}")
        if self.kms_key_id and not self.encrypt_root_volume:
            raise ValueError("kms_key_id needs encrypt_root_volume=True")

    def metadata_options(self) -> dict[str, Any]:
        return {
            "http_endpoint": "enabled",
            "http_tokens": "required",
            "http_put_response_hop_limit": self.imds_hop_limit,
        }

    def root_volume(self, size_gib: int, performance: Gp3Performance | None = None) -> dict[str, Any]:
        """The root ``block_device_mappings`` entry (the provider types ``encrypted`` as a string); ``performance``
        None leaves IOPS and throughput to EC2 (the gp3 baseline)."""
        if size_gib < 1:
            raise ValueError(f"root volume size must be >= 1 GiB, got {size_gib}")
        if performance is not None:
            problem = gp3_problem(size_gib, performance.iops, performance.throughput_mibps)
            if problem:
                raise ValueError(f"{problem} ({GP3_DOC})")
        ebs: dict[str, Any] = {
            "volume_size": size_gib,
            "volume_type": "gp3",
            "delete_on_termination": "true",
            "encrypted": "true" if self.encrypt_root_volume else "false",
            **(performance.ebs() if performance is not None else {}),
        }
        if self.kms_key_id:
            ebs["kms_key_id"] = self.kms_key_id
        return {"device_name": ROOT_DEVICE, "ebs": ebs}


def efa_network_interfaces(
    instance_type: InstanceType, security_group_ids: pulumi.Input[Sequence[str]]
) -> list[dict[str, Any]]:
    """One EFA interface per EFA-capable network card (catalogue ``efa_card_indexes``), efa-only where supported.

    AWS, "Maximize network bandwidth on Amazon EC2 instances with multiple network cards"
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html), for types with efa-only: the
    primary interface (card 0, device 0) an ENA interface ("You can't use an EFA-only network interface as the primary
    network interface"); if card 0 supports EFA, an efa-only interface at card 0, device 1; for each further card,
    efa-only at device 0 (its P5/P5e section lays p5.48xlarge out the same way; p6-b300.48xlarge's card 0 lists only
    ``interface``, so it gets the ENA primary and efa-only on cards 1-16). The EFA device count is the same as with
    ``efa`` on the primary: one per EFA card. Types without efa-only (``efa_only_supported`` false): ``efa`` (EFA with
    ENA) at card 0 device 0, ``efa`` at device 1 of the other cards, as before. One EFA per network card.
    """
    cards = instance_type.efa_card_indexes
    if not instance_type.efa_supported or not cards:
        raise ValueError(f"{instance_type.name} does not support EFA; pick an EFA type or turn EFA off")
    if len(cards) != instance_type.max_efa_interfaces or max(cards) >= instance_type.network_cards:
        raise ValueError(
            f"{instance_type.name}: catalogue says {instance_type.max_efa_interfaces} EFA interfaces on "
            f"cards {list(cards)} of {instance_type.network_cards}; EC2 allows one EFA per card"
        )
    common = {"security_groups": security_group_ids, "delete_on_termination": "true"}
    if instance_type.efa_only_supported:  # ENA primary (no interface_type = "interface"), efa-only everywhere else
        return [
            {"network_card_index": 0, "device_index": 0, **common},
            *(
                {"network_card_index": i, "device_index": 1 if i == 0 else 0, "interface_type": "efa-only", **common}
                for i in cards
            ),
        ]
    out: list[dict[str, Any]] = []
    if 0 not in cards:  # the primary interface still has to exist: ENA only
        out.append({"network_card_index": 0, "device_index": 0, **common})
    out += [
        {"network_card_index": i, "device_index": 0 if i == 0 else 1, "interface_type": "efa", **common} for i in cards
    ]
    return out


@dataclass
class NodeLaunchTemplateArgs:
    """Inputs of :func:`node_launch_template`."""

    hardening: NodeHardening
    """IMDS hop limit and root-volume encryption of the nodes."""
    root_volume_gib: int
    """Size of the gp3 root volume (images, container layers, logs)."""
    network_interfaces: list[dict[str, Any]] | None = None
    """EFA interfaces (:func:`efa_network_interfaces`); None: EKS gives the node its default interface."""
    placement_group_name: pulumi.Input[str] | None = None
    """Cluster placement group the instances launch into (EFA nodes on demand); None: none."""
    capacity: GpuCapacity | None = None
    """The Capacity Reservation / Capacity Block target (None: on demand)."""
    reservation_id: pulumi.Input[str] | None = None
    """The target id as an output that resolves only once checked against EC2 (else ``capacity.reservation``)."""
    tags: dict[str, str] | None = None
    """Tags of the template itself (rollout_guards records what the group runs there); None: none."""
    instance_type: str | None = None
    """Set only for a Capacity Block: EKS wants its type in the launch template and none in the node group
    (EKS user guide, "Create a managed node group with Capacity Blocks for ML",
    https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html; terraform-aws-eks
    modules/eks-managed-node-group does the same when capacity_type is CAPACITY_BLOCK)."""
    template_tags: dict[str, str] | None = None
    """Tags of the template itself (components/nodes/rollout_guards.py records what the group runs there); not data: a
    change makes no new template version."""
    hooks: pulumi.ResourceHookBinding | None = None
    """Resource hooks of the template (components/nodes/rollout_guards.py)."""
    root_volume_performance: Gp3Performance | None = None
    """Provisioned gp3 IOPS/throughput of the root volume (None: the baseline, 3,000 IOPS and 125 MiB/s)."""
    user_data: str | None = None
    """Base64 MIME multi-part user data (:func:`node_config_user_data`); None: EKS's bootstrap alone."""


def node_launch_template(
    name: str, args: NodeLaunchTemplateArgs, opts: pulumi.ResourceOptions
) -> aws.ec2.LaunchTemplate:
    """The launch template a managed node group uses (``launch_template={"id": ..., "version": ...}``)."""
    props = launch_template_data(name, args)
    if args.template_tags:
        props["tags"] = dict(args.template_tags)
    if args.hooks is not None:
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(hooks=args.hooks))
    return aws.ec2.LaunchTemplate(name, **props, opts=opts)


def fingerprint(value: Any) -> str:
    """Short hash of plain data (an Output inside shows as a marker: resolve it first)."""
    blob = json.dumps(value, sort_keys=True, default=lambda o: f"<{type(o).__name__}>")
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def data_fingerprint(name: str, args: NodeLaunchTemplateArgs) -> pulumi.Output[str]:
    """Hash of the template's data with every value resolved (reservation id, security groups, placement group):
    a change is a new template version, on which EKS replaces every node of the group."""
    return pulumi.Output.from_input(launch_template_data(name, args)).apply(fingerprint)


def launch_template_data(name: str, args: NodeLaunchTemplateArgs) -> dict[str, Any]:
    """The template's inputs that make its versions (everything but its own tags)."""
    capacity = args.capacity or GpuCapacity()
    props: dict[str, Any] = {
        "metadata_options": args.hardening.metadata_options(),
        "block_device_mappings": [args.hardening.root_volume(args.root_volume_gib, args.root_volume_performance)],
        "update_default_version": True,
    }
    if args.user_data:
        props["user_data"] = args.user_data
    if args.instance_type:
        props["instance_type"] = args.instance_type
    if args.network_interfaces:
        props["network_interfaces"] = args.network_interfaces
    if args.placement_group_name is not None:
        if not capacity.cluster_placement_group and args.placement_group_name != capacity.placement_group:
            raise ValueError(
                f"{name}: a new cluster placement group conflicts with gpuCapacity {capacity.mode} "
                "(launches fail with InsufficientInstanceCapacity); leave it out, or name the group "
                "the ODCR was created in (GpuCapacity.placement_group)"
            )
        props["placement"] = {"group_name": args.placement_group_name}
    spec = capacity.capacity_reservation_specification()
    if spec and args.reservation_id is not None and not capacity.is_group:
        spec = {"capacity_reservation_target": {"capacity_reservation_id": args.reservation_id}}
    if spec:
        props["capacity_reservation_specification"] = spec
    if capacity.instance_market_options():
        props["instance_market_options"] = capacity.instance_market_options()
    if args.tags:
        props["tag_specifications"] = [{"resource_type": "instance", "tags": args.tags}]
    return props


def launch_template_ref(template: aws.ec2.LaunchTemplate) -> dict[str, Any]:
    """The node group's ``launch_template`` input: the id and the latest version (EKS wants the version as a string)."""
    return {"id": template.id, "version": template.latest_version.apply(lambda v: str(v))}
