"""Add-ons on the cluster: device plugins, the Cluster Autoscaler, the node agent, the EFA gate Job and the DLC image
cache and pre-pull."""
