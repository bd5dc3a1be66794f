"""Under Pulumi mocks: checkpoint bucket, pod identity, node and cluster hardening.

IAM policies are parsed and *evaluated* for concrete requests (tests/iam_eval.py),
so a policy that allows one key too many fails a test rather than just looking different.
"""

from __future__ import annotations

import json

import kubernetes_validate
import pytest

from ray_efa_eks.components.nodes.launch_template import NodeHardening
from ray_efa_eks.tools.mockrun import run_program
from ray_efa_eks.components.cluster.pod_identity import bucket_prefix_policy, check_prefix
from tests.helpers.iam_eval import allowed, as_list, trust_allows

MNG = "eks:index:ManagedNodeGroup"
BUCKET = "aws:s3/bucket:Bucket"
K8S_VERSION = "1.33.0"


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run():
    return run_program()


def bucket_of(run):
    return run.one(BUCKET, "checkpoints")


def bucket_child(run, typ):
    b = bucket_of(run)
    return next(r for r in run.of_type(typ) if r["bucket"] == f"{b.name}-id")


def raycluster(run):
    return run.one("kubernetes:ray.io/v1:RayCluster")


def pod_specs(run):
    spec = raycluster(run)["spec"]
    yield spec["headGroupSpec"]["template"]
    for g in spec["workerGroupSpecs"]:
        yield g["template"]


# -- 1. the bucket ----------------------------------------------------------------------------


