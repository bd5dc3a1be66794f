"""The Pod Security Standards checker for tests: ``violations(pod_spec, level)`` (tools/pod_security.py, where the
layout rule ``pod-security-baseline`` uses it too)."""

from ray_efa_eks.tools.pod_security import (  # noqa: F401 (the checker's names, for the tests)
    BASELINE_CAPABILITIES,
    LEVELS,
    PAGE,
    RESTRICTED_VOLUMES,
    SAFE_SYSCTLS,
    SELINUX_TYPES,
    violations,
)
