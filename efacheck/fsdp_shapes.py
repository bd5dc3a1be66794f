"""The FSDP units of the training job's model presets, as data: the proof sizes its FSDP messages from these
shapes, so it ships and runs without the training package (and without building a model).

Per preset: ``blocks`` (how many transformer blocks; each is its own FSDP unit, as train_func shards them),
``block`` (the parameter shapes of one block, all alike) and ``root`` (the parameters left to the root unit).
They are ``training/model.py``'s ``DecoderLM`` for each of its ``PRESETS``; tests/efacheck/test_sweep.py builds
the real model and fails, printing the table to put here, when the two drift apart.
"""

from __future__ import annotations

PRESETS: dict[str, dict] = {
    "tiny": {
        "blocks": 2,
        "block": [(128,), (128,), (384, 128), (128, 128), (128,), (128,), (512, 128), (128, 512)],
        "root": [(1024, 128), (64, 128), (128,), (128,), (1024, 128)],
    },
    "1b": {
        "blocks": 20,
        "block": [(2048,), (2048,), (6144, 2048), (2048, 2048), (2048,), (2048,), (8192, 2048), (2048, 8192)],
        "root": [(32000, 2048), (1024, 2048), (2048,), (2048,), (32000, 2048)],
    },
}


def units(preset: str) -> list[tuple[str, list[tuple[int, ...]]]]:
    """(unit name, parameter shapes) per FSDP unit of ``preset``: ``blocks.0`` ... then ``root``."""
    try:
        p = PRESETS[preset]
    except KeyError:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted(PRESETS)}") from None
    return [(f"blocks.{i}", list(p["block"])) for i in range(p["blocks"])] + [("root", list(p["root"]))]
