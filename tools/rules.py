"""Layout rules: the mistakes that make a multi-node EFA training stack slow, broken or exposed.

One implementation, two callers: the offline plan (``python -m ray_efa_eks.tools.plan``) feeds
it the records of the real program under Pulumi mocks, and the CrossGuard policy pack
(``policy/``, ``pulumi preview --policy-pack policy``) feeds it the resources of a real
preview. Both go through :mod:`tools.layout`, which reads each fact from whichever
shape the resources have and answers UNKNOWN when only ``pulumi up`` could know; a rule
never fails on an unknown value.

Each broken rule yields :class:`Violation` objects that print as one line each:
rule id, resource, what is wrong, and the fix.
"""

from __future__ import annotations

from collections.abc import Iterable

from . import (
    aws_rules,
    layout,
    layout_fit,
    layout_network,
    layout_node_groups,
    layout_pods,
    queue_rules,
    security_rules,
)
from .layout import EFA_RESOURCE, UNKNOWN, Resource, Stack
from .violations import ERROR, WARNING, Rule, Violation, errors, violation  # noqa: F401 (rules.Violation, ...)


def _v(rule: str, r: Resource | None, problem: str, fix: str) -> Violation:
    return violation(rule, r, problem, fix)


# -- gpu-one-az ----------------------------------------------------------------------------------------------------

GPU_ONE_AZ_FIX = (
    "put every GPU subnet in the one GPU AZ (EFA and NCCL traffic do not cross AZs): pass only that AZ's "
    "private subnet (Network.gpu_subnet_id); EfaGpuNodeGroup keeps only the subnets of its "
    "availability_zone (pulumi-eks: placement_group_availability_zone with enable_efa_support)"
)


def _gpu_one_az(stack: Stack) -> list[Violation]:
    out, where = [], {}
    for g in layout_node_groups.gpu_node_groups(stack):
        if g.subnets is not UNKNOWN and not g.subnets and g.placement_az:
            out.append(
                _v(
                    "gpu-one-az",
                    g.resource,
                    f"none of its subnets is in placementGroupAvailabilityZone "
                    f"{g.placement_az}, so pulumi-eks has no subnet to put nodes in",
                    GPU_ONE_AZ_FIX,
                )
            )
            continue
        azs = g.azs
        if azs is UNKNOWN:
            continue
        if len(azs) > 1:
            names = ", ".join(f"{s.name} ({layout.dig(s.props, 'availabilityZone')})" for s in g.subnets)
            out.append(_v("gpu-one-az", g.resource, f"GPU subnets span {len(azs)} AZs: {names}", GPU_ONE_AZ_FIX))
        for az in azs:
            where.setdefault(az, []).append(g.resource.name)
    if len(where) > 1 and not out:
        spread = "; ".join(f"{az}: {', '.join(names)}" for az, names in sorted(where.items()))
        out.append(_v("gpu-one-az", None, f"GPU node groups are in {len(where)} AZs ({spread})", GPU_ONE_AZ_FIX))
    return out


# -- efa-interfaces ------------------------------------------------------------------------------------------------

EFA_INTERFACES_FIX = (
    "give the GPU node group EFA interfaces: EfaGpuNodeGroupArgs(efa=True), whose launch template has "
    "one EFA interface per network card (launch_template.efa_network_interfaces), or pulumi-eks "
    "ManagedNodeGroup(enable_efa_support=True, placement_group_availability_zone=the GPU AZ); "
    "or turn EFA off everywhere (ray-efa-eks:efa false)"
)


