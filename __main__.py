"""ray-efa-eks: the stack program under ``pulumi up``; the EfaRayCluster component provider when the engine starts
this directory as a plugin (``pulumi package add``: ``python <this dir> <engine address>``, see
components/provider.py). The program declares no resource itself: stack config -> EfaRayCluster -> stack outputs."""

import pulumi

from ray_efa_eks.components.provider import serve, started_as_plugin

if started_as_plugin():
    serve()
else:
    from ray_efa_eks.components.config.config import StackConfig
    from ray_efa_eks.components.stack import EfaRayCluster

    cfg = StackConfig.from_pulumi()  # raises on bad config before anything is registered
    stack = EfaRayCluster(f"ray-efa-{pulumi.get_stack()}", cfg)
    for key, value in stack.outputs().items():
        pulumi.export(key, value)
