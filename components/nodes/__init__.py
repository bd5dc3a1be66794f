"""The node layer: the system and EFA GPU node groups, their launch templates and rollout guards, GPU capacity, the
instance catalogue (and what a node offers, costs and takes to start)."""