def _efa_interfaces(stack: Stack) -> list[Violation]:
    reasons = layout_network.efa_intent(stack)
    if not reasons:
        return []
    out = []
    groups = layout_node_groups.gpu_node_groups(stack)
    for g in groups:
        if g.efa_interfaces == 0 and not isinstance(g.efa_interfaces, bool):
            out.append(
                _v(
                    "efa-interfaces",
                    g.resource,
                    f"EFA is enabled ({reasons[0]}) but these GPU nodes get no EFA interface ({g.efa_source})",
                    EFA_INTERFACES_FIX,
                )
            )
    for p in layout_pods.pods(stack):
        need = layout_pods.efa_requested(p)
        if not need:
            continue
        for g in layout_pods.node_groups_for(p, groups):
            have = g.efa_interfaces
            if isinstance(have, int) and 0 < have < need:
                types = ", ".join(g.instance_types)
                out.append(
                    _v(
                        "efa-interfaces",
                        p.resource,
                        f"{p.label} requests {need} {EFA_RESOURCE} but node group {g.resource.name} ({types}) "
                        f"has {have} per node, so the pod never schedules",
                        f"request at most {have} {EFA_RESOURCE} (WorkerGroupArgs.instance_type must be the node "
                        f"group's type) or use an instance type with {need} EFA interfaces",
                    )
                )
    return out


# -- efa-sg-self-rule ----------------------------------------------------------------------------------------------

EFA_SG_FIX = (
    "allow all traffic from the EFA security group to itself: aws.vpc.SecurityGroupEgressRule("
    "security_group_id=SG, referenced_security_group_id=SG, ip_protocol='-1') on the group the EFA "
    "interfaces join (the EKS cluster security group, which EKS already gives the matching self ingress); "
    "EfaGpuNodeGroup adds it when efa=True"
)


def _efa_sg_self_rule(stack: Stack) -> list[Violation]:
    reasons = layout_network.efa_intent(stack)
    if not reasons:
        return []
    groups = [g for g in layout_node_groups.gpu_node_groups(stack) if g.efa_enabled or g.efa_interfaces is UNKNOWN]
    anchor = groups[0].resource if groups else None
    rules = layout_network.self_rules(stack)
    egress = [r for r in rules if r.direction in ("egress", UNKNOWN)]
    ingress = [r for r in rules if r.direction in ("ingress", UNKNOWN)]
    if not egress:
        partial = [
            r.name
            for r in stack.of_type(layout.SG_EGRESS, layout.SG_RULE)
            if r.props.get("ipProtocol", r.props.get("protocol")) not in (None, "-1", "all", UNKNOWN)
        ]
        extra = f"; {', '.join(partial)} allow only some protocols" if partial else ""
        return [
            _v(
                "efa-sg-self-rule",
                anchor,
                f"EFA is enabled ({reasons[0]}) but no security group has an all-traffic egress rule to itself{extra}",
                EFA_SG_FIX,
            )
        ]
    out = []
    efa_sgs: list[str] = []
    for g in groups:
        if g.security_group_ids is UNKNOWN:
            return []  # which group the interfaces join is only known after `up`
        efa_sgs += [s for s in g.security_group_ids if s not in efa_sgs]
    for sg in efa_sgs:
        if not any(r.security_group_id in (sg, UNKNOWN) for r in egress):
            out.append(
                _v(
                    "efa-sg-self-rule",
                    anchor,
                    f"the EFA interfaces join {sg}, which has no all-traffic egress rule to itself",
                    EFA_SG_FIX,
                )
            )
        declared = stack.resolve(sg)
        if (
            declared is not None
            and declared.type == layout.SECURITY_GROUP
            and not any(r.security_group_id in (sg, UNKNOWN) for r in ingress)
        ):
            out.append(
                _v(
                    "efa-sg-self-rule",
                    declared,
                    "the EFA interfaces join this security group, which has no all-traffic ingress rule from itself",
                    "add ingress {protocol: '-1', self: true} (or a SecurityGroupIngressRule referencing the "
                    "group itself); only the EKS cluster security group has that rule built in",
                )
            )
    return out


# -- gpu-capacity --------------------------------------------------------------------------------------------------

GPU_CAPACITY_FIX = (
    "give the GPU node group its own launch template with the capacity target and no new placement "
    "group: EfaGpuNodeGroupArgs(capacity=GpuCapacity(mode, reservation_id)), i.e. ray-efa-eks:gpuCapacity "
    "reservation|capacity-block + gpuCapacityReservationId (docs/gpus.md)"
)


