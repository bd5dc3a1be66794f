"""The EFA proof: the in-cluster check the gate Job ships to the Ray head (sweep, NCCL log verdict, counters,
stack probe, report). Self-contained: shipped alone (with the training model it sizes FSDP messages from).
"""
