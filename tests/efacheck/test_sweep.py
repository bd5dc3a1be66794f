"""efacheck.sweep: the three FSDP collectives for real on 2 gloo ranks, nccl-tests' factors, the presets' FSDP
message sizes against a real FSDP2 step, and the Socket comparison in fresh processes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from ray_efa_eks.efacheck import sweep
from ray_efa_eks.training.model import PRESETS, DecoderLM, approx_params, count_params
from tests.helpers.gloo_sweep import free_port, spawn_sweep, start_ranks


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    assert "NCCL_NET" not in os.environ
    entries = sweep.plan(16 << 10, 64 << 10, 2, preset="tiny")
    base = tmp_path_factory.mktemp("sweeps")
    efa = [r["rows"] for r in spawn_sweep(base / "efa", {}, entries)]
    sock = [r["rows"] for r in spawn_sweep(base / "socket", sweep.SOCKET_ENV, entries)]
    return entries, efa, sock


def test_bus_factor_is_nccl_tests_formula() -> None:
    for n in (1, 2, 8, 16):
        assert sweep.bus_factor("all_reduce", n) == pytest.approx(2 * (n - 1) / n)
        assert sweep.bus_factor("all_gather_into_tensor", n) == pytest.approx((n - 1) / n)
        assert sweep.bus_factor("reduce_scatter_tensor", n) == pytest.approx((n - 1) / n)
    with pytest.raises(ValueError, match="'broadcast'"):
        sweep.bus_factor("broadcast", 2)


def test_pow2_sizes() -> None:
    assert sweep.pow2_sizes(1 << 20, 1 << 23) == [1 << 20, 1 << 21, 1 << 22, 1 << 23]
    assert sweep.pow2_sizes(3000, 10000) == [4096, 8192]
    with pytest.raises(ValueError, match="swap"):
        sweep.pow2_sizes(10, 1)


def test_fsdp_shapes_are_the_training_models() -> None:
    """efacheck/fsdp_shapes.py is data the proof ships instead of importing training: it must be the real model's."""
    from ray_efa_eks.efacheck import fsdp_shapes

    real = {}
    for name, cfg in PRESETS.items():
        with torch.device("meta"):
            model = DecoderLM(cfg)
        blocks = [[tuple(p.shape) for p in b.parameters()] for b in model.blocks]
        assert all(b == blocks[0] for b in blocks), "fsdp_shapes assumes identical blocks"
        in_blocks = {id(p) for b in model.blocks for p in b.parameters()}
        real[name] = {
            "blocks": len(blocks),
            "block": blocks[0],
            "root": [tuple(p.shape) for p in model.parameters() if id(p) not in in_blocks],
        }
    assert fsdp_shapes.PRESETS == real, f"training/model.py changed: set efacheck/fsdp_shapes.py PRESETS = {real!r}"


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_fsdp_units_cover_the_real_parameters(preset: str) -> None:
    cfg = PRESETS[preset]
    with torch.device("meta"):
        model = DecoderLM(cfg)
    units = sweep.fsdp_units(preset, 2)
    assert [u["unit"] for u in units] == [f"blocks.{i}" for i in range(cfg.n_layers)] + ["root"]
    assert sum(u["params"] for u in units) == count_params(model) == approx_params(cfg)
    for i, block in enumerate(model.blocks):
        assert units[i]["params"] == sum(p.numel() for p in block.parameters())
    sizes = sweep.fsdp_message_sizes(preset, 2)
    # all-gather in bf16 (2 B), reduce-scatter in fp32 (4 B), as train_func's MixedPrecisionPolicy
    assert sizes["all_gather_into_tensor"] == sorted({u["numel"] * 2 for u in units})
    assert sizes["reduce_scatter_tensor"] == sorted({u["numel"] * 4 for u in units})