def _gpu_capacity(stack: Stack) -> list[Violation]:
    """A Capacity Block needs its market type, its reservation and capacityType CAPACITY_BLOCK together; a placement
    group the stack creates next to a reservation or block makes launches fail with InsufficientInstanceCapacity."""
    out = []
    for g in layout_node_groups.gpu_node_groups(stack):
        block_market = g.market_type == "capacity-block"
        block_type = g.capacity_type == "CAPACITY_BLOCK"
        if UNKNOWN not in (g.market_type, g.capacity_type) and block_market != block_type:
            have = (
                f"launch template marketType capacity-block but node group capacityType {g.capacity_type}"
                if block_market
                else "node group capacityType CAPACITY_BLOCK but its launch template has no "
                "instanceMarketOptions.marketType capacity-block"
            )
            out.append(
                _v(
                    "gpu-capacity",
                    g.resource,
                    f"{have}: EKS launches no Capacity Block node that way",
                    GPU_CAPACITY_FIX,
                )
            )
        if (block_market or block_type) and g.reservation is None:
            out.append(
                _v(
                    "gpu-capacity",
                    g.resource,
                    "a Capacity Block node group whose launch template targets no capacity reservation",
                    GPU_CAPACITY_FIX,
                )
            )
        reserved = block_market or block_type or g.reservation not in (None, UNKNOWN)
        if reserved and g.placement_strategy == "cluster":
            src = "pulumi-eks enableEfaSupport" if g.efa_source == "pulumi-eks enableEfaSupport" else "the stack"
            out.append(
                _v(
                    "gpu-capacity",
                    g.resource,
                    f"a cluster placement group created by {src} next to a capacity "
                    f"reservation{' ' + g.reservation if isinstance(g.reservation, str) else ''}"
                    ": launches fail with InsufficientInstanceCapacity",
                    GPU_CAPACITY_FIX,
                )
            )
    return out


# -- guaranteed-qos ------------------------------------------------------------------------------------------------

QOS_FIX = (
    "set requests equal to limits for cpu, memory, nvidia.com/gpu and vpc.amazonaws.com/efa (Guaranteed QoS) "
    "so one throttled or evicted rank cannot stall every other rank's collective"
)


def _guaranteed_qos(stack: Stack) -> list[Violation]:
    out = []
    for p in layout_pods.pods(stack):
        for c in p.containers:
            problem = layout_pods.qos_problem(c)
            if problem:
                out.append(
                    _v("guaranteed-qos", p.resource, f"container {c.get('name', '?')} ({p.role}): {problem}", QOS_FIX)
                )
    return out


# -- one-image -----------------------------------------------------------------------------------------------------

ONE_IMAGE_FIX = (
    "run head and every worker group on the one pinned image (ray-efa-eks:dlcImage); the role comes from "
    "rayStartParams, and Ray, Python and NCCL versions must match across the cluster"
)


def _one_image(stack: Stack) -> list[Violation]:
    out = []
    for r, spec in layout_pods.ray_specs(stack):
        head = layout.dig(spec, "headGroupSpec", "template", "spec", "containers", 0, "image")
        if head is UNKNOWN or head is None:
            continue
        for g in layout.dig(spec, "workerGroupSpecs", default=[]) or []:
            image = layout.dig(g, "template", "spec", "containers", 0, "image")
            if image is not UNKNOWN and image != head:
                out.append(
                    _v(
                        "one-image",
                        r,
                        f"head runs {head} but worker group {layout.dig(g, 'groupName')} runs {image}",
                        ONE_IMAGE_FIX,
                    )
                )
    return out


# -- pinned-image --------------------------------------------------------------------------------------------------

PINNED_FIX = (
    "pin a versioned tag (e.g. ray:train-ml-cuda-v1.1) or a digest (@sha256:...) so every node pulls the same bits"
)


def _pinned_image(stack: Stack) -> list[Violation]:
    out: list[Violation] = []
    for p in layout_pods.pods(stack):
        for c in p.containers:
            problem = layout_pods.image_problem(c.get("image"))
            v = problem and _v(
                "pinned-image", p.resource, f"container {c.get('name', '?')} ({p.role}): {problem}", PINNED_FIX
            )
            if v and v not in out:
                out.append(v)
    return out


# -- private-dashboard ---------------------------------------------------------------------------------------------

