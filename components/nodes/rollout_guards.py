"""Resource hooks that stop (or announce) the updates EKS and KubeRay carry out destructively.

The program alone cannot see what a ``pulumi up`` changes: it knows the new config, not the deployed one. The engine
does: before it updates a resource in place it runs the resource's ``before_update`` hooks with the old and the new
inputs (pulumi/pulumi pkg/resource/deploy/step.go ``UpdateStep.Apply`` -> ``Deployment.RunHooks``), during a preview
too when the hook says ``on_dry_run`` (deployment.go ``RunHooks``: ``if d.opts.DryRun && !hook.OnDryRun {continue}``),
and an error from a ``before_`` hook fails that step. So ``pulumi preview`` and ``pulumi up`` (which previews first)
refuse here, before anything changes; ``pulumi up --skip-preview`` refuses at the launch template's own step.

What the hooks read is recorded on the launch templates themselves, as tags (:func:`template_tags`): the GPU nodes
the group runs, its capacity mode and the Kubernetes version of its nodes. A tag change is not a template change:
the AWS provider creates a new template version only for the template's data (terraform-provider-aws
internal/service/ec2/ec2_launch_template.go ``resourceLaunchTemplateUpdate``: ``updateKeys`` leaves out ``tags``), so
recording them never rolls a node. The managed node group follows the template's ``latestVersion``; a new version
makes EKS replace every node of the group ("Customize managed nodes with launch templates"; "Managed node update
behavior": a rolling update that launches new nodes first, then drains and terminates the old ones).

* GPU template, Capacity Block (and an ODCR): refused while the group runs nodes. EKS: "When upgrading a managed
  node group with Capacity Blocks, make sure that you set the desired size of the node group to 0" ("Create a managed
  node group with Capacity Blocks for ML", https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html);
  the rolling update's surge nodes have no room in a block or a fully used ODCR. Parking in the same ``up`` does not
  help: the AWS provider sends the version update before the scaling update (terraform-provider-aws
  internal/service/eks/node_group.go ``resourceNodeGroupUpdate``: "Do any version update first"), so the group must
  already be parked (its recorded node count 0) when the template changes.
* GPU template, fixed fleet (not gpuScaleToZero, whose autoscaler removes idle workers only), fewer nodes (``gpuNodeCount`` N -> M, 0 < M < N): refused unless
  ``gpuWorkersToDelete`` names N - M worker pods (the documented procedure, docs/upgrades.md): EKS terminates
  instances of its own choice when the desired size drops, PodDisruptionBudgets not respected ("Managed node update
  behavior", scale down), and KubeRay without the in-tree autoscaler deletes the first pods of its list
  (ray-operator/controllers/ray/raycluster_controller.go v1.7.0 lines 1219-1241, "Randomly deleting Pod").
* GPU template, on demand, with nodes: a warning (every GPU node is replaced; running jobs lose their workers).
* System template: a warning: the Ray head moves with the node, and every running job stops.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import pulumi

TAG_ROLE = "ray-efa-eks/node-role"
TAG_NODES = "ray-efa-eks/nodes"
"""The desired size the group was given with this template (the GPU group's gpuNodeCount)."""
TAG_CAPACITY = "ray-efa-eks/capacity"
"""on-demand | reservation | capacity-block."""
TAG_KUBERNETES = "ray-efa-eks/kubernetes-version"
"""The Kubernetes version the stack runs: a node group version update rolls nodes as a template change does."""
TAG_SCALING = "ray-efa-eks/scaling"
"""fixed | autoscaled (gpuScaleToZero: Ray's autoscaler removes idle workers itself, so no scale-down guard)."""
TAG_WORKERS_TO_DELETE = "ray-efa-eks/workers-to-delete"
"""How many worker pods this update names in KubeRay's ``workersToDelete`` (gpuWorkersToDelete)."""
NOT_DATA = {"tags", "tagsAll", "__defaults"}
"""Launch template inputs that do not make a new template version."""
RESERVED = ("reservation", "capacity-block")


class RolloutRefused(Exception):
    """An update EKS would refuse or carry out destructively; the message names the fix."""


def template_tags(
    role: str, nodes: int, capacity: str, kubernetes_version: str, workers_to_delete: int = 0, autoscaled: bool = False
) -> dict[str, str]:
    """The tags that record, on a node launch template, what its node group runs."""
    tags = {
        TAG_ROLE: role,
        TAG_NODES: str(nodes),
        TAG_CAPACITY: capacity,
        TAG_KUBERNETES: kubernetes_version,
        TAG_SCALING: "autoscaled" if autoscaled else "fixed",
    }
    if workers_to_delete:
        tags[TAG_WORKERS_TO_DELETE] = str(workers_to_delete)
    return tags


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=lambda o: f"<{type(o).__name__}>"))


