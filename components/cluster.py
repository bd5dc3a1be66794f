"""Cluster: the EKS control plane (pulumi-eks), its node IAM role and a Kubernetes provider."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s

NODE_POLICIES = (
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
)

ADMIN_ACCESS_POLICY = "AmazonEKSClusterAdminPolicy"
"""EKS access policy like Kubernetes' cluster-admin: everything, port-forward to the Ray head included."""
VIEW_ACCESS_POLICY = "AmazonEKSAdminViewPolicy"
"""EKS access policy that can get/list/watch every resource cluster-wide (secrets too), and change nothing."""


def deployer_principal() -> str:
    """The IAM role or user ARN running ``pulumi up`` (an assumed-role session resolved to its role, path included).

    EKS gives this principal the cluster creator's access entry (CreateCluster ``accessConfig``
    ``bootstrapClusterCreatorAdminPermissions``, true by default; pulumi-eks does not turn it off), so a second
    CreateAccessEntry for it answers 409 ResourceInUseException (pulumi/pulumi-eks#2373, terraform-aws-eks#3293;
    EKS API reference, https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateAccessConfigRequest.html).
    """
    import pulumi_aws as aws

    arn = aws.get_caller_identity().arn
    return aws.iam.get_session_context(arn=arn).issuer_arn or arn


def without_creator(admin_arns: list[str], viewer_arns: list[str], creator: str) -> tuple[list[str], str | None]:
    """``admin_arns`` without the cluster creator (it is admin already) and the warning saying so.

    Raises ValueError when the creator is listed as a viewer: EKS already made it cluster admin, a second entry
    would be refused, and this stack cannot make it read-only.
    """
    if creator in viewer_arns:
        raise ValueError(f"{creator} runs pulumi up, so EKS makes it cluster admin when it creates the cluster "
                         "(bootstrapClusterCreatorAdminPermissions); a viewer entry for it would be refused with 409 "
                         "ResourceInUseException: remove it from clusterViewerArns, or deploy as another identity")
    if creator not in admin_arns:
        return list(admin_arns), None
    return ([a for a in admin_arns if a != creator],
            f"clusterAdminArns: {creator} runs pulumi up and already gets the cluster creator's admin access entry "
            "from EKS; no second entry is made for it (EKS would refuse it with 409 ResourceInUseException)")


def access_policy_arn(policy: str, principal_arn: str) -> str:
    """``arn:<partition>:eks::aws:cluster-access-policy/<policy>``, in the principal's partition."""
    partition = principal_arn.split(":", 2)[1] if principal_arn.startswith("arn:") else "aws"
    return f"arn:{partition}:eks::aws:cluster-access-policy/{policy}"


@dataclass
class ClusterArgs:
    """Inputs of :class:`Cluster`."""

    vpc_id: pulumi.Input[str]
    public_subnet_ids: pulumi.Input[list[str]]
    private_subnet_ids: pulumi.Input[list[str]]
    kubernetes_version: str
    endpoint_public_access_cidrs: list[str] = field(default_factory=lambda: ["0.0.0.0/0"])
    """Who may reach the public API endpoint; ignored when ``endpoint_public_access`` is off."""
    endpoint_public_access: bool = True
    """Off = private endpoint only: run Pulumi from inside the VPC (VPN, bastion, CI runner in the VPC)."""
    encrypt_secrets: bool = True
    """Envelope-encrypt Kubernetes secrets with a dedicated KMS key."""
    pod_identity_agent: bool = True
    """Install the ``eks-pod-identity-agent`` add-on so pods get IAM roles without the node role."""
    enable_network_policy: bool = True
    """Turn on the VPC CNI's NetworkPolicy enforcement; without it NetworkPolicy objects are silently ignored."""
    admin_arns: list[str] = field(default_factory=list)
    """IAM role/user ARNs that get an access entry with :data:`ADMIN_ACCESS_POLICY` (cluster scope)."""
    viewer_arns: list[str] = field(default_factory=list)
    """IAM role/user ARNs that get an access entry with :data:`VIEW_ACCESS_POLICY` (cluster scope)."""
    tags: dict[str, str] = field(default_factory=dict)