DASHBOARD_FIX = (
    "keep the head Service ClusterIP and reach the dashboard with kubectl port-forward "
    "svc/CLUSTER-head-svc 8265:8265; if it must sit behind a load balancer, make that internal "
    "(service.beta.kubernetes.io/aws-load-balancer-scheme: internal, alb.ingress.kubernetes.io/scheme: "
    "internal) and narrow loadBalancerSourceRanges"
)


def _private_dashboard(stack: Stack) -> list[Violation]:
    return [_v("private-dashboard", r, how, DASHBOARD_FIX) for r, how in layout_network.dashboard_exposures(stack)]


# -- host-access ---------------------------------------------------------------------------------------------------

HOST_ACCESS_FIX = (
    "read host state through the node agent (components/addons/node_agent.py: the EFA exporter, the only "
    "pod that mounts host paths, alone in a namespace labelled pod-security.kubernetes.io/enforce: "
    "privileged); Ray pods read its node-local Service (RAY_EFA_EKS_EFA_EXPORTER) and need no host "
    "access, so their namespace can enforce Pod Security baseline"
)
PSS_ENFORCE = "pod-security.kubernetes.io/enforce"
PSS_PAGE = "https://kubernetes.io/docs/concepts/security/pod-security-standards/#baseline"


def _host_uses(spec: dict) -> list[str]:
    """What of the host a pod spec uses, by Pod Security baseline's host controls (UNKNOWN values skipped)."""
    uses = [
        f"hostPath volume {v.get('name', '?')}"
        for v in spec.get("volumes") or []
        if isinstance(v, dict) and isinstance(v.get("hostPath"), dict)
    ]
    uses += [k for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k) is True]
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            if layout.dig(c, "securityContext", "privileged") is True:
                uses.append(f"privileged container {c.get('name', '?')}")
            if any(
                isinstance(pt, dict) and pt.get("hostPort") not in (None, 0, UNKNOWN) for pt in c.get("ports") or []
            ):
                uses.append(f"hostPort in container {c.get('name', '?')}")
    return uses


def _host_access(stack: Stack) -> list[Violation]:
    """Only a non-Ray pod in a namespace that enforces Pod Security ``privileged`` may use the host; a Ray pod never
    (its namespace enforces baseline: the API server refuses such a pod, and KubeRay would retry it forever)."""
    privileged = {
        layout.dig(r.props, "metadata", "name")
        for r in stack.of_type("kubernetes:core/v1:Namespace")
        if layout.dig(r.props, "metadata", "labels", PSS_ENFORCE) == "privileged"
    }
    out = []
    for p in layout_pods.pods(stack):
        uses = _host_uses(p.spec)
        ns = layout.dig(p.resource.props, "metadata", "namespace")
        if not uses or ns is UNKNOWN:
            continue
        if p.role == "pod" and ns in privileged:
            continue
        where = (
            f"a Ray {p.role} pod"
            if p.role != "pod"
            else f"a pod in namespace {ns}, which does not enforce Pod Security privileged"
        )
        out.append(
            _v(
                "host-access",
                p.resource,
                f"{where} uses the host ({', '.join(uses)}; Pod Security baseline forbids it: {PSS_PAGE})",
                HOST_ACCESS_FIX,
            )
        )
    return out


# -- pods-fit ------------------------------------------------------------------------------------------------------

PODS_FIT_FIX = (
    "give the node group room: a larger instance type (ray-efa-eks:systemInstanceType for the system node; "
    "docs/deploy.md has the figures per node group), or smaller requests (the Ray head's resources, the "
    "chart values the stack passes); the plan's pod fit table shows what each node holds"
)


def _pods_fit(stack: Stack) -> list[Violation]:
    """Every pod the stack runs (its own, its charts', EKS's add-ons', KubeRay's sidecar) placed as the scheduler
    would (tools/layout_fit.py); a pod that cannot be placed stays Pending, and a gate waiting on it fails ``up``."""
    f = layout_fit.fit(stack)
    if not f.complete:  # nodes this stack does not show may hold the pod: never fail on what only `up` knows
        return []
    groups = {g.resource.name: g.resource for g in layout_node_groups.node_groups(stack)}
    return [
        _v("pods-fit", groups.get(u.group) if u.group else None, layout_fit.problem_line(u), PODS_FIT_FIX)
        for u in f.unplaced
    ]


