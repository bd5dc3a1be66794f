"""Where each catalogue GPU type is planned under mocks."""

from __future__ import annotations

from ray_efa_eks.tools.mockrun import OFFERINGS, offered_azs


def catalogue_gpu_region(name: str) -> str:
    """us-east-1 where EC2 offers ``name`` there, else the first region that does (p5e.48xlarge: not in us-east-1)."""
    regions = [r for r in OFFERINGS if offered_azs(r, name)]
    return "us-east-1" if "us-east-1" in regions else regions[0]
