"""Node hardening that pulumi-eks does not expose: IMDS hop limit and root-volume encryption.

pulumi-eks builds the managed node group's launch template itself
(``createMNGCustomLaunchTemplate`` in nodejs/eks/nodes/nodegroup.ts) and
refuses a user launch template together with ``enableEfaSupport``. With
``enableIMDSv2`` it writes ``metadataOptions`` with ``httpPutResponseHopLimit: 2``
(hard-coded) and, with ``diskSize``, one ``blockDeviceMappings`` entry whose
``ebs`` carries only ``volumeSize``. Hop limit 2 lets every pod reach the
instance role through IMDS; an unencrypted root volume holds image layers and
anything a pod writes to ``emptyDir``.

Rather than re-implement the EFA launch template, we keep pulumi-eks's and
patch it with a Pulumi *transform*: transforms, unlike the older
transformations, run on the children of packaged (multi-language) components,
so the engine calls :func:`harden_launch_template` for the
``aws:ec2/launchTemplate:LaunchTemplate`` that pulumi-eks registers. Props
arrive with engine (camelCase) names.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pulumi

LAUNCH_TEMPLATE_TYPE = "aws:ec2/launchTemplate:LaunchTemplate"


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

    def apply(self, props: dict[str, Any]) -> dict[str, Any]:
        """Launch-template props (engine names) with IMDSv2 required, the hop limit and encrypted EBS."""
        out = copy.deepcopy(dict(props))
        meta = dict(out.get("metadataOptions") or {})
        meta.update(httpEndpoint="enabled", httpTokens="required", httpPutResponseHopLimit=self.imds_hop_limit)
        out["metadataOptions"] = meta
        if self.encrypt_root_volume:
            mappings = out.get("blockDeviceMappings")
            if not isinstance(mappings, list) or not mappings:
                # pulumi-eks only writes mappings when diskSize is set; without one the AMI's
                # unencrypted snapshot would be used silently, so refuse.
                raise ValueError("launch template has no blockDeviceMappings to encrypt; "
                                 "pass disk_size to the node group (pulumi-eks writes the root mapping from it)")
            patched = []
            for m in mappings:
                m = dict(m)
                ebs = dict(m.get("ebs") or {})
                ebs["encrypted"] = "true"  # the provider types this field as a string
                if self.kms_key_id:
                    ebs["kmsKeyId"] = self.kms_key_id
                m["ebs"] = ebs
                patched.append(m)
            out["blockDeviceMappings"] = patched
        return out

    def transform(self) -> pulumi.ResourceTransform:
        """A transform for a node group's ResourceOptions: patches only its launch template."""

        def harden_launch_template(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
            if args.type_ != LAUNCH_TEMPLATE_TYPE:
                return None
            return pulumi.ResourceTransformResult(props=self.apply(args.props), opts=args.opts)

        harden_launch_template.hardening = self  # type: ignore[attr-defined]  # lets tests and the plan read it
        return harden_launch_template
