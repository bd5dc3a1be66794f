"""Network: a VPC with public and private subnets in two or more AZs, one NAT gateway, an S3 gateway endpoint and the
ECR interface endpoints.

EKS needs subnets in at least two AZs; the GPU nodes live in one of them (EFA
does not cross AZs), so that AZ's private subnet is exposed on its own.

S3 traffic from the private subnets (checkpoints of several GB, image layers
ECR serves from S3) would otherwise pass the NAT gateway, billed per GB; a
gateway VPC endpoint on the private route tables carries it for free.

Image pulls from the account's private ECR (components/addons/image_cache.py) also reach ECR's API (``ecr.api``:
authentication, manifests) and registry (``ecr.dkr``) endpoints; interface endpoints for both, with private DNS, keep
them off the NAT gateway too ("Amazon ECR interface VPC endpoints (AWS PrivateLink)",
https://docs.aws.amazon.com/AmazonECR/latest/userguide/vpc-endpoints.html: both endpoints plus the S3 gateway
endpoint for the layers). Each endpoint has a network interface in every private subnet's AZ, reachable on 443 from
the VPC only; AWS bills it per endpoint per AZ-hour (https://aws.amazon.com/privatelink/pricing/, components/nodes/cost.py).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws


@dataclass
class NetworkArgs:
    """Inputs of :class:`Network`."""

    cidr: str
    """VPC CIDR; split into /(prefix+4) subnets, public first then private."""
    availability_zones: list[str]
    """At least two AZs for the cluster's subnets (public and private in each)."""
    gpu_availability_zone: str
    """The GPU nodes' AZ: one of ``availability_zones``, or (an AZ whose zone ID EKS refuses for cluster subnets)
    another one, which then gets a private subnet of its own that the cluster's subnet lists leave out."""
    cluster_name: str
    """Used in the ``kubernetes.io/cluster/<name>`` subnet tags."""
    nat_gateways: int = 1
    """One NAT gateway by default (cost); one per AZ for AZ-independent egress."""
    s3_gateway_endpoint: bool = True
    """Route S3 from the private subnets through a (free) gateway VPC endpoint instead of the NAT gateway."""
    region: str | None = None
    """Region of the VPC, for the endpoint's service name; unset: ``aws:region``, else the provider's region."""
    ecr_interface_endpoints: bool = True
    """Interface endpoints for ``ecr.api`` and ``ecr.dkr`` in the private subnets (private DNS): image pulls from the
    account's ECR skip the NAT gateway."""


