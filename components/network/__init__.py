"""The network layer: the VPC, the NetworkPolicy specs every namespace shares, and where the GPU nodes go."""
