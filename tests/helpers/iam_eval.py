"""A small IAM evaluator for identity policies, enough to test least privilege.

Allow statements only (no NotAction/NotResource), Action and Resource wildcards,
and the condition operators our policies use: StringLike, StringEquals,
ArnEquals, Bool, each optionally ...IfExists. An unknown operator fails loudly.
"""

from __future__ import annotations

import fnmatch
import json


def _match(pattern: str, value: str) -> bool:
    return fnmatch.fnmatchcase(value, pattern.replace("[", "[[]"))


def as_list(v):
    return v if isinstance(v, list) else [v]


def _conditions_hold(cond: dict, ctx: dict) -> bool:
    for op, kv in cond.items():
        if_exists = op.endswith("IfExists")
        base = op[: -len("IfExists")] if if_exists else op
        for key, expected in kv.items():
            if key not in ctx:
                if if_exists:
                    continue
                return False
            actual = ctx[key]
            if base == "StringLike":
                ok = any(_match(p, actual) for p in as_list(expected))
            elif base in ("StringEquals", "ArnEquals", "Bool"):
                ok = actual in [str(e).lower() if base == "Bool" else e for e in as_list(expected)]
            else:
                raise AssertionError(f"evaluator does not know condition operator {op}")
            if not ok:
                return False
    return True


def allowed(policy_json: str, action: str, resource: str, ctx: dict | None = None) -> bool:
    """Whether an identity policy allows ``action`` on ``resource`` with request context ``ctx``."""
    policy = json.loads(policy_json)
    for st in policy["Statement"]:
        assert st["Effect"] == "Allow", "identity policies here only allow"
        assert "NotAction" not in st and "NotResource" not in st
        if not any(_match(a, action) for a in as_list(st["Action"])):
            continue
        if not any(_match(r, resource) for r in as_list(st["Resource"])):
            continue
        if _conditions_hold(st.get("Condition", {}), ctx or {}):
            return True
    return False


def trust_allows(policy_json: str, service: str, action: str, ctx: dict) -> bool:
    """Whether a role trust policy lets AWS service principal ``service`` call ``action`` with request context ``ctx``
    (the keys the service sends: a condition on a key it does not send fails, as IAM evaluates it)."""
    policy = json.loads(policy_json)
    for st in policy["Statement"]:
        assert st["Effect"] == "Allow", "trust policies here only allow"
        services = as_list((st.get("Principal") or {}).get("Service", []))
        if service not in services or not any(_match(a, action) for a in as_list(st["Action"])):
            continue
        if _conditions_hold(st.get("Condition", {}), ctx):
            return True
    return False
