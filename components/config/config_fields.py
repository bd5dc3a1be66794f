"""How a ``StackConfig`` key is declared: its default, the values it allows, and what changing it does to a live stack.

Each key of :class:`~.config.StackConfig` is declared with :func:`key`, so the three facts a reader of the
configuration reference needs sit next to the key (the description is the docstring under it). The reference page
(docs/configuration.md), ``Pulumi.yaml`` and ``EfaRayClusterArgs`` are generated from these declarations by
``ray-efa-eks config-schema --write``; a key declared without a :class:`Live` note is refused by the generator and
by a test, naming the key.

The effects a note lists are the ones the offline change rehearsal can see (tests/components/test_config_reference.py
runs the program before and after a change and checks the declared effects against the registrations); what only
AWS decides (a property that forces a new VPC or cluster) is said in the note's text with its source.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field
from typing import Any, Callable

EFFECTS: dict[str, tuple[str, str]] = {
    "gpu-nodes": ("replaces GPU nodes", "a new GPU launch template version or node group: EKS replaces every GPU node"),
    "system-node": (
        "replaces the system node",
        "a new system launch template version or node group: the Ray head and "
        "the KubeRay operator restart on the new node, so a running job stops",
    ),
    "ray-pods": (
        "recreates Ray pods",
        "KubeRay (`upgradeStrategy: Recreate`) deletes every Ray pod and creates it from "
        "the new spec: a running job stops; submit it again with the same `--name` to resume",
    ),
    "scale": ("scales", "adds or removes GPU nodes and Ray workers; the running pods stay"),
    "gate": ("re-runs the gate", "a new EFA gate Job: `pulumi up` waits for its verdict again"),
    "network": ("changes the network", "the VPC or its subnets change (read the note: AWS replaces some of them)"),
    "cluster": (
        "changes the cluster",
        "the EKS cluster changes in a way AWS may refuse on a live cluster (read the note)",
    ),
    "in-place": ("in place", "other resources are updated, created or deleted; nodes and Ray pods keep running"),
    "none": ("nothing", "no resource changes: the value is read by validation only"),
}
"""Effect name -> (label, what it means on the next ``pulumi up``), in the order the reference lists them."""


@dataclass(frozen=True)
class Live:
    """What the next ``pulumi up`` does to a deployed stack when this key changes.

    ``effects`` are names from :data:`EFFECTS`; ``note`` says what they leave out: a safe order of steps, what AWS
    replaces on its own, a source.
    """

    effects: tuple[str, ...]
    note: str = ""

    def __post_init__(self) -> None:
        unknown = [e for e in self.effects if e not in EFFECTS]
        if unknown or not self.effects:
            raise ValueError(f"Live effects must be one or more of {', '.join(EFFECTS)}; got {self.effects!r}")


def live(*effects: str, note: str = "") -> Live:
    """``live("gpu-nodes", note="park first in a reservation")``: see :class:`Live`."""
    return Live(tuple(effects), note)


def key(
    default: Any = MISSING,
    *,
    factory: Callable[[], Any] | None = None,
    live: Live | None = None,
    allowed: str | tuple[str, ...] | None = None,
) -> Any:
    """A ``StackConfig`` field with its live-change note and allowed values kept as field metadata.

    ``allowed`` is a tuple of the exact values the key takes, or a short text (a range, a grammar, a link); booleans
    need none.
    """
    meta = {"live": live, "allowed": allowed}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)
