"""ray-efa-eks stack: stack config -> EfaRayCluster -> stack outputs; declares no resource itself."""

import pulumi

from ray_efa_eks.components.config import StackConfig
from ray_efa_eks.components.stack import EfaRayCluster

cfg = StackConfig.from_pulumi()  # raises on bad config before anything is registered
stack = EfaRayCluster(f"ray-efa-{pulumi.get_stack()}", cfg)
for key, value in stack.outputs().items():
    pulumi.export(key, value)