def test_bucket_versioned_private_tls_only(run):
    assert bucket_child(run, "aws:s3/bucketVersioning:BucketVersioning")["versioningConfiguration"] == {
        "status": "Enabled"
    }
    pab = bucket_child(run, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
    assert all(
        pab[k] is True for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    )
    own = bucket_child(run, "aws:s3/bucketOwnershipControls:BucketOwnershipControls")
    assert own["rule"] == {"objectOwnership": "BucketOwnerEnforced"}
    policy = json.loads(bucket_child(run, "aws:s3/bucketPolicy:BucketPolicy")["policy"])
    (deny,) = policy["Statement"]
    arn = f"arn:aws:s3:::{bucket_of(run).name}"
    assert deny["Effect"] == "Deny" and deny["Principal"] == "*" and deny["Action"] == "s3:*"
    assert sorted(deny["Resource"]) == [arn, f"{arn}/*"]
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    life = bucket_child(run, "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")["rules"][0]
    assert life["status"] == "Enabled" and life["noncurrentVersionExpiration"] == {"noncurrentDays": 30}
    assert life["abortIncompleteMultipartUpload"] == {"daysAfterInitiation": 7}


def test_bucket_sse_kms_with_its_own_retained_key(run):
    sse = bucket_child(run, "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration")
    rule = sse["rules"][0]
    key = run.one("aws:kms/key:Key", "checkpoints")
    assert rule["applyServerSideEncryptionByDefault"] == {
        "sseAlgorithm": "aws:kms",
        "kmsMasterKeyId": key.inputs.get("arn", f"arn:aws:kms:us-east-1:123456789012:key/{key.name}"),
    }
    assert rule["bucketKeyEnabled"] is True
    assert key["enableKeyRotation"] is True
    # A retained bucket whose key was deleted is unreadable: both survive `pulumi destroy`.
    assert bucket_of(run).options["retain_on_delete"] is True and key.options["retain_on_delete"] is True
    assert bucket_of(run)["forceDestroy"] is False
    assert run.outputs["checkpointBucket"] == bucket_of(run).name


def test_bucket_sse_s3_and_opt_out_of_retain():
    run = run_program({"checkpointEncryption": "s3", "checkpointRetainOnDelete": "false", "efaCheck": "false"})
    sse = bucket_child(run, "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration")
    assert sse["rules"][0]["applyServerSideEncryptionByDefault"] == {"sseAlgorithm": "AES256"}
    assert not [k for k in run.of_type("aws:kms/key:Key") if "checkpoints" in k.name]
    assert bucket_of(run).options["retain_on_delete"] is False and bucket_of(run)["forceDestroy"] is True
    # no KMS statement when there is no key
    policy = json.loads(run.one("aws:iam/rolePolicy:RolePolicy", "ray-storage")["policy"])
    assert not any(a.startswith("kms:") for st in policy["Statement"] for a in as_list(st["Action"]))


# -- 2. identity --------------------------------------------------------------------------------


def test_pod_role_allows_exactly_the_bucket_prefix(run):
    policy = run.one("aws:iam/rolePolicy:RolePolicy", "ray-storage")["policy"]
    b = f"arn:aws:s3:::{bucket_of(run).name}"
    for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"):
        assert allowed(policy, action, f"{b}/ray-train/run-1/checkpoint_000001/model.distcp")
        assert not allowed(policy, action, f"{b}/other/x")
        assert not allowed(policy, action, f"{b}/ray-train-evil/x")  # prefix boundary, not string prefix
        assert not allowed(policy, action, "arn:aws:s3:::another-bucket/ray-train/x")
    assert allowed(policy, "s3:ListBucket", b, {"s3:prefix": "ray-train/run-1/"})
    assert not allowed(policy, "s3:ListBucket", b, {"s3:prefix": "other/"})
    assert allowed(policy, "s3:ListBucket", b)  # HeadBucket (pyarrow create_dir) carries no s3:prefix
    assert not allowed(policy, "s3:ListBucket", "arn:aws:s3:::another-bucket", {"s3:prefix": "ray-train/"})
    for action in ("s3:DeleteBucket", "s3:PutBucketPolicy", "s3:GetObjectVersion", "s3:PutObjectAcl", "iam:PassRole"):
        assert not allowed(policy, action, f"{b}/ray-train/x") and not allowed(policy, action, b)
    key_arn = "arn:aws:kms:us-east-1:123456789012:key/ray-efa-dev-checkpoints-key"
    via_s3 = {"kms:ViaService": "s3.us-east-1.amazonaws.com"}
    assert allowed(policy, "kms:GenerateDataKey", key_arn, via_s3) and allowed(policy, "kms:Decrypt", key_arn, via_s3)
    assert not allowed(policy, "kms:Decrypt", key_arn, {"kms:ViaService": "ec2.us-east-1.amazonaws.com"})
    assert not allowed(policy, "kms:Decrypt", key_arn.replace("checkpoints-key", "secrets"), via_s3)


def test_policy_evaluator_can_fail():
    loose = json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "arn:aws:s3:::b/*"}]}
    )
    assert allowed(loose, "s3:GetObject", "arn:aws:s3:::b/other/x")  # the evaluator does see over-broad grants
    with pytest.raises(ValueError, match="prefix"):
        bucket_prefix_policy("arn:aws:s3:::b", "/ray-train/")
    for bad in ("", "/a", "a/", "a//b"):
        with pytest.raises(ValueError):
            check_prefix(bad)


