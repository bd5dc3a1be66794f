"""Multi-node FSDP2 training job for the KubeRay cluster (Ray Train + torch.distributed)."""

if __name__ == "training":  # a checkout's folder, imported by the wrong name (``python -m training``)
    import sys

    print(
        "training is the package ray_efa_eks.training: run `python -m ray_efa_eks.training --json` "
        "(in a checkout, `pip install -e .` once)",
        file=sys.stderr,
    )
    raise SystemExit(64)