def template_changes(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[str]:
    """Launch template inputs whose change makes a new template version (tags do not)."""
    old, new = dict(old or {}), dict(new or {})
    keys = (set(old) | set(new)) - NOT_DATA
    return sorted(k for k in keys if _plain(old.get(k)) != _plain(new.get(k)))


def _tags(inputs: Mapping[str, Any] | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in dict((inputs or {}).get("tags") or {}).items()}


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def rolls(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[str]:
    """Why this update replaces every node of the group: the template's data, or the nodes' Kubernetes version."""
    why = template_changes(old, new)
    before, after = _tags(old).get(TAG_KUBERNETES), _tags(new).get(TAG_KUBERNETES)
    if before and after and before != after:
        why.append(f"Kubernetes version {before} -> {after}")
    return why


def gpu_update(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> tuple[list[str], list[str]]:
    """(refusals, warnings) for an update of the GPU launch template from ``old`` to ``new`` inputs."""
    told, tnew = _tags(old), _tags(new)
    running = _int(told.get(TAG_NODES))
    after = _int(tnew.get(TAG_NODES))
    capacity = tnew.get(TAG_CAPACITY) or told.get(TAG_CAPACITY) or "on-demand"
    why = rolls(old, new)
    refusals: list[str] = []
    warnings: list[str] = []
    if why and capacity in RESERVED and running != 0:
        have = f"{running} node(s)" if running is not None else "nodes (the template records no count: an older stack)"
        refusals.append(
            f"GPU node group ({capacity}) would roll onto a new launch template ({', '.join(why)}) while it runs {have}: "
            "EKS wants a Capacity Block group at desired size 0 before it is upgraded (EKS user guide, \"Create a "
            "managed node group with Capacity Blocks for ML\"), and a rolling update's new nodes have no room in a "
            "block or a fully used reservation. Fix: revert this change, `pulumi config set --type int gpuNodeCount 0 "
            "&& pulumi up` (parks the group), then apply the change with gpuNodeCount 0, then raise gpuNodeCount again "
            "(docs/gpus.md: Capacity Block parking)"
        )
    elif why and running:
        warnings.append(
            f"GPU launch template changes ({', '.join(why)}): EKS replaces all {running} GPU node(s) (a rolling "
            "update: new nodes first, then the old ones are drained and terminated); running Ray jobs lose their "
            "workers and resume from their last checkpoint when resubmitted with the same --name; the EFA gate runs "
            "again on the new nodes (docs/upgrades.md)"
        )
    if not refusals and tnew.get(TAG_SCALING) != "autoscaled":  # the autoscaled fleet removes idle workers itself
        if running and after and after < running:
            named = _int(tnew.get(TAG_WORKERS_TO_DELETE)) or 0
            if named != running - after:
                refusals.append(
                    f"gpuNodeCount {running} -> {after}: EKS terminates instances of its own choice when the desired "
                    "size drops (EKS user guide, \"Managed node update behavior\": PodDisruptionBudgets are not "
                    "respected when reducing the desired count) and KubeRay deletes the first worker pods of its list "
                    "(raycluster_controller.go v1.7.0, random pod deletion without the autoscaler), so a running job "
                    f"can lose a worker on a node that stays. gpuWorkersToDelete names {named} pod(s), not "
                    f"{running - after}. Fix: follow docs/upgrades.md \"Scaling the GPU fleet down\" (cordon the idle "
                    "nodes, terminate them with --should-decrement-desired-capacity, name the pods KubeRay recreated "
                    "in gpuWorkersToDelete), or park the group (gpuNodeCount 0) when no job needs to survive"
                )
    return refusals, warnings


def system_update(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[str]:
    """Warnings for an update of the system launch template."""
    why = rolls(old, new)
    if not why:
        return []
    return [
        f"system launch template changes ({', '.join(why)}): EKS replaces the system node, so the KubeRay "
        "operator and the Ray head move to a new node; every running Ray job stops (the head holds the job "
        "table and the GCS), the workers reconnect to the new head, and the EFA gate runs again. Checkpoints in "
        "S3 survive: resubmit with the same --name to resume (docs/upgrades.md: what survives)"
    ]


def _check_gpu(args: pulumi.ResourceHookArgs) -> None:
    refusals, warnings = gpu_update(args.old_inputs, args.new_inputs)
    for w in warnings:
        pulumi.log.warn(w)
    if refusals:
        raise RolloutRefused(" | ".join(refusals))


def _check_system(args: pulumi.ResourceHookArgs) -> None:
    for w in system_update(args.old_inputs, args.new_inputs):
        pulumi.log.warn(w)


def gpu_template_hooks(name: str) -> pulumi.ResourceHookBinding:
    """``before_update`` on the GPU launch template: refuses per :func:`gpu_update`, in previews too."""
    hook = pulumi.ResourceHook(f"{name}-rollout-guard", _check_gpu, pulumi.ResourceHookOptions(on_dry_run=True))
    return pulumi.ResourceHookBinding(before_update=[hook])


def system_template_hooks(name: str) -> pulumi.ResourceHookBinding:
    """``before_update`` on the system launch template: warns per :func:`system_update`, in previews too."""
    hook = pulumi.ResourceHook(f"{name}-rollout-note", _check_system, pulumi.ResourceHookOptions(on_dry_run=True))
    return pulumi.ResourceHookBinding(before_update=[hook])
