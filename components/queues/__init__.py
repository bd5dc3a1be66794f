"""Team job queues: Kueue, each team's queues and namespace, and the ``jobQueues`` grammar."""
