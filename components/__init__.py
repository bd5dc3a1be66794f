"""Reusable Pulumi components for Ray Train on EKS with EFA (VPC, EKS, node groups, KubeRay, EFA gate)."""
