"""The Ray layer: the KubeRay operator and its chart versions, the RayCluster, Ray's autoscaler and a team's RayJob."""