def test_trust_policy_is_pod_identity_for_this_cluster_only(run):
    role = run.one("aws:iam/role:Role", "ray-storage")
    (st,) = json.loads(role["assumeRolePolicy"])["Statement"]
    assert st["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(st["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    assert "aws:SourceArn" not in json.dumps(st), "EKS Pod Identity sends no aws:SourceArn (pod-id-role, pod-id-abac)"
    assert st["Condition"]["StringEquals"]["aws:SourceAccount"] == "123456789012"
    # What Pod Identity sends on AssumeRole: the account and its session tags (EKS user guide, pod-id-abac).
    cluster = "arn:aws:eks:us-east-1:123456789012:cluster/ray-efa-dev"
    sent = {
        "aws:SourceAccount": "123456789012",
        "aws:RequestTag/eks-cluster-arn": cluster,
        "aws:RequestTag/eks-cluster-name": "ray-efa-dev",
        "aws:RequestTag/kubernetes-namespace": "ray",
        "aws:RequestTag/kubernetes-service-account": "ray-train",
        "aws:RequestTag/kubernetes-pod-name": "p",
        "aws:RequestTag/kubernetes-pod-uid": "u",
    }
    policy = role["assumeRolePolicy"]
    assert trust_allows(policy, "pods.eks.amazonaws.com", "sts:AssumeRole", sent)
    for key, other in (
        ("aws:RequestTag/eks-cluster-arn", cluster.replace("ray-efa-dev", "other")),
        ("aws:RequestTag/kubernetes-namespace", "default"),
        ("aws:RequestTag/kubernetes-service-account", "default"),
        ("aws:SourceAccount", "999999999999"),
    ):
        assert not trust_allows(policy, "pods.eks.amazonaws.com", "sts:AssumeRole", {**sent, key: other}), key


def test_pod_identity_binds_the_rayclusters_service_account(run):
    assoc = run.one("aws:eks/podIdentityAssociation:PodIdentityAssociation", "ray-storage")
    role = run.one("aws:iam/role:Role", "ray-storage")
    rc = raycluster(run)
    assert assoc["clusterName"] == "ray-efa-dev" and assoc["roleArn"] == f"arn:aws:iam::123456789012:role/{role.name}"
    assert assoc["namespace"] == rc["metadata"]["namespace"]
    accounts = {t["spec"].get("serviceAccountName") for t in pod_specs(run)}
    assert accounts == {assoc["serviceAccount"]}, "head and every worker run as the associated service account"
    sa = run.one("kubernetes:core/v1:ServiceAccount", "ray-sa")
    assert sa["metadata"] == {"name": assoc["serviceAccount"], "namespace": assoc["namespace"]}
    kubernetes_validate.validate(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": sa["metadata"],
            "automountServiceAccountToken": sa["automountServiceAccountToken"],
        },
        K8S_VERSION,
        strict=True,
    )
    addon = run.one("aws:eks/addon:Addon", "pod-identity-agent")
    assert addon["addonName"] == "eks-pod-identity-agent" and addon["clusterName"] == "ray-efa-dev"


def test_pods_start_after_their_identity_exists(run):
    deps = raycluster(run).options["dependencies"]
    assert run.one("aws:eks/podIdentityAssociation:PodIdentityAssociation", "ray-storage").urn in deps
    assert run.one("aws:eks/addon:Addon", "pod-identity-agent").urn in deps


def test_storage_path_reaches_every_ray_pod(run):
    from ray_efa_eks.components.ray.raycluster import STORAGE_PATH_ENV as POD_ENV
    from ray_efa_eks.training.trainer import STORAGE_PATH_ENV as CLI_ENV

    assert POD_ENV == CLI_ENV == "RAY_EFA_EKS_STORAGE_PATH"  # the pods set what the training CLI reads
    uri = run.outputs["checkpointStorageUri"]
    assert uri == f"s3://{bucket_of(run).name}/ray-train"
    for t in pod_specs(run):
        env = {e["name"]: e.get("value") for e in t["spec"]["containers"][0]["env"]}
        assert env["RAY_EFA_EKS_STORAGE_PATH"] == uri


def test_no_s3_on_the_node_role(run):
    node_role = run.one("aws:iam/role:Role", "-node")
    attached = [
        a["policyArn"]
        for a in run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if a["role"] == node_role.name
    ]
    assert attached and not any("S3" in arn for arn in attached)
    assert not [p for p in run.of_type("aws:iam/rolePolicy:RolePolicy") if p["role"] == f"{node_role.name}-id"]


def test_checkpoint_bucket_off():
    run = run_program({"checkpointBucket": "false", "efaCheck": "false"})
    assert not run.of_type(BUCKET)
    # the pods' storage identity is gone; the Cluster Autoscaler's (scale to zero) and the VPC CNI's stay
    assert sorted(a.name for a in run.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")) == [
        "cluster-autoscaler-pod-identity",
        "ray-efa-dev-vpc-cni",
    ]
    for t in pod_specs(run):
        assert "RAY_EFA_EKS_STORAGE_PATH" not in {e["name"] for e in t["spec"]["containers"][0]["env"]}


# -- 4. node hardening: the launch templates the components declare ------------------------------

LT = "aws:ec2/launchTemplate:LaunchTemplate"


