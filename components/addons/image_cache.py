"""The DLC image from the account's own registry: an ECR pull-through cache rule for Amazon ECR Public.

A GPU node from zero pulls the tens-of-GB DLC. From ``public.ecr.aws`` the layers come from outside the VPC, through
the NAT gateway at its per-GB rate; from the account's private registry they come through the ECR interface
endpoints (components/network/network.py) and the S3 gateway endpoint (ECR serves layers from S3). A pull-through cache
rule makes ``<account>.dkr.ecr.<region>.amazonaws.com/<prefix>/<upstream repository>:<tag>`` (prefix
``<stack>-ecr-public``, :func:`cache_prefix`) a private copy of the
public image, created on the first pull (ECR user guide, "Sync an upstream registry with an Amazon ECR private
registry", https://docs.aws.amazon.com/AmazonECR/latest/userguide/pull-through-cache.html; the reference form:
"Pulling an image with a pull through cache rule", pull-through-cache-working.html). ECR Public needs no
credentials (CreatePullThroughCacheRule: ``public.ecr.aws`` is the ``ecr-public`` upstream).

The first pull through the rule is the one that creates the repository and imports the image, so whoever pulls first
needs ``ecr:CreateRepository`` and ``ecr:BatchImportUpstreamImage`` besides the usual pull actions ("IAM permissions
required to sync an upstream registry with an Amazon ECR private registry", pull-through-cache-iam.html): the node
role gets them, scoped to the rule's prefix. The deploy pulls first: the Ray head on the system node runs the same
reference, so the cache is filled before any GPU worker pulls it (docs/gpus.md, "Cold start").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

UPSTREAM_REGISTRY = "public.ecr.aws"
"""Amazon ECR Public: the DLC's registry and a pull-through upstream that needs no credentials."""
CACHE_PREFIX = "ecr-public"
"""The console's default prefix for ECR Public; a stack's rule is :func:`cache_prefix` (ECR appends ``/``)."""
PREFIX_MAX = 30
"""CreatePullThroughCacheRule ``ecrRepositoryPrefix``: 2-30 characters, lowercase alphanumerics separated by . _ -."""


def cache_prefix(stack: str) -> str:
    """``<stack>-ecr-public``: a rule's prefix is unique in an account and region (a second rule for the same prefix is
    refused), so each stack gets its own, within ECR's 30 characters and its character set."""
    base = re.sub(r"[^a-z0-9]+", "-", stack.lower()).strip("-")[: PREFIX_MAX - len(CACHE_PREFIX) - 1].rstrip("-")
    return f"{base}-{CACHE_PREFIX}" if base else CACHE_PREFIX


IMPORT_ACTIONS = ("ecr:BatchImportUpstreamImage", "ecr:CreateRepository")
"""What the first pull through the rule needs beyond pulling (pull-through-cache-iam.html)."""


def registry_host(account_id: str, region: str) -> str:
    """The account's private registry in ``region``."""
    return f"{account_id}.dkr.ecr.{region}.amazonaws.com"


def cached_reference(image: str, account_id: str, region: str, prefix: str = CACHE_PREFIX) -> str:
    """``image`` as the account's pull-through copy when it comes from ECR Public; any other registry unchanged."""
    head = UPSTREAM_REGISTRY + "/"
    if not image.startswith(head):
        return image
    return f"{registry_host(account_id, region)}/{prefix}/{image[len(head) :]}"


def import_policy(account_id: str, region: str, prefix: str = CACHE_PREFIX) -> str:
    """The node role's extra actions, on the rule's repositories only."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "PullThroughCacheImport",
                    "Effect": "Allow",
                    "Action": list(IMPORT_ACTIONS),
                    "Resource": f"arn:aws:ecr:{region}:{account_id}:repository/{prefix}/*",
                }
            ],
        }
    )


@dataclass
class ImageCacheArgs:
    """Inputs of :class:`ImageCache`."""

    account_id: str
    """The account whose private registry caches the image."""
    region: str
    """The registry's region (the stack's)."""
    node_role_name: pulumi.Input[str]
    """The IAM role of the nodes that pull first (they create the cached repository)."""
    prefix: str = CACHE_PREFIX
    """The rule's repository prefix."""


class ImageCache(pulumi.ComponentResource):
    """The pull-through cache rule for ECR Public and the node role's right to fill it."""

    rule: aws.ecr.PullThroughCacheRule

    def __init__(self, name: str, args: ImageCacheArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:index:ImageCache", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.rule = aws.ecr.PullThroughCacheRule(
            f"{name}-ecr-public", ecr_repository_prefix=args.prefix, upstream_registry_url=UPSTREAM_REGISTRY, opts=child
        )
        aws.iam.RolePolicy(
            f"{name}-node-import",
            role=args.node_role_name,
            policy=import_policy(args.account_id, args.region, args.prefix),
            opts=child,
        )
        self.register_outputs({"prefix": args.prefix})
