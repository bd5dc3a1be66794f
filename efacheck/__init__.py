"""The EFA proof: the in-cluster check the gate Job ships to the Ray head (sweep, NCCL log verdict, counters,
stack probe, report), and the local Ray cluster it and training rehearse on. Self-contained: it imports nothing
outside itself, so the gate ships it alone (the FSDP message sizes are data: fsdp_shapes.py).
"""