class Cluster(pulumi.ComponentResource):
    """EKS cluster with API access entries, OIDC, private nodes and no default node group."""

    eks: eks.Cluster
    node_role: aws.iam.Role
    provider: k8s.Provider
    name: pulumi.Output[str]
    kubeconfig: pulumi.Output[Any]
    security_group_id: pulumi.Output[str]
    """EKS cluster security group (EFA interfaces join it)."""
    arn: pulumi.Output[str]
    """Cluster ARN (pod identity trust policies are scoped to it)."""
    addons: list[aws.eks.Addon]
    """EKS add-ons this component installs; workloads that need them depend on these."""
    access_entries: list[aws.eks.AccessEntry]
    """One per clusterAdminArns/clusterViewerArns principal: without them only the identity that ran
    ``pulumi up`` can use kubectl (API authentication mode creates no other entry)."""

    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:index:Cluster", name, None, opts)
        if args.endpoint_public_access and any(c in ("0.0.0.0/0", "::/0") for c in args.endpoint_public_access_cidrs):
            pulumi.log.warn(f"Cluster {name}: the EKS API endpoint is open to the internet; set "
                            "ray-efa-eks:endpointPublicAccessCidrs to your office/VPN/CI ranges", resource=self)
        child = pulumi.ResourceOptions(parent=self)
        self.node_role = aws.iam.Role(
            f"{name}-node",
            assume_role_policy='{"Version":"2012-10-17","Statement":[{"Effect":"Allow",'
            '"Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}',
            tags=args.tags, opts=child)
        for i, arn in enumerate(NODE_POLICIES):
            aws.iam.RolePolicyAttachment(f"{name}-node-{i}", role=self.node_role.name, policy_arn=arn, opts=child)
        key_arn = None
        if args.encrypt_secrets:
            key = aws.kms.Key(f"{name}-secrets", description=f"{name} Kubernetes secrets envelope encryption",
                              enable_key_rotation=True, tags=args.tags, opts=child)
            key_arn = key.arn
        self.eks = eks.Cluster(
            f"{name}-eks",
            vpc_id=args.vpc_id,
            public_subnet_ids=args.public_subnet_ids,
            private_subnet_ids=args.private_subnet_ids,
            node_associate_public_ip_address=False,
            skip_default_node_group=True,
            authentication_mode=eks.AuthenticationMode.API,
            create_oidc_provider=True,
            version=args.kubernetes_version,
            endpoint_private_access=True,
            endpoint_public_access=args.endpoint_public_access,
            public_access_cidrs=args.endpoint_public_access_cidrs if args.endpoint_public_access else None,
            vpc_cni_options=eks.VpcCniOptionsArgs(enable_network_policy=args.enable_network_policy),
            encryption_config_key_arn=key_arn,
            name=name,
            tags=args.tags,
            opts=child,
        )
        self.name = pulumi.Output.from_input(name)
        self.kubeconfig = self.eks.kubeconfig
        # The EKS-managed cluster SG: pulumi-eks puts the EFA interfaces in this one.
        described = aws.eks.get_cluster_output(name=name, opts=pulumi.InvokeOutputOptions(depends_on=[self.eks]))
        self.security_group_id = described.vpc_config.cluster_security_group_id
        self.arn = described.arn
        self.addons: list[aws.eks.Addon] = []
        if args.pod_identity_agent:
            self.addons.append(aws.eks.Addon(
                f"{name}-pod-identity-agent", cluster_name=name, addon_name="eks-pod-identity-agent",
                tags=args.tags, opts=pulumi.ResourceOptions(parent=self, depends_on=[self.eks])))
        self.access_entries = []
        for policy, arns in ((ADMIN_ACCESS_POLICY, args.admin_arns), (VIEW_ACCESS_POLICY, args.viewer_arns)):
            role = "admin" if policy == ADMIN_ACCESS_POLICY else "viewer"
            for arn in arns:
                # Named by the ARN, not its position: reordering the list replaces nothing.
                suffix = hashlib.sha256(arn.encode()).hexdigest()[:8]
                after_eks = pulumi.ResourceOptions(parent=self, depends_on=[self.eks])
                entry = aws.eks.AccessEntry(f"{name}-{role}-{suffix}", cluster_name=name, principal_arn=arn,
                                            type="STANDARD", tags=args.tags, opts=after_eks)
                aws.eks.AccessPolicyAssociation(
                    f"{name}-{role}-{suffix}", cluster_name=name, principal_arn=entry.principal_arn,
                    policy_arn=access_policy_arn(policy, arn), access_scope={"type": "cluster"},
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[entry]))
                self.access_entries.append(entry)
        self.provider = k8s.Provider(f"{name}-k8s", kubeconfig=self.eks.kubeconfig_json,
                                     enable_server_side_apply=True, opts=child)
        self.register_outputs({"name": self.name, "securityGroupId": self.security_group_id})
