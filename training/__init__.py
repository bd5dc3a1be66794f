"""Multi-node FSDP2 training job for the KubeRay cluster (Ray Train + torch.distributed)."""
