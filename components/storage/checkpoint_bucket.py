"""CheckpointBucket: durable, private S3 storage for Ray Train (``RunConfig.storage_path``).

Every Ray node must reach the same storage, and it must outlive the pods: a
pod-local path loses the checkpoints with the pod. The bucket is versioned
(an overwritten or deleted checkpoint can be recovered), encrypted, closed to
the public, TLS-only, and by default *retained* on ``pulumi destroy`` so the
GPU teardown in the runbook can never take a day of training with it. When it
is encrypted with its own KMS key, the key is retained too: a retained bucket
whose key was deleted is unreadable. Every setting that protects the bucket (public
access block, ownership controls, TLS-only policy, default encryption, versioning,
lifecycle) is its own resource and is retained with it: deleting them on destroy
would leave a bucket less protected than the one that was deployed.

``retain_on_delete`` is a resource option stored in the state by ``pulumi up``:
changing the config right before ``pulumi destroy`` changes nothing; run ``pulumi up``
after the change, then destroy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from .storage_rules import ENCRYPTIONS


@dataclass
class CheckpointBucketArgs:
    """Inputs of :class:`CheckpointBucket`."""

    encryption: str = "kms"
    """``kms``: SSE-KMS with a dedicated, rotating key (and an S3 bucket key to keep KMS calls cheap);
    ``s3``: SSE-S3 (AES256)."""
    retain_on_delete: bool = True
    """Keep the bucket (and its key) when the stack is destroyed; False deletes them, objects included."""
    noncurrent_version_days: int = 30
    """Delete overwritten/deleted object versions after this many days."""
    abort_multipart_days: int = 7
    """Abort incomplete multipart uploads (half-written checkpoint shards) after this many days."""
    tags: dict[str, str] = field(default_factory=dict)
    """AWS tags on the bucket and its KMS key."""

    def validate(self, name: str) -> None:
        if self.encryption not in ENCRYPTIONS:
            raise ValueError(f"CheckpointBucket {name}: encryption {self.encryption!r} must be one of {ENCRYPTIONS}")
        if self.noncurrent_version_days < 1 or self.abort_multipart_days < 1:
            raise ValueError(f"CheckpointBucket {name}: lifecycle days must be >= 1")


def tls_only_policy(bucket_arn: str) -> str:
    """Bucket policy that denies every request not made over TLS."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "DenyInsecureTransport",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "s3:*",
                    "Resource": [bucket_arn, f"{bucket_arn}/*"],
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                }
            ],
        }
    )


class CheckpointBucket(pulumi.ComponentResource):
    """Versioned, encrypted, private, TLS-only S3 bucket, retained on delete by default."""

    bucket: aws.s3.Bucket
    name: pulumi.Output[str]
    arn: pulumi.Output[str]
    kms_key_arn: pulumi.Output[str] | None
    """The SSE-KMS key (None with SSE-S3): readers and writers need kms:Decrypt/GenerateDataKey on it."""

    def __init__(self, name: str, args: CheckpointBucketArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:index:CheckpointBucket", name, None, opts)
        args.validate(name)
        keep = pulumi.ResourceOptions(parent=self, retain_on_delete=args.retain_on_delete)
        self.kms_key_arn = None
        if args.encryption == "kms":
            key = aws.kms.Key(
                f"{name}-key",
                description=f"{name}: Ray Train checkpoints (SSE-KMS)",
                enable_key_rotation=True,
                deletion_window_in_days=30,
                tags=args.tags,
                opts=keep,
            )
            self.kms_key_arn = key.arn
            default = {"sse_algorithm": "aws:kms", "kms_master_key_id": key.arn}
        else:
            default = {"sse_algorithm": "AES256"}
        self.bucket = aws.s3.Bucket(name, force_destroy=not args.retain_on_delete, tags=args.tags, opts=keep)
        bucket_id = self.bucket.id
        aws.s3.BucketOwnershipControls(
            f"{name}-ownership", bucket=bucket_id, rule={"object_ownership": "BucketOwnerEnforced"}, opts=keep
        )
        public_block = aws.s3.BucketPublicAccessBlock(
            f"{name}-public-access-block",
            bucket=bucket_id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=keep,
        )
        aws.s3.BucketVersioning(
            f"{name}-versioning", bucket=bucket_id, versioning_configuration={"status": "Enabled"}, opts=keep
        )
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-encryption",
            bucket=bucket_id,
            rules=[
                {"apply_server_side_encryption_by_default": default, "bucket_key_enabled": args.encryption == "kms"}
            ],
            opts=keep,
        )
        aws.s3.BucketLifecycleConfiguration(
            f"{name}-lifecycle",
            bucket=bucket_id,
            rules=[
                {
                    "id": "expire-old-versions",
                    "status": "Enabled",
                    "filter": {"prefix": ""},
                    "noncurrent_version_expiration": {"noncurrent_days": args.noncurrent_version_days},
                    "abort_incomplete_multipart_upload": {"days_after_initiation": args.abort_multipart_days},
                }
            ],
            opts=keep,
        )
        aws.s3.BucketPolicy(
            f"{name}-tls-only",
            bucket=bucket_id,
            policy=self.bucket.arn.apply(tls_only_policy),
            opts=pulumi.ResourceOptions.merge(keep, pulumi.ResourceOptions(depends_on=[public_block])),
        )
        self.name = self.bucket.bucket
        self.arn = self.bucket.arn
        self.register_outputs({"name": self.name, "arn": self.arn})
