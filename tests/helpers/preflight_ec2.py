"""A stand-in EC2 client for preflight's checks (tools/preflight.py), shared by its test files: each operation answers
as the test says, in AWS's response shapes; an operation it is not told about answers NotImplemented, the way moto's
missing actions do. Imported as ``tests.helpers.preflight_ec2``."""

from __future__ import annotations

from types import SimpleNamespace

from botocore.exceptions import ClientError

R, ITYPE = "us-east-1", "g6.12xlarge"
RID = "cr-0123456789abcdef0"
NOT_IMPLEMENTED = "NotImplemented"


def err(code: str, status: int = 400, op: str = "Op") -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": f"{code} message"}, "ResponseMetadata": {"HTTPStatusCode": status}}, op
    )


def g6(**kw):
    return {
        "InstanceType": ITYPE,
        "VCpuInfo": {"DefaultVCpus": 48},
        "GpuInfo": {"Gpus": [{"Name": "L4", "Count": 4}]},
        "NetworkInfo": {"EfaSupported": True, "MaximumNetworkCards": 1},
        "SupportedUsageClasses": ["on-demand", "spot"],
        **kw,
    }


class EC2:
    """Answers each operation (snake_case) from ``answers``: a value, a list of pages, an exception or a function."""

    def __init__(self, region: str = R, **answers):
        self.meta = SimpleNamespace(region_name=region)
        self.calls: list[tuple[str, dict]] = []
        self.answers = {
            "describe_instance_type_offerings": [
                {
                    "InstanceTypeOfferings": [
                        {"InstanceType": ITYPE, "Location": "us-east-1b"},
                        {"InstanceType": ITYPE, "Location": "us-east-1a"},
                        {"InstanceType": "p5.48xlarge", "Location": "us-east-1d"},
                    ]
                }
            ],  # another type's: not ours
            "describe_availability_zones": {
                "AvailabilityZones": [
                    {"ZoneName": "us-east-1b", "ZoneId": "use1-az1"},
                    {"ZoneName": "us-east-1a", "ZoneId": "use1-az6"},
                    {"ZoneName": "us-east-1e", "ZoneId": "use1-az3"},
                    {"ZoneName": "us-east-1c"},
                ]
            },
            "describe_instance_types": lambda **kw: [{"InstanceTypes": [g6()]}],
            "describe_instances": [{"Reservations": []}],
            "create_placement_group": err("DryRunOperation", 412),
            "describe_capacity_reservations": [{"CapacityReservations": []}],
            "describe_capacity_block_offerings": {"CapacityBlockOfferings": []},
            **answers,
        }

    def _answer(self, op: str, **kw):
        self.calls.append((op, kw))
        a = self.answers.get(op)
        if a is None:
            raise err(NOT_IMPLEMENTED, 501, op)
        if isinstance(a, Exception):
            raise a
        return a(**kw) if callable(a) else a

    def get_paginator(self, op):
        ec2 = self

        class Paginator:
            def paginate(self, **kw):
                pages = ec2._answer(op, **kw)
                return pages if isinstance(pages, list) else [pages]

        return Paginator()

    def __getattr__(self, op):
        if op.startswith(("describe_", "create_")):
            return lambda **kw: self._answer(op, **kw)
        raise AttributeError(op)


def odcr(**kw):
    return {
        "CapacityReservationId": RID,
        "InstanceType": ITYPE,
        "AvailabilityZone": "us-east-1b",
        "State": "active",
        "AvailableInstanceCount": 2,
        "TotalInstanceCount": 2,
        **kw,
    }
