"""PodStorageAccess: an IAM role for the Ray pods' service account through EKS Pod Identity.

The pods get S3 rights from their own role, bound to one service account by a
pod identity association (the ``eks-pod-identity-agent`` add-on serves the
credentials on the node); the node role gets none, and IMDS hop limit 1 keeps
pods from borrowing it. The role may read and write one prefix of one bucket
and use the bucket's KMS key only through S3.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from ..storage.storage_rules import check_prefix

OBJECT_ACTIONS = (
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
)
KMS_ACTIONS = ("kms:Decrypt", "kms:GenerateDataKey")


def pod_identity_trust_policy(account_id: str, cluster_arn: str, namespace: str, service_account: str) -> str:
    """Trust EKS Pod Identity for one service account of one cluster of this account.

    Scoped by the session tags Pod Identity adds to its AssumeRole request (EKS user guide, "Create IAM role with
    trust policy required by EKS Pod Identity", https://docs.aws.amazon.com/eks/latest/userguide/pod-id-role.html,
    and "pod-id-abac": eks-cluster-arn, kubernetes-namespace, kubernetes-service-account) plus ``aws:SourceAccount``.
    No ``aws:SourceArn``: no document says Pod Identity sends it, and a condition on a key that is absent denies
    every AssumeRole.
    """
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": "pods.eks.amazonaws.com"},
                    "Action": ["sts:AssumeRole", "sts:TagSession"],
                    "Condition": {
                        "StringEquals": {
                            "aws:SourceAccount": account_id,
                            "aws:RequestTag/eks-cluster-arn": cluster_arn,
                            "aws:RequestTag/kubernetes-namespace": namespace,
                            "aws:RequestTag/kubernetes-service-account": service_account,
                        }
                    },
                }
            ],
        }
    )


def bucket_prefix_policy(
    bucket_arn: str, prefix: str, kms_key_arn: str | None = None, region: str | None = None
) -> str:
    """Read/write ``bucket/prefix/*`` and nothing else.

    Listing is limited to the prefix with ``StringLikeIfExists``: pyarrow's
    S3 filesystem (Ray Train's storage layer) calls HeadBucket before it
    creates a run directory, and S3 authorizes HeadBucket as ``s3:ListBucket``
    *without* an ``s3:prefix`` key, so a plain ``StringLike`` would break
    checkpointing. Object reads and writes are confined to the prefix.
    """
    check_prefix(prefix)
    statements = [
        {
            "Sid": "ListOwnPrefix",
            "Effect": "Allow",
            "Action": "s3:ListBucket",
            "Resource": bucket_arn,
            "Condition": {"StringLikeIfExists": {"s3:prefix": [prefix, f"{prefix}/*"]}},
        },
        {
            "Sid": "ReadWriteOwnPrefix",
            "Effect": "Allow",
            "Action": list(OBJECT_ACTIONS),
            "Resource": f"{bucket_arn}/{prefix}/*",
        },
    ]
    if kms_key_arn:
        kms = {"Sid": "UseBucketKeyThroughS3", "Effect": "Allow", "Action": list(KMS_ACTIONS), "Resource": kms_key_arn}
        if region:
            kms["Condition"] = {"StringEquals": {"kms:ViaService": f"s3.{region}.amazonaws.com"}}
        statements.append(kms)
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


@dataclass
class PodStorageAccessArgs:
    """Inputs of :class:`PodStorageAccess`."""

    cluster_name: pulumi.Input[str]
    """The EKS cluster the Pod Identity association belongs to."""
    cluster_arn: pulumi.Input[str]
    """Its ARN: the role's trust policy admits ``pods.eks.amazonaws.com`` for this cluster only."""
    namespace: str
    """Namespace of ``service_account`` (the association binds that namespace and account only)."""
    service_account: str
    """The Kubernetes service account the Ray pods run as (the association binds exactly this one)."""
    bucket_name: pulumi.Input[str]
    """The checkpoint bucket; ``storage_uri`` is ``s3://<bucket_name>/<prefix>``."""
    bucket_arn: pulumi.Input[str]
    """Its ARN: the policy grants list, read and write under ``prefix`` and nothing else."""
    prefix: str = "ray-train"
    """The key prefix the pods may use (S3 key grammar, no leading or trailing ``/``)."""
    kms_key_arn: pulumi.Input[str] | None = None
    """The bucket's KMS key (SSE-KMS): the role may use it through S3 only; None: SSE-S3, no KMS grant."""
    region: str | None = None
    """The bucket's region, for the KMS grant's ``kms:ViaService`` condition (``s3.<region>.amazonaws.com``)."""
    tags: dict[str, str] = field(default_factory=dict)
    """AWS tags on the IAM role."""


class PodStorageAccess(pulumi.ComponentResource):
    """IAM role (bucket prefix only) + EKS pod identity association for one service account."""

    role: aws.iam.Role
    association: aws.eks.PodIdentityAssociation
    storage_uri: pulumi.Output[str]
    """``s3://<bucket>/<prefix>``: the RunConfig.storage_path the pods should use."""

    def __init__(self, name: str, args: PodStorageAccessArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:index:PodStorageAccess", name, None, opts)
        check_prefix(args.prefix)
        child = pulumi.ResourceOptions(parent=self)
        account_id = aws.get_caller_identity_output(opts=pulumi.InvokeOutputOptions(parent=self)).account_id
        trust = pulumi.Output.all(account_id, args.cluster_arn).apply(
            lambda a: pod_identity_trust_policy(a[0], a[1], args.namespace, args.service_account)
        )
        self.role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=trust,
            description=f"Ray pods ({args.namespace}/{args.service_account}): checkpoint storage",
            tags=args.tags,
            opts=child,
        )
        policy = pulumi.Output.all(args.bucket_arn, args.kms_key_arn).apply(
            lambda a: bucket_prefix_policy(a[0], args.prefix, a[1], args.region)
        )
        aws.iam.RolePolicy(f"{name}-bucket-prefix", role=self.role.id, policy=policy, opts=child)
        self.association = aws.eks.PodIdentityAssociation(
            f"{name}-association",
            cluster_name=args.cluster_name,
            namespace=args.namespace,
            service_account=args.service_account,
            role_arn=self.role.arn,
            tags=args.tags,
            opts=child,
        )
        self.storage_uri = pulumi.Output.concat("s3://", args.bucket_name, "/", args.prefix)
        self.register_outputs({"roleArn": self.role.arn, "storageUri": self.storage_uri})