# -- Pod Identity trust policies (warnings: AWS accepts these shapes) ------------------------------------------------

POD_TRUST_SCOPE_FIX = (
    "condition the pods.eks.amazonaws.com statement on aws:RequestTag/eks-cluster-arn (or "
    "eks-cluster-name), aws:RequestTag/kubernetes-namespace and "
    "aws:RequestTag/kubernetes-service-account (components/cluster/pod_identity.py does)"
)
POD_TRUST_KEYS_FIX = (
    "condition only on the session tags Pod Identity adds (EKS user guide, pod-id-abac) and "
    "aws:SourceAccount / aws:SourceOrgID; a required condition on a key the request lacks denies "
    "every AssumeRole"
)
SCOPING_TAGS = ("aws:requesttag/kubernetes-namespace", "aws:requesttag/kubernetes-service-account")
CLUSTER_TAGS = ("aws:requesttag/eks-cluster-arn", "aws:requesttag/eks-cluster-name")


def _pod_trust_statements(stack: Stack):
    for r in stack.of_type(aws_rules.IAM_ROLE):
        for st in aws_rules.pod_identity_statements(r.props.get("assumeRolePolicy")):
            yield r, st


def _pod_identity_trust_scoped(stack: Stack) -> list[Violation]:
    out = []
    for r, st in _pod_trust_statements(stack):
        keys = aws_rules.condition_keys(st, required_only=True)
        missing = [k for k in SCOPING_TAGS if k not in keys] + (
            [] if keys & set(CLUSTER_TAGS) else ["aws:RequestTag/eks-cluster-arn"]
        )
        if missing:
            out.append(
                Violation(
                    "pod-identity-trust-scoped",
                    r.label,
                    f"any Pod Identity association of the account can assume the role (its trust policy "
                    f"does not require {', '.join(missing)}); AWS accepts this (the pod-id-role page's "
                    "minimal trust policy)",
                    POD_TRUST_SCOPE_FIX,
                    r.urn,
                    WARNING,
                )
            )
    return out


def _pod_identity_trust_keys(stack: Stack) -> list[Violation]:
    out = []
    for r, st in _pod_trust_statements(stack):
        unknown = sorted(
            k
            for k in aws_rules.condition_keys(st, required_only=True)
            if k not in aws_rules.POD_IDENTITY_TAG_KEYS | aws_rules.POD_IDENTITY_SOURCE_KEYS
            and not k.startswith("aws:requesttag/")
        )  # an absent session tag is refused (aws_rules)
        if unknown:
            out.append(
                Violation(
                    "pod-identity-trust-keys",
                    r.label,
                    f"the trust policy requires {unknown}, which no AWS document says Pod Identity "
                    "sends (nor that it does not): if the request lacks it, every AssumeRole is denied",
                    POD_TRUST_KEYS_FIX,
                    r.urn,
                    WARNING,
                )
            )
    return out


