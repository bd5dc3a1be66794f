"""Every condition of the sweep and its line-rate math reached and its outcome asserted, in process and
fast: the pure functions with figures worked by hand, ``run_sweep`` against a stand-in for torch.distributed that
behaves as a 66-rank job (and as one that corrupts each collective), and once against a real 1-rank gloo group.
test_sweep.py times the collectives for real on 2 gloo ranks in subprocesses (not measured by coverage)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist

from ray_efa_eks.efacheck import sweep

AR, AG, RS = sweep.COLLECTIVES


# --- bus_factor, pow2_sizes, padding, FSDP units ------------------------------------------------------------------


def test_bus_factor_on_the_edges_of_world():
    assert sweep.bus_factor(AR, 1) == 0.0 and sweep.bus_factor(AG, 1) == 0.0  # one rank moves nothing
    assert sweep.bus_factor(AR, 4) == 1.5 and sweep.bus_factor(RS, 4) == 0.75 and sweep.bus_factor(AG, 3) == 2 / 3
    for bad in (0, -1):
        with pytest.raises(ValueError, match=rf"world {bad}: needs at least one rank"):
            sweep.bus_factor(AR, bad)
    with pytest.raises(ValueError, match="choose from all_reduce, all_gather_into_tensor, reduce_scatter_tensor"):
        sweep.bus_factor("all_to_all", 2)


@pytest.mark.parametrize(
    "lo, hi, want",
    [
        (1, 16, [4, 8, 16]),  # never below 4 bytes
        (0, 3, []),
        (4, 4, [4]),  # both ends included
        (5, 8, [8]),  # the first power of two at or above min_bytes
        (8, 15, [8]),
        (1 << 20, 1 << 20, [1 << 20]),
        ((1 << 20) + 1, 1 << 21, [1 << 21]),
    ],
)
def test_pow2_sizes_ends(lo, hi, want):
    assert sweep.pow2_sizes(lo, hi) == want


def test_pow2_sizes_refuses_swapped_ends():
    with pytest.raises(ValueError, match="min_bytes 1025 > max_bytes 1024: swap them"):
        sweep.pow2_sizes(1025, 1024)


@pytest.mark.parametrize(
    "shape, world, want",
    [
        ((), 4, 4),  # a scalar: one element per rank
        ((8,), 4, 8),
        ((5,), 2, 6),  # dim 0 padded to a multiple of the world
        ((5, 3), 2, 18),
        ((1, 7, 2), 3, 42),
        ((128, 128), 3, 129 * 128),
    ],
)
def test_an_fsdp_unit_sends_its_parameters_padded_to_the_world(monkeypatch, shape, world, want):
    monkeypatch.setattr(sweep.fsdp_shapes, "units", lambda preset: [("blocks.0", [shape])])
    assert sweep.fsdp_units("any", world) == [{"unit": "blocks.0", "params": math.prod(shape), "numel": want}]


def test_fsdp_units_and_message_sizes_of_tiny_on_3_ranks_worked_by_hand():
    # block: 4 x (128,) + (384,128) + (128,128) + (512,128) + (128,512) = 197,120 params; padded to 3:
    # 4 x 129 + 384*128 + 129*128 + 513*128 + 129*512 = 197,892. root: 2 x (1024,128) + (64,128) + 2 x (128,)
    # = 270,592; padded 2 x 1026*128 + 66*128 + 2 x 129 = 271,362
    assert sweep.fsdp_units("tiny", 3) == [
        {"unit": "blocks.0", "params": 197120, "numel": 197892},
        {"unit": "blocks.1", "params": 197120, "numel": 197892},
        {"unit": "root", "params": 270592, "numel": 271362},
    ]
    assert sweep.fsdp_message_sizes("tiny", 3) == {
        AR: [197892 * 4, 271362 * 4],
        AG: [197892 * 2, 271362 * 2],
        RS: [197892 * 4, 271362 * 4],
    }
    assert sweep.fsdp_message_sizes("tiny", 3, param_dtype="float32", reduce_dtype="float16") == {
        AR: [197892 * 2, 271362 * 2],
        AG: [197892 * 4, 271362 * 4],
        RS: [197892 * 2, 271362 * 2],
    }
    with pytest.raises(ValueError, match="unknown preset"):
        sweep.fsdp_units("huge", 2)


# --- plan ---------------------------------------------------------------------------------------------------------


def test_plan_rounds_each_size_to_an_equal_chunk_per_rank_and_drops_zero():
    got = sweep.plan(8, 64, 3)
    by = {c: [(e["bytes"], e["dtype"], e["source"]) for e in got if e["collective"] == c] for c in sweep.COLLECTIVES}
    assert by[AR] == [(8, "float32", "pow2"), (16, "float32", "pow2"), (32, "float32", "pow2"), (64, "float32", "pow2")]
    # all-gather / reduce-scatter: a multiple of 3 ranks x 4 bytes; 8 rounds to 0 and is dropped
    assert by[AG] == by[RS] == [(12, "float32", "pow2"), (24, "float32", "pow2"), (60, "float32", "pow2")]
    assert [e["collective"] for e in got] == [AR] * 4 + [AG] * 3 + [RS] * 3


def test_plan_adds_the_presets_fsdp_sizes_in_their_own_dtype():
    got = sweep.plan(1 << 20, 1 << 20, 3, preset="tiny", collectives=(AG, AR))
    assert got == [
        {"collective": AG, "bytes": 197892 * 2, "dtype": "bfloat16", "source": "fsdp:tiny"},
        {"collective": AG, "bytes": 271362 * 2, "dtype": "bfloat16", "source": "fsdp:tiny"},
        {"collective": AG, "bytes": (1 << 20) // 12 * 12, "dtype": "float32", "source": "pow2"},
        {"collective": AR, "bytes": 197892 * 4, "dtype": "float32", "source": "fsdp:tiny"},
        {"collective": AR, "bytes": 1 << 20, "dtype": "float32", "source": "pow2"},  # in size order
        {"collective": AR, "bytes": 271362 * 4, "dtype": "float32", "source": "fsdp:tiny"},
    ]
    # reduce-scatter's FSDP sizes are fp32 too
    rs = sweep.plan(1 << 20, 1 << 20, 3, preset="tiny", collectives=(RS,))
    assert [(e["bytes"], e["dtype"]) for e in rs if e["source"] == "fsdp:tiny"] == [
        (197892 * 4, "float32"),
        (271362 * 4, "float32"),
    ]


def test_plan_all_reduce_needs_only_whole_elements():
    # all-reduce sends the whole array from every rank: 4 bytes is one float32 on any world
    assert [e["bytes"] for e in sweep.plan(4, 8, 8, collectives=(AR,))] == [4, 8]
    assert [e["bytes"] for e in sweep.plan(4, 8, 8, collectives=(AG,))] == []  # 8 ranks x 4 B > 8 B


def test_plan_times_each_entry_once_and_refuses_unknown_names_and_worlds():
    once = sweep.plan(16, 64, 2, collectives=(AR, AR))  # a repeated name adds nothing
    assert [e["bytes"] for e in once] == [16, 32, 64]
    assert sweep.plan(16, 64, 2, collectives=()) == []
    with pytest.raises(ValueError, match="'broadcast'"):
        sweep.plan(16, 64, 2, collectives=("broadcast",))
    with pytest.raises(ValueError, match="world 0"):
        sweep.plan(16, 64, 0)


# --- run_sweep against a stand-in for torch.distributed -----------------------------------------------------------


class FakeDist:
    """torch.distributed as rank ``rank`` of ``world`` sees it when every peer sends what run_sweep sends (rank r's
    all-gather chunk is r % 64); ``broken`` names a collective whose result is wrong. Time advances 1 s per call."""

    def __init__(self, monkeypatch, world: int, rank: int, broken: str | None = None, single: bool = True):
        self.world, self.rank, self.broken, self.clock = world, rank, broken, 0.0
        self.calls: list[tuple] = []
        self.sent: list[tuple] = []
        monkeypatch.setattr(sweep.time, "perf_counter", lambda: self.clock)
        for name in ("get_world_size", "get_rank", "all_reduce", "barrier"):
            monkeypatch.setattr(dist, name, getattr(self, name))
        if single:
            monkeypatch.setattr(dist, "all_gather_single", self.all_gather, raising=False)
            monkeypatch.setattr(dist, "reduce_scatter_single", self.reduce_scatter, raising=False)
            monkeypatch.setattr(dist, "all_gather_into_tensor", self.unused)
            monkeypatch.setattr(dist, "reduce_scatter_tensor", self.unused)
        else:  # an older torch without the *_single names
            monkeypatch.delattr(dist, "all_gather_single", raising=False)
            monkeypatch.delattr(dist, "reduce_scatter_single", raising=False)
            monkeypatch.setattr(dist, "all_gather_into_tensor", self.all_gather)
            monkeypatch.setattr(dist, "reduce_scatter_tensor", self.reduce_scatter)

    def unused(self, *a, **k):
        raise AssertionError("the *_single name must be used when torch has it")

    def get_world_size(self, group=None):
        self.calls.append(("world", group))
        return self.world

    def get_rank(self, group=None):
        self.calls.append(("rank", group))
        return self.rank

    def barrier(self, group=None):
        self.calls.append(("barrier", group))

    def wire(self, c, *tensors):
        """What one call puts on the wire: (collective, dtype, bytes of the whole array); every buffer one dtype."""
        assert len({t.dtype for t in tensors}) == 1, [t.dtype for t in tensors]
        big = max(tensors, key=lambda t: t.numel())
        self.sent.append((c, big.dtype, big.numel() * big.element_size()))

    def all_reduce(self, buf, group=None):
        self.wire(AR, buf)
        self.calls.append((AR, group, buf.numel()))
        self.clock += 1
        buf.mul_(self.world if self.broken != AR else self.world - 1)  # every rank holds the same values

    def all_gather(self, out, inp, group=None):
        self.wire(AG, out, inp)
        self.calls.append((AG, group, out.numel()))
        self.clock += 1
        chunks = [inp if r == self.rank else torch.full_like(inp, float(r % 64)) for r in range(self.world)]
        if self.broken == AG:
            chunks.reverse()
        out.copy_(torch.cat(chunks))

    def reduce_scatter(self, out, inp, group=None):
        self.wire(RS, out, inp)
        self.calls.append((RS, group, inp.numel()))
        self.clock += 1
        out.copy_(inp.view(self.world, -1)[self.rank] * (self.world if self.broken != RS else 1))


WORLD = 66  # more than 64 ranks: all-gather values wrap at 64 (exact in bf16)


def _entries():
    return [
        {"collective": AR, "bytes": 66 * 4 * 3, "dtype": "float32", "source": "pow2"},
        {"collective": AG, "bytes": 66 * 2 * 3, "dtype": "bfloat16", "source": "fsdp:tiny"},
        {"collective": RS, "bytes": 66 * 4 * 5, "dtype": "float32", "source": "pow2"},
    ]


@pytest.mark.parametrize("rank", [65, 0])
def test_run_sweep_checks_each_collectives_values_and_times_only_the_timed_iterations(monkeypatch, rank):
    monkeypatch.setenv("NCCL_NET", "Socket")
    monkeypatch.delenv("FI_PROVIDER", raising=False)
    fake, group, syncs = FakeDist(monkeypatch, WORLD, rank), object(), []
    rows = sweep.run_sweep(_entries(), "cpu", iters=4, warmup=3, sync=lambda: syncs.append(fake.clock), group=group)
    assert [(r["collective"], r["bytes"], r["source"], r["dtype"]) for r in rows] == [
        (e["collective"], e["bytes"], e["source"], e["dtype"]) for e in _entries()
    ]
    assert all(r["ok"] is True and r["rank"] == rank for r in rows)
    assert all(r["time_s"] == 1.0 for r in rows)  # 4 timed calls of 1 s each, over 4 iterations
    assert rows[0]["env"] == {
        "NCCL_NET": "Socket",
        "NCCL_NET_PLUGIN": None,
        "FI_PROVIDER": None,
        "NCCL_SOCKET_IFNAME": None,
        "NCCL_IB_DISABLE": None,
    }
    ops = [c for c in fake.calls if c[0] in sweep.COLLECTIVES]
    # per entry: 1 checked call + (warmup - 1) + iters, all on the caller's group, with the whole array's elements
    assert [c[0] for c in ops] == [AR] * 7 + [AG] * 7 + [RS] * 7
    assert {c[2] for c in ops} == {198, 198, 330} and all(c[1] is group for c in fake.calls)
    assert [c[0] for c in fake.calls if c[0] not in sweep.COLLECTIVES] == ["world", "rank"] + ["barrier"] * 3
    # the device is synced after the checked call, before and after the timed loop
    assert syncs == [1, 3, 7, 8, 10, 14, 15, 17, 21]


@pytest.mark.parametrize("broken", sweep.COLLECTIVES)
def test_run_sweep_marks_only_the_collective_that_returned_wrong_values(monkeypatch, broken):
    FakeDist(monkeypatch, WORLD, 65, broken=broken)
    rows = sweep.run_sweep(_entries(), "cpu", iters=1)
    assert {r["collective"]: r["ok"] for r in rows} == {c: c != broken for c in sweep.COLLECTIVES}


def test_run_sweep_all_reduce_is_checked_before_its_buffer_is_reset(monkeypatch):
    """The timed all-reduces start from ones again (the check's result is not compounded)."""
    fake = FakeDist(monkeypatch, 3, 1)
    seen = []
    real = fake.all_reduce

    def watch(buf, group=None):
        seen.append(buf.clone())
        real(buf, group)

    monkeypatch.setattr(dist, "all_reduce", watch)
    (row,) = sweep.run_sweep(_entries()[:1], "cpu", iters=2, warmup=1)
    assert row["ok"] is True and len(seen) == 3
    assert [float(s[0]) for s in seen] == [1.0, 1.0, 3.0] and all(bool((s == s[0]).all()) for s in seen)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_run_sweep_sends_each_entrys_bytes_in_its_dtype(monkeypatch, dtype):
    fake = FakeDist(monkeypatch, 4, 3)
    entries = [{**e, "dtype": dtype, "bytes": 4 * 4 * 6} for e in _entries()]
    rows = sweep.run_sweep(entries, "cpu", iters=1)
    assert all(r["ok"] for r in rows)
    assert fake.sent == [(c, getattr(torch, dtype), 96) for c in sweep.COLLECTIVES for _ in range(2)]


def test_run_sweep_times_5_iterations_by_default(monkeypatch):
    fake = FakeDist(monkeypatch, 2, 0)
    (row,) = sweep.run_sweep(_entries()[:1], "cpu")
    assert row["time_s"] == 1.0 and len([c for c in fake.calls if c[0] == AR]) == 1 + 5


def test_run_sweep_with_warmup_1_and_the_older_names_and_no_sync(monkeypatch):
    fake = FakeDist(monkeypatch, 2, 1, single=False)
    rows = sweep.run_sweep(_entries(), "cpu", iters=2)  # warmup 1: the checked call is the warm-up
    assert all(r["ok"] and r["time_s"] == 1.0 for r in rows)
    assert [c[0] for c in fake.calls if c[0] in sweep.COLLECTIVES] == [AR] * 3 + [AG] * 3 + [RS] * 3


def test_run_sweep_on_a_real_one_rank_gloo_group():
    if dist.is_initialized():  # a test left a group behind: fail loudly rather than share it
        pytest.fail("a default process group is already initialised")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        rows = sweep.run_sweep(sweep.plan(64, 128, 1, preset="tiny"), torch.device("cpu"), iters=1)
    finally:
        dist.destroy_process_group()
    assert rows and all(r["ok"] is True and r["rank"] == 0 and r["time_s"] > 0 for r in rows)
    assert {r["collective"] for r in rows} == set(sweep.COLLECTIVES)


# --- summarize, compare, line_rate, below_floor -------------------------------------------------------------------


def test_summarize_of_nothing_is_nothing():
    assert sweep.summarize([], 2) == [] and sweep.summarize([[], []], 2) == []


def test_summarize_keys_orders_and_defaults():
    r0 = [
        {"collective": RS, "bytes": 100, "time_s": 1e-6, "source": "pow2", "dtype": "float32", "ok": True},
        {"collective": AR, "bytes": 200, "time_s": 2e-6},  # no source/dtype/ok: pow2, float32, ok
        {"collective": AR, "bytes": 200, "time_s": 1e-6, "source": "fsdp:tiny", "dtype": "bfloat16"},
        {"collective": AG, "bytes": 100, "time_s": 0.0},
    ]
    r1 = [
        {"collective": RS, "bytes": 100, "time_s": 3e-6, "ok": False},
        {"collective": AR, "bytes": 200, "time_s": 2e-6, "source": "pow2"},
        {"collective": AR, "bytes": 100, "time_s": 1e-6},
    ]
    rows = sweep.summarize([r0, r1], 4)
    assert [(r["collective"], r["bytes"], r["source"]) for r in rows] == [
        (AR, 100, "pow2"),
        (AR, 200, "fsdp:tiny"),
        (AR, 200, "pow2"),
        (AG, 100, "pow2"),
        (RS, 100, "pow2"),
    ]
    ar = rows[2]
    assert ar["ranks"] == 2 and ar["dtype"] == "float32" and ar["ok"] is True
    assert ar["time_us"] == pytest.approx(2.0) and ar["algbw_gbps"] == pytest.approx(0.1)
    assert ar["busbw_gbps"] == pytest.approx(0.15)  # 2(n-1)/n at 4 ranks
    assert rows[1]["dtype"] == "bfloat16" and rows[1]["ranks"] == 1
    ag = rows[3]  # a zero time measures nothing: no bandwidth, not a division by zero
    assert ag["algbw_gbps"] == 0.0 and ag["busbw_gbps"] == 0.0
    rs = rows[4]  # one rank's wrong values make the row wrong; the slowest rank is kept
    assert rs["ok"] is False and rs["time_us"] == pytest.approx(2.0) and rs["time_us_max"] == pytest.approx(3.0)
    assert rs["busbw_gbps"] == pytest.approx(0.05 * 0.75)
    with pytest.raises(ValueError, match="'broadcast'"):
        sweep.summarize([[{"collective": "broadcast", "bytes": 1, "time_s": 1.0}]], 2)
    with pytest.raises(ValueError, match="'broadcast'"):  # sorted after the known ones, then refused by name
        sweep.summarize(
            [[{"collective": "broadcast", "bytes": 1, "time_s": 1.0}, {"collective": RS, "bytes": 1, "time_s": 1.0}]], 2
        )


def test_summarize_units_exactly():
    (row,) = sweep.summarize(
        [[{"collective": AR, "bytes": 10**9, "time_s": 0.5}], [{"collective": AR, "bytes": 10**9, "time_s": 0.25}]], 2
    )
    assert row["time_us"] == 375000.0 and row["time_us_max"] == 500000.0  # microseconds
    assert row["algbw_gbps"] == 10**9 / 0.375 / 1e9 and row["busbw_gbps"] == row["algbw_gbps"]  # GB/s (1e9 B/s)
    (row,) = sweep.summarize([[{"collective": AG, "bytes": 10**9, "time_s": 0.5}]], 2)
    assert row["algbw_gbps"] == 2.0 and row["busbw_gbps"] == 1.0


def _row(c, b, busbw, source="pow2"):
    return {"collective": c, "bytes": b, "source": source, "busbw_gbps": busbw}


def test_line_rate_reads_the_largest_power_of_two_row_of_each_collective():
    rows = [
        _row(AR, 1 << 20, 1.0),
        _row(AR, 1 << 30, 2.0),
        _row(AR, 1 << 31, 3.0, source="fsdp:1b"),
        _row(AG, 1 << 31, 4.0),
        {"collective": AG, "bytes": 1 << 32, "busbw_gbps": 5.0},
    ]  # no source: pow2
    rate = sweep.line_rate(rows, 100.0)
    assert rate["large"] == {
        AR: {"bytes": 1 << 30, "busbw_gbps": 2.0, "fraction": 0.16},
        AG: {"bytes": 1 << 32, "busbw_gbps": 5.0, "fraction": 0.4},
    }  # no reduce-scatter row
    assert rate["fraction"] == 0.16


def test_compare_large_floor_is_the_largest_size_when_the_sweep_stops_below_64_mib():
    efa = [_row(AR, 1 << 20, 10.0), _row(AR, 1 << 22, 30.0), _row(AR, 1 << 21, 20.0)]
    sock = [_row(AR, 1 << 20, 1.0), _row(AR, 1 << 22, 2.0), _row(AR, 1 << 21, 1.0)]
    cmp = sweep.compare(efa, sock)
    assert cmp["large"] == {AR: {"bytes": 1 << 22, "ratio": 15.0, "sizes": 1}}
    assert cmp["headline_ratio"] == pytest.approx(15.0) and cmp["headline_bytes"] == 1 << 22
    assert [r["ratio"] for r in cmp["rows"]] == [10.0, 15.0, 20.0]


def test_compare_at_exactly_64_mib_and_above_takes_the_median():
    efa = [
        _row(AG, sweep.LARGE_BYTES // 2, 100.0),
        _row(AG, sweep.LARGE_BYTES, 4.0),
        _row(AG, 2 * sweep.LARGE_BYTES, 9.0),
    ]
    sock = [
        _row(AG, sweep.LARGE_BYTES // 2, 1.0),
        _row(AG, sweep.LARGE_BYTES, 1.0),
        _row(AG, 2 * sweep.LARGE_BYTES, 1.0),
    ]
    cmp = sweep.compare(efa, sock)
    assert cmp["large"][AG] == {"bytes": sweep.LARGE_BYTES, "ratio": 6.5, "sizes": 2}


def test_compare_rows_without_a_source_are_power_of_two_rows():
    efa = [{"collective": AR, "bytes": 1 << 20, "busbw_gbps": 6.0}, _row(AG, 1 << 20, 4.0)]
    sock = [_row(AR, 1 << 20, 2.0), {"collective": AG, "bytes": 1 << 20, "busbw_gbps": 1.0}]
    cmp = sweep.compare(efa, sock)
    assert [(r["collective"], r["source"], r["ratio"]) for r in cmp["rows"]] == [(AR, "pow2", 3.0), (AG, "pow2", 4.0)]
    assert cmp["large"] == {
        AR: {"bytes": 1 << 20, "ratio": 3.0, "sizes": 1},
        AG: {"bytes": 1 << 20, "ratio": 4.0, "sizes": 1},
    }


def test_compare_skips_what_only_one_sweep_ran_fsdp_sizes_and_zero_bandwidth():
    efa = [
        _row(AR, 1 << 20, 4.0),
        _row(AR, 1 << 21, 8.0),
        _row(AR, 1 << 22, 0.0),
        _row(AR, 1 << 23, 5.0),
        _row(AR, 1 << 24, 100.0, source="fsdp:1b"),
        _row(RS, 1 << 20, 3.0),
    ]
    sock = [
        _row(AR, 1 << 20, 2.0),
        _row(AR, 1 << 22, 1.0),
        _row(AR, 1 << 23, 0.0),
        _row(AR, 1 << 24, 1.0, source="fsdp:1b"),
        _row(AG, 1 << 20, 1.0),
        _row(RS, 1 << 20, 0.0),
    ]
    cmp = sweep.compare(efa, sock)
    assert [(r["bytes"], r["source"], r["ratio"]) for r in cmp["rows"]] == [
        (1 << 20, "pow2", 2.0),
        (1 << 22, "pow2", 0.0),
        (1 << 23, "pow2", None),
        (1 << 24, "fsdp:1b", 100.0),
        (1 << 20, "pow2", None),
    ]
    assert cmp["rows"][0] == {
        "collective": AR,
        "bytes": 1 << 20,
        "source": "pow2",
        "efa_busbw_gbps": 4.0,
        "socket_busbw_gbps": 2.0,
        "ratio": 2.0,
    }
    # the large figure ignores FSDP sizes and rows with no ratio (either side measured nothing)
    assert cmp["large"] == {AR: {"bytes": 1 << 20, "ratio": 2.0, "sizes": 1}}
    assert cmp["headline_ratio"] == pytest.approx(2.0)
    none = sweep.compare([], sock)
    assert none == {"rows": [], "large": {}, "headline_ratio": None, "headline_bytes": None}


def test_compare_headline_is_the_geometric_mean_and_its_bytes_the_smallest_large_size():
    efa = [_row(AR, 1 << 30, 8.0), _row(AG, 1 << 27, 2.0), _row(RS, 1 << 28, 1.0)]
    sock = [_row(c, b, 1.0) for c, b in ((AR, 1 << 30), (AG, 1 << 27), (RS, 1 << 28))]
    cmp = sweep.compare(efa, sock)
    assert cmp["headline_ratio"] == pytest.approx(math.exp((math.log(8) + math.log(2)) / 3))
    assert cmp["headline_bytes"] == 1 << 27


def test_line_rate_per_collective_and_the_lowest():
    rows = [
        _row(AR, 1 << 30, 25.0),
        _row(AR, 1 << 20, 1.0),
        _row(AG, 1 << 29, 10.0),
        _row(AG, 1 << 31, 99.0, source="fsdp:1b"),
    ]
    rate = sweep.line_rate(rows, 400.0)
    assert rate == {
        "efa_gbps": 400.0,
        "fraction": 0.2,
        "large": {
            AR: {"bytes": 1 << 30, "busbw_gbps": 25.0, "fraction": 0.5},
            AG: {"bytes": 1 << 29, "busbw_gbps": 10.0, "fraction": 0.2},
        },
    }
    assert sweep.line_rate(rows, None) is None and sweep.line_rate(rows, 0) is None
    assert sweep.line_rate([], 100.0) == {"efa_gbps": 100.0, "large": {}, "fraction": None}


def test_below_floor_at_under_and_without_a_line_rate():
    rate = sweep.line_rate([_row(AR, 1 << 30, 25.0), _row(RS, 1 << 28, 10.0)], 400.0)
    assert sweep.below_floor(rate, None) is None and sweep.below_floor(None, None) is None
    assert sweep.below_floor(rate, 0.2) is None  # exactly at the floor passes
    assert sweep.below_floor(rate, 0.21) == (
        f"large-message busbw of {RS} is 10.00 GB/s at {1 << 28} B = 20.0% of the 400 Gbit/s EFA line rate, "
        "below the floor 21%"
    )
    want = "--min-busbw-fraction 0.5: no line rate known for this instance type (pass --efa-gbps)"
    assert sweep.below_floor(None, 0.5) == want
    assert sweep.below_floor(sweep.line_rate([], 400.0), 0.5) == want
    assert sweep.below_floor(rate, 0.0) is None


def test_run_sweep_makes_every_buffer_on_the_device_it_is_given(monkeypatch):
    """A buffer made without ``device`` lands on torch's default device, not the rank's GPU: with the default set to
    'meta' (tensors without data) every buffer on the wire and every check must still be on the given device."""
    fake, devices = FakeDist(monkeypatch, 3, 2), []
    wire = fake.wire

    def watch(c, *tensors):
        devices.extend(t.device for t in tensors)
        wire(c, *tensors)

    monkeypatch.setattr(fake, "wire", watch)
    torch.set_default_device("meta")
    try:
        rows = sweep.run_sweep(_entries(), torch.device("cpu"), iters=1)
    finally:
        torch.set_default_device(None)
    assert [r["ok"] for r in rows] == [True, True, True]
    assert len(devices) == 2 * (1 + 2 + 2) and set(devices) == {torch.device("cpu")}
