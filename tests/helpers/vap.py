"""A ValidatingAdmissionPolicy evaluated as the API server evaluates it, with cel-python (pinned in requirements).

What it implements of the API server's admission (k8s.io/apiserver plugin/policy/validating, docs "Validating
Admission Policy"): the policy applies when a ``matchConstraints.resourceRules`` entry names the request's group,
version, resource (``nodes/status`` for a subresource) and operation and every ``matchConditions`` expression is
true; ``variables`` are bound under ``variables``; the request is denied when any ``validations`` expression is
false, and with ``failurePolicy: Fail`` when one does not evaluate to a boolean (an error). Binding scoping
(``matchResources``, params) is not used by the stack's policy and not implemented.
"""

from __future__ import annotations

from typing import Any

import celpy

_ENV = celpy.Environment()


def _eval(expr: str, activation: dict[str, Any]) -> Any:
    return _ENV.program(_ENV.compile(expr)).evaluate(activation)


def _applies(spec: dict[str, Any], request: dict[str, Any]) -> bool:
    res = request["resource"]
    name = res["resource"] + (f"/{request['subResource']}" if request.get("subResource") else "")
    for rule in spec["matchConstraints"]["resourceRules"]:
        if (
            res["group"] in rule["apiGroups"]
            and res["version"] in rule["apiVersions"]
            and request["operation"] in rule["operations"]
            and name in rule["resources"]
        ):
            return True
    return False


def admit(policy_spec: dict[str, Any], request: dict[str, Any]) -> tuple[bool, list[str]]:
    """(allowed, messages of the failed validations) for one AdmissionRequest-shaped dict."""
    if not _applies(policy_spec, request):
        return True, []
    act: dict[str, Any] = {
        "request": celpy.json_to_cel(request),
        "object": celpy.json_to_cel(request.get("object")),
        "oldObject": celpy.json_to_cel(request.get("oldObject")),
    }
    for cond in policy_spec.get("matchConditions", []):
        out = _eval(cond["expression"], act)
        if not isinstance(out, celpy.celtypes.BoolType):  # an error: the failure policy decides
            return policy_spec.get("failurePolicy", "Fail") != "Fail", [f"matchCondition {cond['name']}: {out}"]
        if not out:
            return True, []
    variables = {}
    for v in policy_spec.get("variables", []):
        variables[v["name"]] = _eval(v["expression"], {**act, "variables": celpy.celtypes.MapType(variables)})
    act["variables"] = celpy.celtypes.MapType({celpy.celtypes.StringType(k): v for k, v in variables.items()})
    failed = []
    for val in policy_spec["validations"]:
        out = _eval(val["expression"], act)
        if not (isinstance(out, celpy.celtypes.BoolType) and bool(out)):
            failed.append(
                val["message"] if isinstance(out, celpy.celtypes.BoolType) else f"{val['message']} (error: {out})"
            )
    if failed and policy_spec.get("failurePolicy", "Fail") == "Fail":
        return False, failed
    return not failed, failed


def request(
    user: str,
    operation: str,
    resource: str,
    obj: Any,
    old: Any = None,
    subresource: str = "",
    node_name: str | None = None,
) -> dict[str, Any]:
    """An AdmissionRequest as the API server builds it for a pod's projected token (userInfo.extra as KEP-4193)."""
    extra: dict[str, list[str]] = {}
    if node_name is not None:
        extra = {
            "authentication.kubernetes.io/node-name": [node_name],
            "authentication.kubernetes.io/pod-name": ["node-agent-x7k2p"],
            "authentication.kubernetes.io/credential-id": ["JTI=7ee52be0"],
        }
    return {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "operation": operation,
        "kind": {"group": "", "version": "v1", "kind": "Node" if resource == "nodes" else "Event"},
        "resource": {"group": "", "version": "v1", "resource": resource},
        "subResource": subresource,
        "name": (obj or old or {}).get("metadata", {}).get("name", ""),
        "userInfo": {"username": user, "groups": ["system:serviceaccounts", "system:authenticated"], "extra": extra},
        "object": obj,
        "oldObject": old,
    }
