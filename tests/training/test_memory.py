"""GPU memory per rank (training/memory.py) against torch's own FSDP memory tracker, the chunked loss against
cross_entropy, the docs table, and the refusal before Ray starts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from ray_efa_eks.training import memory  # noqa: E402
from ray_efa_eks.training.model import PRESETS, DecoderLM, ModelConfig, lm_loss  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _reference_loss(logits, tokens):
    """What lm_loss computed before: cross_entropy on an fp32 copy of all the logits."""
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)).float(), tokens[:, 1:].reshape(-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape, chunk", [((3, 17, 50), 4), ((2, 64, 1000), 1024), ((2, 9, 7), 3)])
def test_chunked_loss_equals_cross_entropy_on_fp32_logits(dtype, shape, chunk):
    torch.manual_seed(0)
    base = (torch.randn(*shape) * 3).to(dtype)
    tokens = torch.randint(0, shape[-1], shape[:2])
    a, b = base.clone().requires_grad_(), base.clone().requires_grad_()
    got, want = lm_loss(a, tokens, chunk), _reference_loss(b, tokens)
    got.backward()
    want.backward()
    assert got.dtype == torch.float32
    assert got.item() == pytest.approx(want.item(), rel=1e-6, abs=1e-6)
    assert a.grad.dtype == dtype
    bf16 = dtype == torch.bfloat16  # the same fp32 math, cast once: at most one bf16 ulp apart (2**-7 relative)
    torch.testing.assert_close(a.grad.float(), b.grad.float(), rtol=2**-7 if bf16 else 1e-5, atol=0 if bf16 else 1e-7)
    assert not a.grad[:, -1].any()  # the last position predicts nothing


# -- the estimate against torch's FSDPMemTracker (FSDP2, bf16 mixed precision, a fake process group, on CPU) --------

SHAPES = {
    "tiny": PRESETS["tiny"],
    "mid": ModelConfig(vocab_size=4096, d_model=256, n_layers=4, n_heads=4, d_ff=1024, seq_len=256),
    "wide-vocab": ModelConfig(vocab_size=8000, d_model=512, n_layers=2, n_heads=8, d_ff=2048, seq_len=128),
}


def _measured_peak(cfg: ModelConfig, world: int, batch: int, loss=lm_loss, fake: bool = True) -> float:
    """Peak bytes of one rank over a training step as torch's FSDPMemTracker counts them: FSDP2 with the GPU's
    MixedPrecisionPolicy, AdamW, ``world`` ranks faked by torch's fake process group (collectives are no-ops, shard
    sizes are real).

    ``fake``: model, optimizer and batch are FakeTensors (torch's FakeTensorMode: every tensor has its real shape,
    dtype and storage size, no op computes), which the tracker supports (mem_tracker.py reads
    ``active_fake_mode()``; torch's docs use it to estimate memory without running). The tracker counts the same
    storages either way (``test_fake_tensors_count_what_real_ones_do``), in seconds instead of minutes on CPU. The
    device mesh is made outside the mode (``init_device_mesh`` reads a real rank tensor), as fully_shard's default.
    """
    import contextlib

    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (world,))
        with FakeTensorMode() if fake else contextlib.nullcontext():
            torch.manual_seed(0)
            model = DecoderLM(cfg)
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            for block in model.blocks:
                fully_shard(block, mesh=mesh, mp_policy=mp)
            fully_shard(model, mesh=mesh, mp_policy=mp)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            x = torch.randint(0, cfg.vocab_size, (batch, cfg.seq_len))
            tracker = FSDPMemTracker(model, opt)
            tracker.track_inputs((x,))
            with tracker:
                for i in range(2):  # the second step has the optimizer's state from the start
                    loss(model(x), x).backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    if i == 0:
                        tracker.reset_mod_stats()
            (peak,) = tracker.get_tracker_snapshot("peak").values()
            return float(peak["Total"])
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("name, world", [("tiny", 8), ("mid", 2), ("wide-vocab", 8)])
def test_the_estimate_bounds_torchs_fsdp_memory_tracker(name, world):
    """Never below what torch counts, and within 20% above it (the estimate adds phases' worst cases)."""
    cfg = SHAPES[name]
    measured = _measured_peak(cfg, world, 4)
    est = memory.estimate(cfg, world, 4)["total"]
    assert measured <= est <= 1.2 * measured, (name, world, measured / 2**20, est / 2**20)


def test_fake_tensors_count_what_real_ones_do():
    """The measurements above use FakeTensors; on real ones (each op computed) the tracker's peak is the same byte
    count. Measured once on every shape above as well (torch 2.13: tiny-8 5348044, mid-2 96056460,
    wide-vocab-8 82237020 both ways); tiny here keeps it checked against the installed torch."""
    assert _measured_peak(SHAPES["tiny"], 8, 4, fake=False) == _measured_peak(SHAPES["tiny"], 8, 4)


def test_the_chunked_loss_lowers_the_measured_peak():
    """The fp32 copy of every logit and its log-softmax were the largest single cost at the end of forward."""
    cfg = ModelConfig(vocab_size=4096, d_model=128, n_layers=1, n_heads=4, d_ff=512, seq_len=128)
    before, after = _measured_peak(cfg, 8, 4, loss=_reference_loss), _measured_peak(cfg, 8, 4)
    logits = 4 * cfg.seq_len * cfg.vocab_size
    assert before - after > 4 * logits, (before / 2**20, after / 2**20)  # more than one fp32 copy saved


def test_1b_fits_an_l4_from_two_ranks_and_not_on_one():
    l4 = 22888  # catalogue gpu_memory_mib of g6.*: what the stack puts in RAY_EFA_EKS_GPU_MEMORY_MIB
    assert not memory.fits(PRESETS["1b"], 1, 8, l4)[0] and memory.fits(PRESETS["1b"], 2, 8, l4)[0]
    assert memory.min_ranks(PRESETS["1b"], 8, l4) == 2 and memory.min_ranks(PRESETS["1b"], 8, 16384) == 5
    assert not memory.fits(PRESETS["1b"], 8, 32, l4)[0]  # activations do not shard: a larger batch does not fit
    assert memory.min_ranks(PRESETS["1b"], 64, l4) is None
    assert memory.fits(PRESETS["tiny"], 1, 8, 16384)[0]


def _catalogue_gpus() -> list[tuple[str, float, str]]:
    from ray_efa_eks.components.nodes.instances import CATALOGUE

    by: dict[tuple[str, int], set[str]] = {}
    for it in CATALOGUE.values():
        if it.gpus:
            by.setdefault((str(it.gpu_model), it.gpu_memory_mib), set()).add(it.family)
    return [
        (model, mib, ", ".join(sorted(fams)))
        for (model, mib), fams in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0]))
    ]