RULES: tuple[Rule, ...] = (
    Rule("gpu-one-az", "GPU subnets are all in one AZ", GPU_ONE_AZ_FIX, _gpu_one_az),
    Rule(
        "efa-interfaces",
        "with EFA on, every GPU node has as many EFA interfaces as its pods request",
        EFA_INTERFACES_FIX,
        _efa_interfaces,
    ),
    Rule(
        "efa-sg-self-rule",
        "with EFA on, the EFA security group allows all traffic to and from itself",
        EFA_SG_FIX,
        _efa_sg_self_rule,
    ),
    Rule(
        "gpu-capacity",
        "GPU nodes can launch into their capacity: a Capacity Block's market type, reservation and "
        "capacityType together, and no new placement group next to a reservation",
        GPU_CAPACITY_FIX,
        _gpu_capacity,
    ),
    Rule("guaranteed-qos", "every container's requests equal its limits (Guaranteed QoS)", QOS_FIX, _guaranteed_qos),
    Rule("one-image", "Ray head and workers run the same image", ONE_IMAGE_FIX, _one_image),
    Rule("pinned-image", "every image is pinned by a tag other than latest, or by digest", PINNED_FIX, _pinned_image),
    Rule(
        "private-dashboard",
        "the Ray dashboard is not on a public load balancer or ingress",
        DASHBOARD_FIX,
        _private_dashboard,
    ),
    Rule(
        "host-access",
        "only the node agent uses the host (hostPath, host namespaces, privileged, hostPort), alone in "
        "a namespace enforcing Pod Security privileged; Ray pods never",
        HOST_ACCESS_FIX,
        _host_access,
    ),
    Rule(
        "pods-fit",
        "every pod (the stack's, its charts', EKS's add-ons' and KubeRay's sidecars) fits on a node that "
        "admits it, with the requests and allocatable the scheduler sees",
        PODS_FIT_FIX,
        _pods_fit,
    ),
    Rule(
        "pod-identity-trust-scoped",
        "a Pod Identity role's trust policy names its cluster, namespace and service account (warning)",
        POD_TRUST_SCOPE_FIX,
        _pod_identity_trust_scoped,
        WARNING,
    ),
    Rule(
        "pod-identity-trust-keys",
        "a Pod Identity trust policy conditions only on keys Pod Identity is documented to send (warning)",
        POD_TRUST_KEYS_FIX,
        _pod_identity_trust_keys,
        WARNING,
    ),
    Rule(
        "gate-no-api-token",
        "Job pods (the EFA gate) mount no Kubernetes API token",
        security_rules.GATE_TOKEN_FIX,
        security_rules.gate_no_api_token,
    ),
    Rule(
        "ray-pods-network-policy",
        "a NetworkPolicy selects every Ray pod (head and workers)",
        security_rules.NETPOL_FIX,
        security_rules.ray_pods_network_policy,
    ),
    Rule(
        "kuberay-single-namespace",
        "the KubeRay operator watches only the RayClusters' namespaces (no ClusterRole)",
        security_rules.KUBERAY_FIX,
        security_rules.kuberay_single_namespace,
    ),
    Rule(
        "ray-pods-region",
        "every Ray container knows its AWS region and does not probe IMDS",
        security_rules.REGION_FIX,
        security_rules.ray_pods_region,
    ),
    Rule(
        "device-plugin-versions",
        "device plugin versions are not known to break on the stack's GPU types",
        security_rules.PLUGINS_FIX,
        security_rules.device_plugin_versions,
    ),
    Rule(
        "pod-security-baseline",
        "the Ray head and Job pods pass Pod Security baseline",
        security_rules.PSS_FIX,
        security_rules.pod_security_baseline,
    ),
    Rule(
        "monitoring-hardened",
        "Prometheus serves no lifecycle API, DCGM runs without SYS_ADMIN, and a "
        "NetworkPolicy selects every pod of both monitoring namespaces",
        security_rules.MONITORING_FIX,
        security_rules.monitoring_hardened,
    ),
    Rule(
        "node-role-least-privilege",
        "the node role holds the worker policy and ECR pulls only; the VPC CNI has its own role (warning)",
        security_rules.NODE_ROLE_FIX,
        security_rules.node_role_least_privilege,
        WARNING,
    ),
    Rule(
        "queue-quota-fits",
        "each team's GPU quota, and all of them together, fit in the GPU node groups of its flavor",
        queue_rules.QUEUE_QUOTA_FIX,
        queue_rules.queue_quota_fits,
    ),
)
RULE_IDS = tuple(r.id for r in RULES)


def check(resources: Iterable[Resource] | Stack, only: Iterable[str] | None = None) -> list[Violation]:
    """Run the rules (all, or those named in ``only``) and return every violation, rule by rule."""
    stack = resources if isinstance(resources, Stack) else Stack(resources)
    wanted = set(only) if only is not None else set(RULE_IDS)
    unknown = wanted - set(RULE_IDS)
    if unknown:
        raise ValueError(f"unknown rule(s) {sorted(unknown)}; known: {', '.join(RULE_IDS)}")
    return [v for rule in RULES if rule.id in wanted for v in rule.check(stack)]