def launch_template_of(run, ng):
    """The launch template a managed node group names (by the mock id the template got)."""
    ref = ng["launchTemplate"]["id"]
    (lt,) = [r for r in run.of_type(LT) if run.ids.get(r.urn) == ref]
    return lt


@pytest.mark.parametrize("group", ["system", "gpu"])
def test_every_launch_template_gets_imdsv2_hop1_and_encrypted_root(run, group):
    ng = run.one(MNG, group)
    lt = launch_template_of(run, ng)
    assert lt.parent == ng.parent, "the template is the component's own, not pulumi-eks's"
    assert lt["metadataOptions"] == {"httpTokens": "required", "httpPutResponseHopLimit": 1, "httpEndpoint": "enabled"}
    size = 200 if group == "gpu" else 100  # the system node pulls the DLC image too (Ray head, EFA check Job)
    # The GPU nodes pull the image from zero: provisioned gp3 IOPS/throughput (docs/gpus.md#cold-start).
    perf = {"iops": 16000, "throughput": 1000} if group == "gpu" else {}
    assert lt["blockDeviceMappings"] == [
        {
            "deviceName": "/dev/xvda",
            "ebs": {
                "volumeSize": size,
                "volumeType": "gp3",
                "encrypted": "true",
                "deleteOnTermination": "true",
                **perf,
            },
        }
    ]
    # EKS bootstraps the AMI of amiType itself only when the template has no AMI id; the only user data is the GPU
    # nodes' NodeConfig part EKS merges (FastImagePull, tests/components/test_cold_start.py).
    assert "imageId" not in lt.inputs and ("userData" in lt.inputs) == (group == "gpu")
    assert ng["launchTemplate"]["version"] == "1"
    # pulumi-eks builds its own template (and refuses ours) when any of these is set.
    for key in ("enableEfaSupport", "enableIMDSv2", "diskSize", "userData", "amiId", "kubeletExtraArgs"):
        assert key not in ng.inputs, key
    # Transforms: the KubeRay CRDs' (retain on delete, components/ray/kuberay.py) on a ConfigGroup of ours, and node auto
    # repair on each ManagedNodeGroup's aws.eks.NodeGroup child (pulumi-eks 4.4.0 exposes no nodeRepairConfig). None
    # touches a launch template: the hardening above is the component's own template, not a patch.
    allowed = {("kubernetes:yaml/v2:ConfigGroup", "retain_crds"), ("eks:index:ManagedNodeGroup", "node_repair")}
    found = {(r.type, t.__name__) for r in run.resources for t in r.transforms}
    assert found <= allowed, f"transforms that patch behind pulumi-eks's back: {found - allowed}"


def test_hardening_escape_hatches():
    run = run_program({"imdsHopLimit": "2", "encryptRootVolumes": "false", "efaCheck": "false"})
    lt = launch_template_of(run, run.one(MNG, "gpu"))
    assert lt["metadataOptions"]["httpPutResponseHopLimit"] == 2 and lt["metadataOptions"]["httpTokens"] == "required"
    assert lt["blockDeviceMappings"][0]["ebs"]["encrypted"] == "false"


def test_hardening_defaults_keep_pods_off_imds():
    """What a repo building the node groups without ``hardening`` gets (examples/other_instance_type does): IMDSv2
    required and hop limit 1, so a pod (one hop further than the node) cannot read the node role's credentials
    (EC2 User Guide, "Configure the instance metadata options": hop limit 1 keeps IMDS from containers)."""
    from ray_efa_eks.components.nodes.node_groups import EfaGpuNodeGroupArgs, SystemNodeGroupArgs

    want = {"http_endpoint": "enabled", "http_tokens": "required", "http_put_response_hop_limit": 1}
    assert NodeHardening().metadata_options() == want
    for cls in (EfaGpuNodeGroupArgs, SystemNodeGroupArgs):
        default = cls.__dataclass_fields__["hardening"].default_factory()
        assert default.metadata_options() == want and default.root_volume(50)["ebs"]["encrypted"] == "true", cls


