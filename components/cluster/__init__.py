"""The cluster layer: the EKS control plane, its supported versions, the live cluster's state and Pod Identity roles."""
