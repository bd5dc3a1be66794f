"""CrossGuard policy pack: the layout rules of ``tools/rules.py`` enforced on a real ``pulumi preview``.

``pulumi preview --policy-pack policy`` runs this file as ``__main__``. Each rule becomes one mandatory
``StackValidationPolicy`` that hands ``StackValidationArgs.resources`` (a real preview's resources: outputs,
parents, property dependencies, unknowns) to the same code the offline plan runs on mock records, so the plan and
the pack cannot disagree about what a broken layout is. Values only ``pulumi up`` knows are never a violation.
"""

from __future__ import annotations

import sys

from pulumi_policy import EnforcementLevel, PolicyPack, ReportViolation, StackValidationArgs, StackValidationPolicy

INSTALL = "policy/venv/bin/pip install --no-deps -e ."
"""How the pack's venv gets ``ray_efa_eks`` (the checkout, without Ray or PyTorch: the rules need the stdlib only)."""
try:
    from ray_efa_eks.tools import rules  # the same source the offline plan runs
    from ray_efa_eks.tools.layout import Stack, from_policy
except ImportError as e:
    sys.exit(f"policy pack: {e}; install the checkout into the pack's venv: {INSTALL}")

PACK_NAME = "ray-efa-eks-layout"


def validator(rule: rules.Rule):
    """A StackValidation callback that reports each violation of ``rule`` against its resource's URN."""

    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        for v in rule.check(Stack(from_policy(args.resources))):
            report_violation(f"{v.resource}: {v.problem}. Fix: {v.fix}", v.urn)

    return validate


POLICIES = [
    StackValidationPolicy(
        name=rule.id,
        description=rule.title,
        validate=validator(rule),
        # a warning rule is a preference AWS does not enforce: advisory, the preview goes on
        enforcement_level=(EnforcementLevel.ADVISORY if rule.severity == rules.WARNING else EnforcementLevel.MANDATORY),
        remediation_steps=rule.fix,
    )
    for rule in rules.RULES
]

if __name__ == "__main__":
    if any(a in ("-h", "--help") for a in sys.argv[1:]):  # the engine never passes these; a person does
        print(__doc__.strip())
        sys.exit(0)
    PolicyPack(name=PACK_NAME, policies=POLICIES, enforcement_level=EnforcementLevel.MANDATORY)