class Network(pulumi.ComponentResource):
    """VPC, subnets, internet and NAT gateways and their routes."""

    vpc_id: pulumi.Output[str]
    public_subnet_ids: pulumi.Output[list[str]]
    private_subnet_ids: pulumi.Output[list[str]]
    gpu_subnet_id: pulumi.Output[str]
    s3_endpoint: aws.ec2.VpcEndpoint | None
    """The S3 gateway endpoint (None when turned off)."""
    ecr_endpoints: list[aws.ec2.VpcEndpoint]
    """The ``ecr.api`` and ``ecr.dkr`` interface endpoints (empty when turned off)."""
    ecr_subnet_azs: list[str]
    """The AZs each ECR endpoint has a network interface in (each billed per hour)."""

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:index:Network", name, None, opts)
        azs = list(args.availability_zones)
        if len(azs) < 2:
            raise ValueError(f"Network {name}: EKS needs subnets in at least two AZs, got {azs}")
        if not 1 <= args.nat_gateways <= len(azs):
            raise ValueError(f"Network {name}: nat_gateways must be 1..{len(azs)}, got {args.nat_gateways}")
        net = ipaddress.ip_network(args.cidr)
        blocks = list(net.subnets(new_prefix=net.prefixlen + 4))
        child = pulumi.ResourceOptions(parent=self)
        cluster_tag = {f"kubernetes.io/cluster/{args.cluster_name}": "shared"}

        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={"Name": f"{name}-vpc"},
            opts=child,
        )
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, opts=child)
        public_rt = aws.ec2.RouteTable(
            f"{name}-public", vpc_id=vpc.id, routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": igw.id}], opts=child
        )
        public, private, nats, private_rts = [], [], [], []
        for i, az in enumerate(azs):
            pub = aws.ec2.Subnet(
                f"{name}-public-{az}",
                vpc_id=vpc.id,
                cidr_block=str(blocks[i]),
                availability_zone=az,
                map_public_ip_on_launch=True,
                tags={"Name": f"{name}-public-{az}", "kubernetes.io/role/elb": "1", **cluster_tag},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-public-{az}", subnet_id=pub.id, route_table_id=public_rt.id, opts=child
            )
            public.append(pub)
            if i < args.nat_gateways:
                eip = aws.ec2.Eip(f"{name}-nat-{az}", domain="vpc", opts=child)
                nats.append(
                    aws.ec2.NatGateway(
                        f"{name}-nat-{az}",
                        subnet_id=pub.id,
                        allocation_id=eip.id,
                        opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
                    )
                )
        for i, az in enumerate(azs):
            nat = nats[i % len(nats)] if args.nat_gateways > 1 else nats[0]
            rt = aws.ec2.RouteTable(
                f"{name}-private-{az}",
                vpc_id=vpc.id,
                routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nat.id}],
                opts=child,
            )
            priv = aws.ec2.Subnet(
                f"{name}-private-{az}",
                vpc_id=vpc.id,
                cidr_block=str(blocks[len(azs) + i]),
                availability_zone=az,
                tags={"Name": f"{name}-private-{az}", "kubernetes.io/role/internal-elb": "1", **cluster_tag},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(f"{name}-private-{az}", subnet_id=priv.id, route_table_id=rt.id, opts=child)
            private.append(priv)
            private_rts.append(rt)
        gpu_only = None
        if args.gpu_availability_zone not in azs:  # GPU nodes only: the cluster never gets this subnet
            az = args.gpu_availability_zone
            rt = aws.ec2.RouteTable(
                f"{name}-private-{az}",
                vpc_id=vpc.id,
                routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nats[0].id}],
                opts=child,
            )
            gpu_only = aws.ec2.Subnet(
                f"{name}-private-{az}",
                vpc_id=vpc.id,
                cidr_block=str(blocks[2 * len(azs)]),
                availability_zone=az,
                tags={"Name": f"{name}-private-{az}", "kubernetes.io/role/internal-elb": "1", **cluster_tag},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-private-{az}", subnet_id=gpu_only.id, route_table_id=rt.id, opts=child
            )
            private_rts.append(rt)
        self.s3_endpoint = None
        # The provider's region (AWS_REGION works too) when neither the args nor aws:region name one.
        region = args.region or pulumi.Config("aws").get("region") or aws.get_region_output().region
        if args.s3_gateway_endpoint:
            self.s3_endpoint = aws.ec2.VpcEndpoint(
                f"{name}-s3",
                vpc_id=vpc.id,
                service_name=pulumi.Output.concat("com.amazonaws.", region, ".s3"),
                vpc_endpoint_type="Gateway",
                route_table_ids=[rt.id for rt in private_rts],
                tags={"Name": f"{name}-s3"},
                opts=child,
            )
        self.ecr_endpoints = []
        self.ecr_subnet_azs = []
        if args.ecr_interface_endpoints:
            self.ecr_subnet_azs = azs + ([args.gpu_availability_zone] if gpu_only is not None else [])
            sg = aws.ec2.SecurityGroup(
                f"{name}-ecr-endpoints",
                vpc_id=vpc.id,
                description="ECR interface endpoints: HTTPS from the VPC",
                ingress=[
                    {
                        "protocol": "tcp",
                        "from_port": 443,
                        "to_port": 443,
                        "cidr_blocks": [args.cidr],
                        "description": "HTTPS from the VPC's nodes and pods",
                    }
                ],
                tags={"Name": f"{name}-ecr-endpoints"},
                opts=child,
            )
            subnets = [s.id for s in private] + ([gpu_only.id] if gpu_only is not None else [])
            for svc in ("ecr.api", "ecr.dkr"):
                self.ecr_endpoints.append(
                    aws.ec2.VpcEndpoint(
                        f"{name}-{svc.replace('.', '-')}",
                        vpc_id=vpc.id,
                        service_name=pulumi.Output.concat("com.amazonaws.", region, f".{svc}"),
                        vpc_endpoint_type="Interface",
                        private_dns_enabled=True,
                        subnet_ids=subnets,
                        security_group_ids=[sg.id],
                        tags={"Name": f"{name}-{svc}"},
                        opts=child,
                    )
                )

        self.vpc_id = vpc.id
        self.public_subnet_ids = pulumi.Output.all(*[s.id for s in public])
        self.private_subnet_ids = pulumi.Output.all(*[s.id for s in private])
        self.gpu_subnet_id = (gpu_only or private[azs.index(args.gpu_availability_zone)]).id
        self.register_outputs(
            {
                "vpcId": self.vpc_id,
                "publicSubnetIds": self.public_subnet_ids,
                "privateSubnetIds": self.private_subnet_ids,
                "gpuSubnetId": self.gpu_subnet_id,
            }
        )
