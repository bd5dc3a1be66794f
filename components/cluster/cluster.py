"""Cluster: the EKS control plane (pulumi-eks), its node IAM role and a Kubernetes provider."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s

from ..config.errors import ArgError
from ..network.network_policies import KUBE_SYSTEM, STRICT, allow_all_egress, allow_all_ingress, cni_configuration
from .pod_identity import pod_identity_trust_policy

NODE_POLICIES = (
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly",
)
"""The node role, as the EKS best-practices guide (security, IAM: "Update the aws-node daemonset to use IRSA" / Pod
Identity, and "Use the AmazonEC2ContainerRegistryPullOnly managed policy") gives it: the kubelet's worker policy and
image pulls only. ``AmazonEC2ContainerRegistryReadOnly`` also lists and describes every repository and image of the
account; ``AmazonEKS_CNI_Policy`` (ENI create/attach/delete, IP assignment) moves to the VPC CNI's own role
(:data:`CNI_POLICY`), so a pod that reaches the instance credentials cannot rewire the node's network interfaces."""
CNI_POLICY = "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy"
CNI_SERVICE_ACCOUNT = ("kube-system", "aws-node")
"""The VPC CNI add-on's DaemonSet runs as this service account; its Pod Identity association carries :data:`CNI_POLICY`
(the vpc-cni add-on supports EKS Pod Identity; the pod identity agent runs on the host network, so it does not wait
for the CNI)."""

CONTROL_PLANE_LOG_TYPES = ("audit", "authenticator")
"""The audit trail: ``audit`` records every request to the API server by user (the Pod Security ``audit`` annotations,
the own-node admission policy's denials and the node agent's patches among them), ``authenticator`` every IAM
principal mapped to a Kubernetes identity (EKS user guide, "Send control plane logs to CloudWatch Logs"; off by
default). terraform-aws-eks enables ``audit``, ``api`` and ``authenticator`` by default; ``api`` (the API server's own
diagnostics) is left out as it records no actor."""
LOG_RETENTION_DAYS = 90
"""terraform-aws-eks ``cloudwatch_log_group_retention_in_days`` default (variables.tf): its module, like this one,
creates the group itself (``create_cloudwatch_log_group``), since EKS would create it never expiring."""
LOG_RETENTION_VALUES = (
    1,
    3,
    5,
    7,
    14,
    30,
    60,
    90,
    120,
    150,
    180,
    365,
    400,
    545,
    731,
    1096,
    1827,
    2192,
    2557,
    2922,
    3288,
    3653,
)
"""CloudWatch Logs PutRetentionPolicy ``retentionInDays`` values (API reference)."""
ADMIN_ACCESS_POLICY = "AmazonEKSClusterAdminPolicy"
"""EKS access policy like Kubernetes' cluster-admin: everything, port-forward to the Ray head included."""
VIEW_ACCESS_POLICY = "AmazonEKSAdminViewPolicy"
"""EKS access policy that can get/list/watch every resource cluster-wide (secrets too), and change nothing."""


def deployer_principal() -> str:
    """The IAM role or user ARN running ``pulumi up`` (an assumed-role session resolved to its role, path included).

    Used only to warn when the deployer has no access entry this stack makes (it could not reach the Kubernetes API):
    what the stack creates never depends on who runs it.
    """
    import pulumi_aws as aws

    arn = aws.get_caller_identity().arn
    return aws.iam.get_session_context(arn=arn).issuer_arn or arn


EKS_CLUSTER_TYPE = "aws:eks/cluster:Cluster"
ACCESS_CONFIG_DOC = "https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateAccessConfigRequest.html"