def _fsdp_rank(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.set_num_threads(1)
    seen = []
    ag, rs = dist.all_gather_single, dist.reduce_scatter_single

    def rec_ag(output_tensor, input_tensor, *a, **k):
        seen.append(["all_gather_into_tensor", output_tensor.numel() * output_tensor.element_size()])
        return ag(output_tensor, input_tensor, *a, **k)

    def rec_rs(output, input, *a, **k):
        seen.append(["reduce_scatter_tensor", input.numel() * input.element_size()])
        return rs(output, input, *a, **k)

    dist.all_gather_single, dist.reduce_scatter_single = rec_ag, rec_rs
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        model = DecoderLM(PRESETS["tiny"])
        mp_ = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for block in model.blocks:
            fully_shard(block, mp_policy=mp_)
        fully_shard(model, mp_policy=mp_)
        model(torch.randint(0, 1024, (2, 16))).float().sum().backward()
    finally:
        dist.destroy_process_group()
    Path(out, f"rank{rank}.json").write_text(json.dumps(seen))


@pytest.mark.parametrize("world", [3])
def test_fsdp_sizes_are_what_fsdp2_sends(tmp_path: Path, world: int) -> None:
    """A real FSDP2 step (tiny preset, bf16/fp32 mixed precision, gloo) records every all-gather and reduce-scatter;
    3 ranks so dim-0 padding (d_model 128 is not a multiple of 3) is exercised."""
    start_ranks(_fsdp_rank, (world, free_port(), str(tmp_path)), world, preload=(__name__,))
    seen = json.loads((tmp_path / "rank0.json").read_text())
    want = sweep.fsdp_message_sizes("tiny", world)
    for c in ("all_gather_into_tensor", "reduce_scatter_tensor"):
        assert sorted({b for name, b in seen if name == c}) == want[c]


def test_three_collectives_run_with_the_right_factors(sweeps) -> None:
    entries, efa, _ = sweeps
    rows = sweep.summarize(efa, 2)
    assert {r["collective"] for r in rows} == set(sweep.COLLECTIVES)
    assert len(rows) == len(entries)
    assert all(r["ok"] and r["ranks"] == 2 for r in rows)
    for r in rows:
        assert r["algbw_gbps"] == pytest.approx(r["bytes"] / (r["time_us"] * 1e-6) / 1e9)
        # nccl-tests on 2 ranks: all-reduce 2(n-1)/n = 1, all-gather / reduce-scatter (n-1)/n = 0.5
        assert r["busbw_gbps"] / r["algbw_gbps"] == pytest.approx(1.0 if r["collective"] == "all_reduce" else 0.5)
    fsdp = {(r["collective"], r["bytes"]) for r in rows if r["source"] == "fsdp:tiny"}
    for c, sizes in sweep.fsdp_message_sizes("tiny", 2).items():
        assert {(c, b) for b in sizes} <= fsdp


def test_socket_sweep_runs_in_fresh_processes_with_the_transport_env(sweeps) -> None:
    _, efa, sock = sweeps
    assert {r["env"]["NCCL_NET"] for rank in efa for r in rank} == {None}
    assert {r["env"]["NCCL_NET"] for rank in sock for r in rank} == {"Socket"}
    cmp = sweep.compare(sweep.summarize(efa, 2), sweep.summarize(sock, 2))
    assert len(cmp["rows"]) == len(sweep.summarize(efa, 2))
    assert set(cmp["large"]) == set(sweep.COLLECTIVES) and cmp["headline_bytes"] == 64 << 10
    assert cmp["headline_ratio"] > 0


def _rows(times: dict[tuple[str, int], float], world: int = 2) -> list[dict]:
    return sweep.summarize(
        [[{"collective": c, "bytes": b, "source": "pow2", "time_s": t} for (c, b), t in times.items()]], world
    )


def test_summarize_means_over_ranks() -> None:
    r0 = [{"collective": "all_reduce", "bytes": 1000, "time_s": 1e-6}]
    r1 = [{"collective": "all_reduce", "bytes": 1000, "time_s": 3e-6}]
    (row,) = sweep.summarize([r0, r1], 2)
    assert row["time_us"] == pytest.approx(2.0) and row["time_us_max"] == pytest.approx(3.0)
    assert row["algbw_gbps"] == pytest.approx(0.5) and row["busbw_gbps"] == pytest.approx(0.5)


def test_compare_headline_is_geomean_of_large_message_medians() -> None:
    big, small = 1 << 30, 1 << 20
    # all_reduce: ratios 2, 3, 100 at 64 MiB, 256 MiB, 1 GiB -> median 3; the 1 MiB ratio (10) is not "large";
    # 2 GiB ran only on EFA -> ignored
    efa = _rows(
        {
            ("all_reduce", small): 1.0,
            ("all_reduce", 64 << 20): 1.0,
            ("all_reduce", 256 << 20): 1.0,
            ("all_reduce", big): 1.0,
            ("all_reduce", 2 * big): 1.0,
            ("all_gather_into_tensor", big): 1.0,
            ("reduce_scatter_tensor", big): 1.0,
        }
    )
    sock = _rows(
        {
            ("all_reduce", small): 10.0,
            ("all_reduce", 64 << 20): 2.0,
            ("all_reduce", 256 << 20): 3.0,
            ("all_reduce", big): 100.0,
            ("all_gather_into_tensor", big): 4.0,
            ("reduce_scatter_tensor", big): 1.0,
        }
    )
    cmp = sweep.compare(efa, sock)
    assert cmp["large"]["all_reduce"] == {"bytes": 64 << 20, "ratio": pytest.approx(3.0), "sizes": 3}
    assert cmp["large"]["all_gather_into_tensor"] == {"bytes": big, "ratio": pytest.approx(4.0), "sizes": 1}
    assert cmp["headline_ratio"] == pytest.approx((3 * 4 * 1) ** (1 / 3))
    assert cmp["headline_bytes"] == 64 << 20
    assert len(cmp["rows"]) == 6


def test_line_rate_fraction_and_floor() -> None:
    # 8 ranks, 1 GB all-reduce in 0.1 s: algbw 10 GB/s, busbw 17.5 GB/s = 140 Gbit/s of a 400 Gbit/s node
    rows = _rows({("all_reduce", 10**9): 0.1, ("all_gather_into_tensor", 10**9): 0.1}, world=8)
    rate = sweep.line_rate(rows, 400.0)
    assert rate["large"]["all_reduce"]["fraction"] == pytest.approx(17.5 * 8 / 400)
    assert rate["fraction"] == pytest.approx(8.75 * 8 / 400)  # the worst collective (all-gather)
    assert sweep.below_floor(rate, 0.1) is None
    reason = sweep.below_floor(rate, 0.5)
    assert "all_gather_into_tensor" in reason and "400 Gbit/s" in reason and "50%" in reason
    assert sweep.line_rate(rows, 0) is None
    assert "--efa-gbps" in sweep.below_floor(None, 0.5)