def test_hardening_refuses_bad_values():
    with pytest.raises(ValueError, match="1..64"):
        NodeHardening(imds_hop_limit=0)
    with pytest.raises(ValueError, match="encrypt_root_volume"):
        NodeHardening(encrypt_root_volume=False, kms_key_id="alias/x")
    assert NodeHardening(kms_key_id="alias/x").root_volume(100)["ebs"]["kms_key_id"] == "alias/x"


# -- 4. cluster hardening -------------------------------------------------------------------------


def test_endpoint_and_secrets_encryption(run):
    c = run.one("eks:index:Cluster")
    assert c["endpointPrivateAccess"] is True and c["endpointPublicAccess"] is True
    assert c["publicAccessCidrs"] == ["0.0.0.0/0"]
    secrets_key = run.one("aws:kms/key:Key", "secrets")
    assert c["encryptionConfigKeyArn"] == f"arn:aws:kms:us-east-1:123456789012:key/{secrets_key.name}"
    narrowed = run_program({"endpointPublicAccessCidrs": '["203.0.113.0/24"]', "efaCheck": "false"})
    assert narrowed.one("eks:index:Cluster")["publicAccessCidrs"] == ["203.0.113.0/24"]
    private = run_program({"endpointPublicAccess": "false", "encryptSecrets": "false", "efaCheck": "false"})
    pc = private.one("eks:index:Cluster")
    assert pc["endpointPublicAccess"] is False and pc["endpointPrivateAccess"] is True
    assert "publicAccessCidrs" not in pc.inputs and "encryptionConfigKeyArn" not in pc.inputs


def test_no_loadbalancer_or_nodeport_anywhere(run):
    assert raycluster(run)["spec"]["headGroupSpec"]["serviceType"] == "ClusterIP"
    for r in run.resources:
        if r.type == "kubernetes:core/v1:Service":
            assert r["spec"].get("type", "ClusterIP") == "ClusterIP", r.name
        assert not r.type.startswith("kubernetes:networking.k8s.io/v1:Ingress"), r.name
        if r.type == "kubernetes:helm.sh/v3:Release":
            assert "LoadBalancer" not in json.dumps(r["values"]) and "NodePort" not in json.dumps(r["values"])


def test_network_policy_head_policy_selects_the_head_only(run):
    """The flows themselves are judged in tests/components/test_least_privilege.py."""
    np = run.one("kubernetes:networking.k8s.io/v1:NetworkPolicy", "head-ingress")
    rc = raycluster(run)
    assert np["metadata"]["namespace"] == rc["metadata"]["namespace"]
    sel = np["spec"]["podSelector"]["matchLabels"]
    head_labels = rc["spec"]["headGroupSpec"]["template"]["metadata"]["labels"]
    assert sel.items() <= head_labels.items()
    for g in rc["spec"]["workerGroupSpecs"]:
        assert not sel.items() <= g["template"]["metadata"]["labels"].items()
    assert np["spec"]["policyTypes"] == ["Ingress"]
    kubernetes_validate.validate(
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": np["metadata"], "spec": np["spec"]},
        K8S_VERSION,
        strict=True,
    )
    # enforced: the VPC CNI ignores NetworkPolicy objects unless this is on
    assert run.one("eks:index:Cluster")["vpcCniOptions"]["enableNetworkPolicy"] is True


def test_network_policy_escape_hatch():
    run = run_program({"networkPolicy": "false", "efaCheck": "false"})
    assert not run.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    assert run.one("eks:index:Cluster")["vpcCniOptions"]["enableNetworkPolicy"] is False


def test_network_policy_extra_namespace_gets_the_dashboard_port_only():
    from ray_efa_eks.components.ray.raycluster import head_network_policy_spec

    spec = head_network_policy_spec(["tools"])
    extra = spec["ingress"][1]
    assert extra["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "tools"}}}]
    assert extra["ports"] == [{"protocol": "TCP", "port": 8265}]
    kubernetes_validate.validate(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "x", "namespace": "ray"},
            "spec": spec,
        },
        K8S_VERSION,
        strict=True,
    )