def no_creator_admin(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
    """Transform: create the EKS cluster with ``accessConfig.bootstrapClusterCreatorAdminPermissions: false``.

    pulumi-eks 4.4.0 hardcodes ``true`` on its ``aws:eks/cluster`` child (nodejs/eks/cluster/cluster.ts, "required
    for this component because it deploys charts") and does not expose it, so the field is set on that child. With
    ``true`` EKS gives whoever calls CreateCluster an admin entry this stack cannot see, and a stack that lists that
    principal gets 409 ResourceInUseException; with ``false`` every admin is one of the stack's own entries. The field
    is create-only (CreateAccessConfigRequest) and pulumi-eks ignores changes to it, so this applies only to clusters
    created with it; :class:`Cluster` adds it only then.
    """
    if args.type_ != EKS_CLUSTER_TYPE:
        return None
    access = dict(args.props.get("accessConfig") or {})
    access["bootstrapClusterCreatorAdminPermissions"] = False
    return pulumi.ResourceTransformResult(props={**args.props, "accessConfig": access}, opts=args.opts)


@dataclass(frozen=True)
class AccessPlan:
    """How the cluster's admins get in: EKS's creator entry or not, and who holds it."""

    creator_admin: bool
    creator_arn: str | None
    warnings: list[str] = field(default_factory=list)


def access_plan(
    cluster: str, admin_arns: list[str], viewer_arns: list[str], creator_arn: str | None, live: Any
) -> AccessPlan:
    """Decide the creator entry from EKS's state (``live``: components.live_cluster.LiveCluster or None), never from
    the caller, so every ``pulumi up`` declares the same access entries whoever runs it.

    - A cluster being created with principals listed: created without the creator entry (:func:`no_creator_admin`),
      every listed principal gets the stack's own entry, the deployer included.
    - Being created with none listed: EKS's default (the creator is the one admin; the stack makes no entry).
    - An existing cluster keeps what it was created with (the field is create-only). Created with the creator entry
      and principals listed: ``clusterCreatorArn`` must name the creator (EKS refuses a second entry for it, and the
      stack cannot read who it is); refused before any resource when it does not.

    Raises ArgError for a creator listed in ``viewer_arns`` (it is admin already), a missing ``creator_arn``, viewers
    without admins on a cluster being created, or no admin left on a cluster created without the creator entry.
    """

    listed = [*admin_arns, *viewer_arns]
    if live is None:
        if viewer_arns and not admin_arns:
            raise ArgError(
                "admin_arns",
                [],
                lambda n: (
                    f"is empty while {n('viewer_arns')} lists principals: a cluster created with access entries has no "
                    "hidden creator admin (bootstrapClusterCreatorAdminPermissions false), so list its admins too, "
                    "every principal that runs pulumi up among them"
                ),
            )
        plan = AccessPlan(not listed, None)
    elif not live.bootstrap_creator_admin:
        if not admin_arns:
            raise ArgError(
                "admin_arns",
                [],
                lambda n: (
                    f"cluster {cluster} was created without EKS's creator entry (bootstrapClusterCreatorAdminPermissions "
                    "false), so its admins are the stack's own entries: with none, nobody (whoever runs pulumi up "
                    "included) could reach its Kubernetes API. Keep at least one admin"
                ),
            )
        plan = AccessPlan(False, None)
    else:
        if listed and creator_arn is None:
            raise ArgError(
                "creator_arn",
                None,
                lambda n: (
                    f"cluster {cluster} was created with bootstrapClusterCreatorAdminPermissions: EKS holds an admin "
                    "access entry for the principal that created it and refuses a second one for it (409 "
                    "ResourceInUseException), and which principal that is cannot be read from the stack. Set "
                    f"{n('creator_arn')} to it (`aws eks list-access-entries --cluster-name {cluster}` lists it beside "
                    f"the stack's entries; {ACCESS_CONFIG_DOC})"
                ),
            )
        plan = AccessPlan(True, creator_arn)
    if plan.creator_admin and plan.creator_arn and plan.creator_arn in viewer_arns:
        raise ArgError(
            "viewer_arns",
            plan.creator_arn,
            lambda n: (
                "created the cluster, so EKS made it cluster admin (bootstrapClusterCreatorAdminPermissions); a viewer "
                "entry for it would be refused with 409 ResourceInUseException and this stack cannot make it read-only: "
                f"remove it from {n('viewer_arns')}, or delete its entry with `aws eks delete-access-entry` first"
            ),
        )
    if listed:
        caller = deployer_principal()
        may = set(admin_arns) | ({plan.creator_arn} if plan.creator_admin and plan.creator_arn else set())
        if caller not in may:
            plan.warnings.append(
                f"{caller} runs pulumi up but is not in clusterAdminArns"
                + (" (nor the cluster's creator)" if plan.creator_admin else "")
                + ": it gets no admin access entry, so the Kubernetes resources of this update fail with Unauthorized;"
                " add it to clusterAdminArns (docs/upgrades.md: who may run pulumi up)"
            )
    return plan


def access_policy_arn(policy: str, principal_arn: str) -> str:
    """``arn:<partition>:eks::aws:cluster-access-policy/<policy>``, in the principal's partition."""
    partition = principal_arn.split(":", 2)[1] if principal_arn.startswith("arn:") else "aws"
    return f"arn:{partition}:eks::aws:cluster-access-policy/{policy}"


@dataclass
class ClusterArgs:
    """Inputs of :class:`Cluster`."""

    vpc_id: pulumi.Input[str]
    """The VPC the cluster and its nodes live in (``Network.vpc_id``)."""
    public_subnet_ids: pulumi.Input[list[str]]
    """Public subnets (``Network.public_subnet_ids``), given to EKS with the private ones."""
    private_subnet_ids: pulumi.Input[list[str]]
    """Private subnets (``Network.private_subnet_ids``), where the nodes go."""
    kubernetes_version: str
    """EKS Kubernetes version, MAJOR.MINOR (one EKS still supports: cluster/eks_versions.py)."""
    endpoint_public_access_cidrs: list[str] = field(default_factory=lambda: ["0.0.0.0/0"])
    """Who may reach the public API endpoint; ignored when ``endpoint_public_access`` is off."""
    endpoint_public_access: bool = True
    """Off = private endpoint only: run Pulumi from inside the VPC (VPN, bastion, CI runner in the VPC)."""
    encrypt_secrets: bool = True
    """Envelope-encrypt Kubernetes secrets with a dedicated KMS key."""
    pod_identity_agent: bool = True
    """Install the ``eks-pod-identity-agent`` add-on so pods get IAM roles without the node role (always with
    ``cni_pod_identity``)."""
    cni_pod_identity: bool = True
    """Give the VPC CNI (``kube-system/aws-node``) its own role through Pod Identity, holding
    ``AmazonEKS_CNI_Policy``; False: that policy on the node role, as EKS's getting-started guide does."""
    enable_network_policy: bool = True
    """Turn on the VPC CNI's NetworkPolicy enforcement; without it NetworkPolicy objects are silently ignored."""
    network_policy_enforcing_mode: str = STRICT
    """The VPC CNI's ``NETWORK_POLICY_ENFORCING_MODE`` with enforcement on: ``strict``, a new pod is default-deny until
    its policies are applied (and stays so while no policy selects it: every namespace needs one,
    components/network/network_policies.py); ``standard``, default-allow until then (EKS user guide, "Restrict Pod network
    traffic with Kubernetes network policies", step 1)."""
    admin_arns: list[str] = field(default_factory=list)
    """IAM role/user ARNs that get an access entry with :data:`ADMIN_ACCESS_POLICY` (cluster scope)."""
    viewer_arns: list[str] = field(default_factory=list)
    """IAM role/user ARNs that get an access entry with :data:`VIEW_ACCESS_POLICY` (cluster scope)."""
    creator_admin: bool = True
    """The cluster has (or, being created, gets) EKS's admin entry for the principal that creates it
    (``bootstrapClusterCreatorAdminPermissions``). False: created without it (:func:`no_creator_admin`); only for a
    cluster being created, as EKS never changes the field afterwards."""
    creator_arn: str | None = None
    """With ``creator_admin``: the principal EKS holds that entry for. It gets no entry here (EKS would refuse a
    second one with 409 ResourceInUseException); never the caller of a later ``pulumi up``."""
    log_types: list[str] = field(default_factory=lambda: list(CONTROL_PLANE_LOG_TYPES))
    """EKS control-plane log types sent to CloudWatch Logs (``enabledClusterLogTypes``; [] turns logging off)."""
    log_retention_days: int = LOG_RETENTION_DAYS
    """Retention of the log group ``/aws/eks/<name>/cluster``, created here before the cluster (EKS would create it
    with no expiry)."""
    tags: dict[str, str] = field(default_factory=dict)
    """AWS tags on what the component creates (the cluster, its roles, KMS key and log group)."""


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
    """One per clusterAdminArns/clusterViewerArns principal (but the creator EKS already made one for): the same
    whoever runs ``pulumi up``."""
    access_grants: list[aws.eks.AccessPolicyAssociation]
    """The entries' policy associations: a principal reaches the Kubernetes API only once its association exists, so
    every Kubernetes provider of the stack (:attr:`provider`, and any other built on :attr:`kubeconfig`) depends on
    these."""

    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:index:Cluster", name, None, opts)
        if args.endpoint_public_access and any(c in ("0.0.0.0/0", "::/0") for c in args.endpoint_public_access_cidrs):
            pulumi.log.warn(
                f"Cluster {name}: the EKS API endpoint is open to the internet; set "
                "ray-efa-eks:endpointPublicAccessCidrs to your office/VPN/CI ranges",
                resource=self,
            )
        child = pulumi.ResourceOptions(parent=self)
        self.node_role = aws.iam.Role(
            f"{name}-node",
            assume_role_policy='{"Version":"2012-10-17","Statement":[{"Effect":"Allow",'
            '"Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}',
            tags=args.tags,
            opts=child,
        )
        for i, arn in enumerate(NODE_POLICIES if args.cni_pod_identity else (*NODE_POLICIES, CNI_POLICY)):
            aws.iam.RolePolicyAttachment(f"{name}-node-{i}", role=self.node_role.name, policy_arn=arn, opts=child)
        key_arn = None
        if args.encrypt_secrets:
            key = aws.kms.Key(
                f"{name}-secrets",
                description=f"{name} Kubernetes secrets envelope encryption",
                enable_key_rotation=True,
                tags=args.tags,
                opts=child,
            )
            key_arn = key.arn
        if args.log_retention_days not in LOG_RETENTION_VALUES:
            raise ValueError(
                f"Cluster {name}: log_retention_days {args.log_retention_days} is not a CloudWatch Logs "
                f"retention; use one of {LOG_RETENTION_VALUES}"
            )
        logs = []
        if args.log_types:  # before the cluster: EKS writes into an existing group and creates none
            logs.append(
                aws.cloudwatch.LogGroup(
                    f"{name}-control-plane-logs",
                    name=f"/aws/eks/{name}/cluster",
                    retention_in_days=args.log_retention_days,
                    tags=args.tags,
                    opts=child,
                )
            )
        self.eks = eks.Cluster(
            f"{name}-eks",
            enabled_cluster_log_types=list(args.log_types) or None,
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
            vpc_cni_options=eks.VpcCniOptionsArgs(
                enable_network_policy=args.enable_network_policy,
                configuration_values=cni_configuration(args.network_policy_enforcing_mode)
                if args.enable_network_policy
                else None,
            ),
            encryption_config_key_arn=key_arn,
            name=name,
            tags=args.tags,
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=logs, transforms=None if args.creator_admin else [no_creator_admin]
            ),
        )
        self.name = pulumi.Output.from_input(name)
        self.kubeconfig = self.eks.kubeconfig
        # The EKS-managed cluster SG: pulumi-eks puts the EFA interfaces in this one.
        described = aws.eks.get_cluster_output(name=name, opts=pulumi.InvokeOutputOptions(depends_on=[self.eks]))
        self.security_group_id = described.vpc_config.cluster_security_group_id
        self.arn = described.arn
        self.addons: list[pulumi.CustomResource] = []
        if args.pod_identity_agent or args.cni_pod_identity:
            self.addons.append(
                aws.eks.Addon(
                    f"{name}-pod-identity-agent",
                    cluster_name=name,
                    addon_name="eks-pod-identity-agent",
                    tags=args.tags,
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[self.eks]),
                )
            )
        if args.cni_pod_identity:
            ns, sa = CNI_SERVICE_ACCOUNT
            account_id = aws.get_caller_identity_output(opts=pulumi.InvokeOutputOptions(parent=self)).account_id
            trust = pulumi.Output.all(account_id, self.arn).apply(
                lambda a: pod_identity_trust_policy(a[0], a[1], ns, sa)
            )
            cni_role = aws.iam.Role(
                f"{name}-vpc-cni",
                assume_role_policy=trust,
                tags=args.tags,
                description=f"{name}: the VPC CNI ({ns}/{sa}), AmazonEKS_CNI_Policy",
                opts=child,
            )
            attach = aws.iam.RolePolicyAttachment(
                f"{name}-vpc-cni", role=cni_role.name, policy_arn=CNI_POLICY, opts=child
            )
            self.addons.append(
                aws.eks.PodIdentityAssociation(
                    f"{name}-vpc-cni",
                    cluster_name=name,
                    namespace=ns,
                    service_account=sa,
                    role_arn=cni_role.arn,
                    tags=args.tags,
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[self.eks, attach]),
                )
            )
        self.access_entries = []
        grants: list[pulumi.Resource] = []
        for policy, arns in ((ADMIN_ACCESS_POLICY, args.admin_arns), (VIEW_ACCESS_POLICY, args.viewer_arns)):
            role = "admin" if policy == ADMIN_ACCESS_POLICY else "viewer"
            for arn in arns:
                if args.creator_admin and arn == args.creator_arn:
                    continue  # EKS made its entry when it created the cluster
                # Named by the ARN, not its position: reordering the list replaces nothing.
                suffix = hashlib.sha256(arn.encode()).hexdigest()[:8]
                after_eks = pulumi.ResourceOptions(parent=self, depends_on=[self.eks])
                entry = aws.eks.AccessEntry(
                    f"{name}-{role}-{suffix}",
                    cluster_name=name,
                    principal_arn=arn,
                    type="STANDARD",
                    tags=args.tags,
                    opts=after_eks,
                )
                grants.append(
                    aws.eks.AccessPolicyAssociation(
                        f"{name}-{role}-{suffix}",
                        cluster_name=name,
                        principal_arn=entry.principal_arn,
                        policy_arn=access_policy_arn(policy, arn),
                        access_scope={"type": "cluster"},
                        opts=pulumi.ResourceOptions(parent=self, depends_on=[entry]),
                    )
                )
                self.access_entries.append(entry)
        # The deployer reaches the Kubernetes API through its entry: no Kubernetes call before the entries exist.
        self.access_grants = grants
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.eks.kubeconfig_json,
            enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=grants),
        )
        if args.enable_network_policy:  # strict mode denies a pod no policy selects: CoreDNS and the charts' pods
            in_kube_system = pulumi.ResourceOptions(parent=self, provider=self.provider)
            for policy, spec in (
                ("kube-system-ingress", allow_all_ingress()),
                ("kube-system-egress", allow_all_egress()),
            ):
                k8s.networking.v1.NetworkPolicy(
                    f"{name}-{policy}",
                    metadata={"name": f"ray-efa-eks-{policy}", "namespace": KUBE_SYSTEM},
                    spec=spec,
                    opts=in_kube_system,
                )
        self.register_outputs({"name": self.name, "securityGroupId": self.security_group_id})
