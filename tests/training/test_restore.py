"""Resume reads only each rank's own shards, straight from the checkpoint's storage (training/restore.py).

Two real processes (gloo, FSDP2 over 2 ranks, on CPU) save a checkpoint as train_func does, then load it through
``ArrowReader`` over a filesystem that counts the bytes each rank reads per file: its own ``.distcp`` (and, of the
other rank's, only the few replicated values DCP saved once there), and the state comes back equal. ``as_directory()`` would have copied both ranks' files to each node.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")


class Recording:
    """A pyarrow filesystem that notes every file opened for reading (what ArrowReader calls)."""

    def __init__(self, log: Path, rank: int) -> None:
        import pyarrow.fs

        self.fs, self.log, self.rank = pyarrow.fs.LocalFileSystem(), log, rank

    def open_input_file(self, path: str):
        return Counted(self.fs.open_input_file(path), self.log, self.rank, os.path.basename(path))


class Counted:
    """A file that notes how many bytes each rank read from it (when closed)."""

    def __init__(self, f, log: Path, rank: int, name: str) -> None:
        self.f, self.log, self.rank, self.name, self.bytes = f, log, rank, name, 0

    def read(self, n: int = -1) -> bytes:
        data = self.f.read() if n is None or n < 0 else self.f.read(n)
        self.bytes += len(data)
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def __getattr__(self, name: str):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        with open(self.log, "a") as out:
            out.write(json.dumps({"rank": self.rank, "file": self.name, "bytes": self.bytes}) + "\n")
        self.f.close()


def _rank(rank: int, world: int, port: int, ckpt: str, log: str) -> None:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.fsdp import fully_shard

    from ray_efa_eks.training.model import PRESETS, DecoderLM, lm_loss
    from ray_efa_eks.training.restore import ArrowReader, read_torch

    class Ckpt:  # the two attributes of ray.train.Checkpoint that ArrowReader.of reads
        filesystem, path = Recording(Path(log), rank), ckpt

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:

        def build(seed: int):
            torch.manual_seed(seed)
            m = DecoderLM(PRESETS["tiny"])
            for b in m.blocks:
                fully_shard(b)
            fully_shard(m)
            return m, torch.optim.AdamW(m.parameters(), lr=1e-3)

        model, opt = build(0)
        x = torch.randint(0, 1024, (2, 64))
        lm_loss(model(x), x).backward()
        opt.step()
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=ckpt)
        if rank == 0:
            torch.save({"step": 7}, os.path.join(ckpt, "meta.pt"))
        dist.barrier()
        fresh, fresh_opt = build(1)  # other weights: the load must overwrite them
        msd2, osd2 = get_state_dict(fresh, fresh_opt)
        state = {"model": msd2, "optim": osd2}
        dcp.load(state, storage_reader=ArrowReader.of(Ckpt))
        set_state_dict(fresh, fresh_opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values()):
            assert torch.equal(a.to_local(), b.to_local()), name
        assert read_torch(Ckpt, "meta.pt") == {"step": 7}
    finally:
        dist.destroy_process_group()


def test_each_rank_reads_only_its_own_shards(tmp_path):
    import socket

    import torch.distributed.checkpoint  # noqa: F401  imported here once: the forked ranks inherit them
    import torch.distributed.fsdp  # noqa: F401
    import torch.multiprocessing as mp

    from ray_efa_eks.training import model, restore  # noqa: F401

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ckpt, log = tmp_path / "step_000007", tmp_path / "opened.jsonl"
    # fork, not spawn: each rank starts with torch, DCP and FSDP already imported (spawn re-imported them in each
    # rank: most of this test's time). Safe as DataLoader workers are: a rank sets torch to one thread before any op,
    # so no OpenMP region of this process is entered again, and nothing here uses CUDA. A rank's exception still
    # fails the test (start_processes raises ProcessRaisedException with it).
    mp.start_processes(_rank, args=(2, port, str(ckpt), str(log)), nprocs=2, start_method="fork")
    files = sorted(p.name for p in ckpt.iterdir())
    assert files == [".metadata", "__0_0.distcp", "__1_0.distcp", "meta.pt"]
    read: dict[int, dict[str, int]] = {0: {}, 1: {}}
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        read[entry["rank"]][entry["file"]] = read[entry["rank"]].get(entry["file"], 0) + entry["bytes"]
    for rank in (0, 1):
        own, other = f"__{rank}_0.distcp", f"__{1 - rank}_0.distcp"
        shard = (ckpt / own).stat().st_size
        # its own shard file, whole; of the other rank's file only what DCP deduplicated into it (replicated
        # scalars such as AdamW's step counts, saved once): a few bytes, not the other rank's shards
        assert read[rank][own] >= 0.95 * shard, read
        assert read[rank].get(other, 0) < 0.05 * (ckpt / other).stat().st_size, read