def test_docs_training_md_holds_the_table_of_every_catalogue_gpu():
    text = (REPO / "docs/training.md").read_text()
    m = re.search(r"<!-- memory-table:start -->\n(.*?)\n<!-- memory-table:end -->", text, re.S)
    want = memory.markdown_tables(PRESETS, _catalogue_gpus())
    assert m and m.group(1).strip() == want, "docs/training.md's memory table is stale; paste:\n" + want


# -- the refusal: before Ray starts with --workers, once the cluster's GPUs are counted without ----------------------


def test_train_refuses_a_preset_that_cannot_fit_before_ray(monkeypatch, capsys):
    from ray_efa_eks.training.__main__ import main

    monkeypatch.setenv(memory.GPU_MEMORY_ENV, "22888")
    monkeypatch.setenv(memory.GPU_MODEL_ENV, "L4")
    # an unreachable address: a refusal that came after reaching for Ray would say so (exit 2)
    code = main(["--address", "127.0.0.1:1", "--use-gpu", "--workers", "1", "--preset", "1b"])
    err = capsys.readouterr().err
    assert code == 64, err
    assert "--preset 1b with 1 rank(s) and --batch-size 8 needs about 24.3 GiB" in err and "L4 (22.4 GiB)" in err
    assert "at least 2 ranks" in err and "--batch-size" in err
    assert main(["--address", "127.0.0.1:1", "--use-gpu", "--workers", "2", "--preset", "1b"]) == 2  # fits: on to Ray
    monkeypatch.delenv(memory.GPU_MEMORY_ENV)  # a cluster the stack did not make: not judged
    assert main(["--address", "127.0.0.1:1", "--use-gpu", "--workers", "1", "--preset", "1b"]) == 2


def test_without_workers_the_check_runs_once_the_ranks_are_known():
    from ray_efa_eks.efacheck.exit_codes import EXIT_USAGE
    from ray_efa_eks.training.errors import CliError
    from ray_efa_eks.training.request import TrainRequest, gpu_memory_problem

    req = TrainRequest(workers=1, preset="1b", batch_size=8)
    with pytest.raises(CliError) as e:
        gpu_memory_problem(None, req, {memory.GPU_MEMORY_ENV: "16384", memory.GPU_MODEL_ENV: "T4"})
    assert e.value.code == EXIT_USAGE and "at least 5 ranks" in str(e.value)
    gpu_memory_problem(None, TrainRequest(workers=8, preset="1b", batch_size=8), {memory.GPU_MEMORY_ENV: "16384"})


def test_one_rank_per_gpu_from_the_node_table(capsys):
    from ray_efa_eks.training.errors import EXIT_TOO_SMALL, CliError
    from ray_efa_eks.training.reach import place_gpu_ranks
    from ray_efa_eks.training.request import TrainRequest
    from ray_efa_eks.training.trainer import gpu_ranks, gpus_per_node

    nodes = [
        {"Alive": True, "Resources": {"CPU": 46.0, "GPU": 4.0}},
        {"Alive": True, "Resources": {"GPU": 4.0}},
        {"Alive": True, "Resources": {"CPU": 0.0}},
        {"Alive": False, "Resources": {"GPU": 4.0}},
    ]
    assert gpus_per_node(nodes) == [4, 4] and gpu_ranks([4, 4]) == (8, "2 node(s) x 4 GPUs")
    assert gpu_ranks([8, 4]) == (12, "8 + 4 GPUs on 2 nodes") and gpu_ranks([])[0] == 0
    assert (
        place_gpu_ranks(TrainRequest(workers=None), nodes).workers == 8
        and "8 ranks, one per GPU" in capsys.readouterr().err
    )
    assert place_gpu_ranks(TrainRequest(workers=8), nodes).workers == 8
    assert "warning" not in capsys.readouterr().err
    with pytest.raises(CliError) as e:
        place_gpu_ranks(TrainRequest(workers=None), nodes[2:])
    assert e.value.code == EXIT_TOO_SMALL and "no GPUs yet" in str(e.value)
