"""The EFA proof: the in-cluster check the gate Job ships to the Ray head (sweep, NCCL log verdict, counters,
stack probe, report), and the local Ray cluster it and training rehearse on. Self-contained: it imports nothing
outside itself, so the gate ships it alone (the FSDP message sizes are data: fsdp_shapes.py).
"""

if __name__ == "efacheck":  # a checkout's folder, imported by the wrong name (``python -m efacheck.efa_check``)
    import sys

    print(
        "efacheck is the package ray_efa_eks.efacheck: run `python -m ray_efa_eks.efacheck.<module>` "
        "(in a checkout, `pip install -e .` once)",
        file=sys.stderr,
    )
    raise SystemExit(64)
