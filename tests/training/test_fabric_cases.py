"""Every condition of the run's fabric verdict reached and its outcome asserted: the branches
test_fabric.py did not reach, and Probe.judge's gather with a stand-in for torch.distributed."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from ray_efa_eks.training import fabric

REPO = Path(__file__).resolve().parents[2]
RANK0_VIEW = (REPO / "tests/fixtures/nccl-logs/real_efa_p4d_k8s_pods_rank0_view_nccl2273_ofi1162.log").read_bytes()


class Dist:
    """torch.distributed as rank 0 sees it: the other ranks' payloads arrive in gather_object."""

    def __init__(self, others: list[dict]):
        self.others = others
        self.sent: list[dict] = []
        """What this rank sent to rank 0 (its payload), one per judge call."""

    def get_world_size(self) -> int:
        return 1 + len(self.others)

    def gather_object(self, payload, gathered, dst):
        self.sent.append(payload)
        if gathered is not None:  # only rank 0 (dst) passes a list
            gathered[:] = [payload] + self.others

    def broadcast_object_list(self, box, src):
        box[0] = dict(box[0] or {}, broadcast=True)


def sent(probe: fabric.Probe, final: bool) -> dict:
    """The payload ``probe`` sends to rank 0 when every rank calls ``judge`` (what the gather carries)."""
    dist = Dist([])
    probe.judge(dist, final=final)
    return dist.sent[-1]


def _probe(tmp_path, **kw) -> fabric.Probe:
    env: dict = {}
    probe = fabric.Probe("nccl", 0, 1, str(tmp_path / "logs"), environ=env, **kw)
    if probe.plan.get("log"):
        Path(probe.plan["log"]).write_bytes(RANK0_VIEW)
    return probe


def test_a_rank_with_a_note_and_no_log_never_counts_as_agreeing(tmp_path):
    probe = _probe(tmp_path)
    alone = probe.judge(Dist([]), final=True)
    assert alone["verdict"] == "efa"
    note = "your own NCCL logging settings are kept (NCCL_DEBUG=WARN): NCCL_DEBUG is WARN, so NCCL logs no INFO lines"
    other = {"source": "h2:rank1", "log": None, "note": note, "host": "h2", "capture": {"by": "user"}, "image": None}
    fab = probe.judge(Dist([other]), final=True)
    assert fab["verdict"] == "undetermined", fab["reasons"]
    assert note in fab["reasons"] and fab["capture"]["by"] == "mixed"


def test_judge_broadcasts_and_a_disabled_probe_judges_nothing(tmp_path):
    probe = _probe(tmp_path)
    assert probe.judge(Dist([]), final=False, broadcast=True)["broadcast"] is True
    worker = fabric.Probe("nccl", 1, 1, str(tmp_path / "logs"), environ={})
    assert worker.judge(Dist([]), final=True) is None  # only rank 0 judges
    off = fabric.Probe("nccl", 0, 0, None, environ={}, enabled=False)
    assert off.plan["note"] == "fabric capture off" and off.counters_before is None
    assert off.judge(Dist([]), final=True) is None


def test_counters_are_read_once_per_node_and_their_delta_sent(tmp_path, monkeypatch):
    snaps = iter(
        [
            {"efa_0": {"tx_bytes": 1, "rx_bytes": 1, "errors": {}}},
            {"efa_0": {"tx_bytes": 5, "rx_bytes": 9, "errors": {}}},
        ]
    )
    monkeypatch.setattr(fabric.efa_counters, "read_view", lambda: {"snapshot": next(snaps)})
    probe = fabric.Probe("nccl", 0, 0, str(tmp_path / "logs"), environ={})
    assert fabric.Probe("nccl", 1, 1, str(tmp_path / "logs"), environ={}).counters_before is None
    assert sent(probe, final=True)["counters"] == {"efa_0": {"tx_bytes": 4, "rx_bytes": 8, "errors": {}}}
    monkeypatch.delattr(fabric.efa_counters, "read_view")  # an efacheck without the exporter's view
    monkeypatch.setattr(fabric.efa_counters, "read_counters", lambda: None)
    assert "counters" not in sent(probe, final=True)  # no reading at the end: no delta sent
    assert fabric.Probe("nccl", 0, 0, str(tmp_path / "logs"), environ={}).counters_before is None

    def broken():
        raise OSError("no sysfs")

    monkeypatch.setattr(fabric.efa_counters, "read_view", broken, raising=False)
    broke = fabric.Probe("nccl", 0, 0, str(tmp_path / "logs"), environ={})
    assert broke.counters_before is None  # a node whose counters cannot be read has none, not an error
    assert "counters" not in sent(broke, final=True)


def test_capture_texts_and_merges():
    assert (
        fabric.capture_text({"by": "mixed", "ranks": ["run", "yours (NCCL_DEBUG=WARN)"]})
        == "mixed (run; yours (NCCL_DEBUG=WARN))"
    )
    assert fabric.capture_text(None) == "off" and fabric.capture_text({"by": "none"}) == "none"
    assert fabric.merge_captures([{}, {}]) == {"by": "none"}


def test_read_log_without_a_path_or_file(tmp_path):
    assert fabric.read_log(None) is None and fabric.read_log(str(tmp_path / "none.log")) is None


def test_efa_bytes_without_devices():
    """(The verdict code is imported plainly, training -> efacheck: there is no 'not importable' branch left.)"""
    fab = fabric.summarize("gloo", {}, counter_deltas={"n1": {}})
    assert fab["efa_bytes"] is None and fab["efa_bytes_note"].startswith("no EFA device with readable counters")


def test_image_records_name_mixed_references_and_tag_pins():
    digest = "sha256:" + "a" * 64
    mixed = fabric.image_record({"h1": f"img@{digest}", "h2": "img:tag"})
    assert mixed["digest"] is None and mixed["note"].startswith("ranks ran different image references: h1: ")
    tag = fabric.image_record({"h1": "img:tag", "h2": "img:tag"})
    assert tag == {
        "references": ["img:tag"],
        "digest": None,
        "note": "pinned by tag: the run cannot see the digest (the gate's image audit records it)",
    }
    assert fabric.image_record({"h1": f"img@{digest}"}) == {"references": [f"img@{digest}"], "digest": digest}


def test_the_line_and_checkpoint_record():
    fab = {
        "verdict": "fallback",
        "network": "Socket",
        "provider": None,
        "nodes": 2,
        "ranks": 2,
        "reasons": [],
        "deciding": "x.log:3: Using network Socket",
        "previous": {"verdict": "efa", "step": None},
    }
    assert fabric.line(fab) == (
        "[fabric] fallback network=Socket provider=None nodes=2 ranks=2 was efa, now "
        "fallback (x.log:3: Using network Socket)"
    )
    assert fabric.line({"verdict": "not-nccl", "reasons": [], "capture_text": "run"}) == "[fabric] not-nccl"
    rec = json.loads(fabric.checkpoint_record({**fab, "image": {"digest": "sha256:1"}}, 7))
    assert rec["image_digest"] == "sha256:1" and rec["step"] == 7


def test_previous_verdict_of_no_checkpoint_or_an_unreadable_one(tmp_path):
    assert fabric.previous_verdict(None) is None

    class FS:
        def open_input_file(self, path):
            raise FileNotFoundError(path)

    assert fabric.previous_verdict(SimpleNamespace(filesystem=FS(), path=str(tmp_path))) is None


@pytest.mark.parametrize("bad", ["not json", "[1, 2]"])
def test_a_bad_stack_nccl_env_is_none(bad):
    assert fabric.stack_nccl_env({fabric.STACK_NCCL_ENV: bad}) == {}


# -- the mutation run's survivors (.ci/mutation.py training/fabric.py) --------------------------------------


class TorchDist:
    """torch.distributed's gather_object / broadcast_object_list as one rank sees them, with torch's own argument
    checks (torch/distributed/distributed_c10d.py 2.13: ``_canonicalize_group_rank`` refuses a None rank,
    ``_validate_output_list_for_rank`` a gather list on a non-destination rank). ``others``: the payloads of ranks
    1..n (as rank 0 receives them); ``root``: what rank 0 broadcasts (as a worker receives it)."""

    def __init__(self, rank: int, others: list[dict], root=None):
        self.rank, self.others, self.root = rank, others, root
        self.calls: list[tuple] = []

    def get_world_size(self) -> int:
        return 1 + len(self.others)

    def gather_object(self, payload, gathered, dst):
        self.calls.append(("gather", dst))
        if dst is None:
            raise ValueError("Must specify global_rank or group_rank")
        if dst == self.rank and not gathered:
            raise ValueError("Argument ``gather_list`` must be specified on destination rank.")
        if dst != self.rank and gathered:
            raise ValueError("Argument ``gather_list`` must NOT be specified on non-destination ranks.")
        if dst == self.rank:
            gathered[:] = [payload] + self.others if dst == 0 else list(reversed([payload] + self.others))

    def broadcast_object_list(self, box, src):
        self.calls.append(("broadcast", src))
        if src is None:
            raise ValueError("Must specify global_rank or group_rank")
        if src != self.rank:
            box[0] = self.root if src == 0 else None  # only rank 0 holds a verdict


def test_nccl_expands_a_trailing_percent_literally():
    assert fabric.expand_debug_file("/x/a%", "h", 1) == "/x/a%"
    assert fabric.expand_debug_file("%", "h", 1) == "%"
    assert fabric.expand_debug_file("%h%", "h", 1) == "h%"


def test_capture_texts_list_every_setting():
    assert fabric.capture_text({"by": "run"}) == "run"
    assert (
        fabric.capture_text({"by": "run", "replaced": {"NCCL_DEBUG": "WARN", "NCCL_DEBUG_FILE": "/x"}})
        == "run (replaced the stack's NCCL_DEBUG=WARN NCCL_DEBUG_FILE=/x)"
    )
    assert (
        fabric.capture_text({"by": "user", "kept": {"NCCL_DEBUG": "WARN", "NCCL_DEBUG_SUBSYS": "INIT"}})
        == "yours (NCCL_DEBUG=WARN NCCL_DEBUG_SUBSYS=INIT)"
    )


def test_mixed_image_note_names_every_host_and_reference():
    rec = fabric.image_record({"h2": "img:b", "h1": "img:a", "h3": None})
    assert rec["note"] == "ranks ran different image references: h1: img:a; h2: img:b"


def test_rank0_gathers_to_itself_and_broadcasts_its_own_verdict(tmp_path):
    probe = _probe(tmp_path)
    d = TorchDist(0, [])
    fab = probe.judge(d, final=True, broadcast=True)
    assert fab["verdict"] == "efa" and d.calls == [("gather", 0), ("broadcast", 0)]
    worker = fabric.Probe("nccl", 1, 1, str(tmp_path / "logs"), environ={})
    w = TorchDist(1, [{}], root={"verdict": "efa"})
    assert worker.judge(w, final=True, broadcast=True) == {"verdict": "efa"}
    assert w.calls == [("gather", 0), ("broadcast", 0)]


def test_a_note_of_a_rank_that_has_its_log_is_not_a_reason(tmp_path):
    probe = _probe(tmp_path)
    other = {
        "source": "h2:log",
        "log": RANK0_VIEW,
        "note": "a note of a rank that logged",
        "host": "h2",
        "capture": {"by": "run"},
        "image": None,
    }
    fab = probe.judge(TorchDist(0, [other]), final=True)
    assert fab["verdict"] == "efa" and "a note of a rank that logged" not in fab["reasons"]


def test_judge_passes_counters_expected_bytes_previous_phase_and_images(tmp_path, monkeypatch):
    """What rank 0 hands to summarize: the ranks' counter deltas by host (its own included), the expected bytes,
    the checkpoint's verdict, the phase and the ranks' image references."""
    snaps = iter(
        [
            {"rdmap0s6": {"tx_bytes": 0, "rx_bytes": 0, "errors": {}}},
            {"rdmap0s6": {"tx_bytes": 10, "rx_bytes": 10, "errors": {}}},
        ]
    )
    monkeypatch.setattr(fabric.efa_counters, "read_view", lambda: {"snapshot": next(snaps)})
    monkeypatch.setenv(fabric.IMAGE_ENV, "img:tag")
    probe = fabric.Probe("nccl", 0, 0, str(tmp_path / "logs"), environ={})
    Path(probe.plan["log"]).write_bytes(RANK0_VIEW)
    flat = {"rdmap0s6": {"tx_bytes": 0, "rx_bytes": 0, "errors": {}}}
    other = {
        "source": "h2:log",
        "log": RANK0_VIEW,
        "note": None,
        "host": "h2",
        "capture": {"by": "run"},
        "image": "img:other",
        "counters": flat,
    }
    prev = {"verdict": "efa", "network": "AWS Libfabric", "provider": "efa", "nodes": 2, "step": 3}
    fab = probe.judge(TorchDist(0, [other]), final=True, previous=prev, expected_bytes_per_node=1e9)
    assert fab["at"] == "end" and fab["previous"]["verdict"] == "efa" and fab["previous"]["step"] == 3
    assert fab["verdict"] == "fallback"
    assert fab["efa_bytes"] == {
        "h2": {"sent": 0, "received": 0, "devices": 1},
        socket_host(): {"sent": 10, "received": 10, "devices": 1},
    }
    assert any("h2" in r for r in fab["reasons"]) and any(socket_host() in r for r in fab["reasons"])
    assert fab["image"]["references"] == ["img:other", "img:tag"]
    # without the expected bytes the counters are reported but judge nothing
    snaps = iter(
        [
            {"rdmap0s6": {"tx_bytes": 0, "rx_bytes": 0, "errors": {}}},
            {"rdmap0s6": {"tx_bytes": 10, "rx_bytes": 10, "errors": {}}},
        ]
    )
    probe = fabric.Probe("nccl", 0, 0, str(tmp_path / "logs2"), environ={})
    Path(probe.plan["log"]).write_bytes(RANK0_VIEW)
    init = probe.judge(TorchDist(0, []), final=False)
    assert init["at"] == "init" and init["verdict"] == "efa" and init["efa_bytes"] is None  # no counters at init


def socket_host() -> str:
    import socket

    return socket.gethostname()


def test_the_run_log_path_names_rank_host_and_pid(tmp_path):
    probe = fabric.Probe("nccl", 3, 0, str(tmp_path), environ={})
    assert probe.plan["log"] == str(tmp_path / f"nccl-rank3-{fabric.nccl_hostname()}-{os.getpid()}.log")
    assert probe.log_dir == str(tmp_path)


def test_no_log_dir_is_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    probe = fabric.Probe("nccl", 0, 1, None, environ={})
    assert probe.plan["log"] == f"nccl-rank0-{fabric.nccl_hostname()}-{os.getpid()}.log"


def test_without_an_environ_the_process_environment_is_read(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    probe = fabric.Probe("nccl", 0, 1, str(tmp_path))
    assert probe.plan["capture"] == {"by": "user", "kept": {"NCCL_DEBUG": "WARN"}} and probe.plan["log"] is None


def test_merged_captures_name_each_distinct_one_whatever_the_key_order():
    assert fabric.merge_captures([{"by": "run"}, {"by": "user", "kept": {"NCCL_DEBUG": "WARN"}}]) == {
        "by": "mixed",
        "ranks": ["run", "yours (NCCL_DEBUG=WARN)"],
    }
    assert fabric.merge_captures([{"by": "run", "replaced": {}}, {"replaced": {}, "by": "run"}]) == {
        "by": "run",
        "replaced": {},
    }


# plan_capture, whole answers: every key is read by Probe, summarize or the run's summary line


def _plan(env: dict, backend: str = "nccl") -> dict:
    return fabric.plan_capture(backend, env, "/logs", 3, "node-a", 42)


def _stack(**rendered) -> dict:
    return {fabric.STACK_NCCL_ENV: json.dumps(rendered), **rendered}


def test_plan_capture_gloo_and_run_answers():
    assert _plan({}, "gloo") == {
        "env": {},
        "log": None,
        "note": "backend gloo: the collectives do not use NCCL",
        "capture": {"by": "none"},
    }
    path = "/logs/nccl-rank3-node-a-42.log"
    assert _plan({}) == {
        "env": {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "NCCL_DEBUG_FILE": path},
        "log": path,
        "note": None,
        "user": {},
        "capture": {"by": "run", "replaced": {}},
    }
    # the stack's own TRACE is kept as TRACE (lower case too); its WARN is replaced by INFO
    assert _plan(_stack(NCCL_DEBUG="trace"))["env"]["NCCL_DEBUG"] == "TRACE"
    warn = _plan(_stack(NCCL_DEBUG="WARN"))
    assert warn["env"]["NCCL_DEBUG"] == "INFO" and warn["capture"] == {"by": "run", "replaced": {"NCCL_DEBUG": "WARN"}}


def test_plan_capture_user_answers():
    assert _plan({"NCCL_DEBUG": "info", "NCCL_DEBUG_FILE": "/u/n.%h.%p"}) == {
        "env": {},
        "log": "/u/n.node-a.42",
        "note": None,
        "user": {"NCCL_DEBUG": "info", "NCCL_DEBUG_FILE": "/u/n.%h.%p"},
        "capture": {"by": "user", "kept": {"NCCL_DEBUG": "info", "NCCL_DEBUG_FILE": "/u/n.%h.%p"}},
    }
    # the user's file with the stack's INFO level: the level comes from the stack's rendered value
    both = _plan({**_stack(NCCL_DEBUG="INFO"), "NCCL_DEBUG_FILE": "/u/n.%p"})
    assert both["log"] == "/u/n.42" and both["capture"] == {"by": "user", "kept": {"NCCL_DEBUG_FILE": "/u/n.%p"}}
    for level in ("INFO", "TRACE", "trace"):
        stdout = _plan({"NCCL_DEBUG": level, "NCCL_DEBUG_SUBSYS": "ALL"})
        assert stdout == {
            "env": {},
            "log": None,
            "user": {"NCCL_DEBUG": level, "NCCL_DEBUG_SUBSYS": "ALL"},
            "capture": {"by": "user", "kept": {"NCCL_DEBUG": level, "NCCL_DEBUG_SUBSYS": "ALL"}},
            "note": (
                f"your own NCCL logging settings are kept (NCCL_DEBUG={level} NCCL_DEBUG_SUBSYS=ALL): NCCL writes its "
                "lines to the job's stdout, which the run does not read; unset the NCCL_DEBUG* variables (or add "
                "NCCL_DEBUG=INFO NCCL_DEBUG_FILE=/path/nccl.%h.%p.log) for a verdict"
            ),
        }
    assert _plan({"NCCL_DEBUG_SUBSYS": "ALL"})["note"].startswith(
        "your own NCCL logging settings are kept (NCCL_DEBUG_SUBSYS=ALL): NCCL_DEBUG is unset, so NCCL logs no INFO"
    )
    assert "NCCL_DEBUG is WARN, so" in _plan({**_stack(NCCL_DEBUG="WARN"), "NCCL_DEBUG_SUBSYS": "ALL"})["note"]
    assert "NCCL_DEBUG is VERSION, so" in _plan({"NCCL_DEBUG": "VERSION"})["note"]
    # their TRACE (any case) with their file: read from there too, as INFO is
    for level in ("TRACE", "trace"):
        trace = _plan({"NCCL_DEBUG": level, "NCCL_DEBUG_FILE": "/u/t.%h"})
        assert (trace["log"], trace["note"], trace["env"]) == ("/u/t.node-a", None, {})


def test_stack_env_absent_or_not_an_object():
    assert fabric.stack_nccl_env({}) == {} and fabric.stack_nccl_env({fabric.STACK_NCCL_ENV: "[1]"}) == {}
    assert fabric.stack_nccl_env({fabric.STACK_NCCL_ENV: '{"A": 1}'}) == {"A": "1"}


def test_read_log_reads_at_most_its_limit(tmp_path):
    p = tmp_path / "n.log"
    p.write_bytes(b"0123456789")
    assert fabric.read_log(str(p), limit=4) == b"0123"


def test_no_log_dir_creates_nothing_but_the_log_there(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fabric.Probe("nccl", 0, 1, None, environ={})
    assert list(tmp_path.iterdir()) == []


def test_previous_verdict_reads_fabric_json_beside_a_trailing_slash():
    opened = []

    class FS:
        def open_input_file(self, path):
            opened.append(path)
            import io

            return io.BytesIO(b'{"verdict": "efa"}')

    ckpt = SimpleNamespace(filesystem=FS(), path="s3://b/run/checkpoint_000001/")
    assert fabric.previous_verdict(ckpt) == {"verdict": "efa"}
    # only the slash is cut: a directory of the user's own whose name ends in an X keeps it
    assert fabric.previous_verdict(SimpleNamespace(filesystem=FS(), path="s3://b/best-X")) == {"verdict": "efa"}
    assert opened == ["s3://b/run/checkpoint_000001/fabric.json", "s3://b/best-X/fabric.json"]


def test_checkpoint_record_whole():
    fab = {
        "verdict": "efa",
        "backend": "nccl",
        "network": "Libfabric",
        "provider": "efa",
        "nodes": 2,
        "deciding": "x.log:3: NET/OFI Selected provider is efa",
        "reasons": ["not kept"],
    }
    assert json.loads(fabric.checkpoint_record(fab, 5)) == {
        **{k: v for k, v in fab.items() if k != "reasons"},
        "step": 5,
    }
    assert json.loads(fabric.checkpoint_record({**fab, "image": {"digest": None}}, 5))["image_digest"] is None


def test_payload_whole_with_and_without_a_log(tmp_path, monkeypatch):
    host = socket_host()
    monkeypatch.setenv(fabric.IMAGE_ENV, "img:1")
    probe = _probe(tmp_path)
    assert sent(probe, final=False) == {
        "source": f"{host}:{probe.plan['log']}",
        "log": RANK0_VIEW,
        "note": None,
        "host": host,
        "capture": {"by": "run", "replaced": {}},
        "image": "img:1",
    }
    user = fabric.Probe("nccl", 2, 1, str(tmp_path), environ={"NCCL_DEBUG": "WARN"})
    p = sent(user, final=False)
    assert p["source"] == f"{host}:rank2" and p["log"] is None and p["note"].startswith("your own NCCL")


def test_counters_are_read_again_only_at_the_end(tmp_path, monkeypatch):
    reads = []

    def view():
        reads.append(1)
        return {"snapshot": {"rdmap0s6": {"tx_bytes": 10 * len(reads), "rx_bytes": 0, "errors": {}}}}

    monkeypatch.setattr(fabric.efa_counters, "read_view", view)
    probe = fabric.Probe("nccl", 0, 0, str(tmp_path), environ={})
    assert "counters" not in sent(probe, final=False) and len(reads) == 1
    delta = sent(probe, final=True)["counters"]
    assert delta["rdmap0s6"]["tx_bytes"] == 10 and len(reads) == 2


def test_a_disabled_probe_plans_nothing():
    off = fabric.Probe("nccl", 0, 0, None, environ={}, enabled=False)
    assert off.plan == {"env": {}, "log": None, "note": "fabric capture off", "capture": {"by": "off"}}


def test_summarize_whole_for_gloo_and_for_nccl_without_logs():
    # a CPU run names no NCCL log directory, even when the run made one
    assert fabric.summarize("gloo", {"a": None}, log_dir="/l") == {
        "verdict": "not-nccl",
        "backend": "gloo",
        "network": None,
        "provider": None,
        "nodes": None,
        "ranks": None,
        "deciding": None,
        "hints": [],
        "at": "end",
        "log_dir": None,
        "efa_bytes": None,
        "efa_bytes_note": "no node reported EFA counters",
        "reasons": [
            "backend gloo: the collectives do not use NCCL (a CPU run), so no network carries them that NCCL "
            "chose; run with --use-gpu for a fabric verdict"
        ],
    }
    fab = fabric.summarize("nccl", {"a": None, "b": None}, log_dir="/l", at="init")
    assert {
        k: fab[k] for k in ("verdict", "network", "provider", "nodes", "ranks", "deciding", "hints", "at", "log_dir")
    } == {
        "verdict": "undetermined",
        "network": None,
        "provider": None,
        "nodes": None,
        "ranks": 2,
        "deciding": None,
        "hints": [],
        "at": "init",
        "log_dir": "/l",
    }
    assert fab["reasons"][0].startswith("no rank's NCCL log has an NCCL line")


def test_summarize_keeps_the_whole_previous_record_and_every_image():
    prev = {"verdict": "efa", "network": "Libfabric", "provider": "efa", "nodes": 2, "step": 9, "extra": 1}
    fab = fabric.summarize("nccl", {"r0": RANK0_VIEW}, previous=prev, images={"h1": "img:a"})
    assert fab["previous"] == {"verdict": "efa", "network": "Libfabric", "provider": "efa", "nodes": 2, "step": 9}
    assert fab["image"]["references"] == ["img:a"]


def test_efa_bytes_per_node_skip_deviceless_nodes_and_keep_one_sided_counters():
    deltas = {
        "a": {},
        "b": {"rdmap0s6": {"tx_bytes": 5, "errors": {}}},
        "c": {"rdmap0s6": {"rx_bytes": 7, "errors": {}}},
        "d": {"rdmap0s6": {"errors": {"tx_bytes": "went backwards by 3 (counter reset?)"}}},
    }  # nothing readable
    fab = fabric.summarize("gloo", {}, counter_deltas=deltas)
    assert fab["efa_bytes"] == {
        "b": {"sent": 5, "received": None, "devices": 1},
        "c": {"sent": None, "received": 7, "devices": 1},
    }


def test_the_line_of_an_efa_run_cites_its_deciding_line_and_every_node():
    fab = {
        "verdict": "efa",
        "network": "Libfabric",
        "provider": "efa",
        "nodes": 2,
        "ranks": 8,
        "deciding": "x.log:3: NET/OFI Selected provider is efa",
        "reasons": ["first reason"],
        "efa_bytes": {"a": {"sent": 1, "received": 2}, "b": {"sent": 3, "received": 4}},
    }
    assert fabric.line(fab) == (
        "[fabric] efa network=Libfabric provider=efa nodes=2 ranks=8 efa_bytes a: sent 1 "
        "received 2, b: sent 3 received 4 (x.log:3: NET/OFI Selected provider is efa)"
    )


def test_summarize_takes_ranks_and_evidence_from_the_report():
    log = (REPO / "tests/fixtures/nccl-logs/real_efa_p3dn_k8s_mpijob_nccl264_16ranks.log").read_bytes()
    from ray_efa_eks.efacheck import nccl_log

    rep = nccl_log.analyze_bytes([("job", log)])
    fab = fabric.summarize("nccl", {"job": log})
    assert rep.ranks != 1 and fab["ranks"] == rep.ranks and fab["evidence"] == list(rep.evidence)
    assert fab["deciding"] == rep.evidence[0] and fab["verdict"] == "efa"


def test_counters_without_the_expected_bytes_judge_nothing():
    flat = {"n1": {"rdmap0s6": {"tx_bytes": 0, "rx_bytes": 0, "errors": {}}}}
    plain = fabric.summarize("nccl", {"r0": RANK0_VIEW})
    fab = fabric.summarize("nccl", {"r0": RANK0_VIEW}, counter_deltas=flat)
    assert fab["verdict"] == "efa" and fab["reasons"] == plain["reasons"] and "witness" not in fab
    assert (
        fabric.summarize("nccl", {"r0": RANK0_VIEW}, counter_deltas=flat, expected_bytes_per_node=1e9)["verdict"]
        == "fallback"
    )


def test_the_env_the_stack_renders_is_replaced_by_the_capture_and_nothing_else_touched(tmp_path):
    """test_fabric.py's deployed-worker test without its two whole-stack mock runs (which .ci/mutation.py deselects:
    they cost each mutant's fork 5.5 s CPU and ran past mutmut's wall limit): the GPU worker's NCCL env from the stack's own functions
    (components/ray/raycluster.py ``efa_env``, ``stack_nccl_env``)."""
    from ray_efa_eks.components.ray import raycluster
    from ray_efa_eks.components.nodes.instances import CATALOGUE

    nccl = raycluster.efa_env(CATALOGUE["p5.48xlarge"], True, "WARN", "ofi")
    env = {e["name"]: e["value"] for e in nccl + [raycluster.stack_nccl_env(nccl)]}
    rendered = dict(env)
    probe = fabric.Probe("nccl", 0, 1, str(tmp_path / "nccl-logs"), environ=env)
    assert (
        env == {**rendered, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "NCCL_DEBUG_FILE": probe.plan["log"]}
        and probe.plan["note"] is None
    )
    Path(probe.plan["log"]).write_bytes(RANK0_VIEW)  # what NCCL writes there
    fab = probe.judge(Dist([]), final=True)
    assert fab["verdict"] == "efa", fab["reasons"]
    assert fab["capture"] == {"by": "run", "replaced": {"NCCL_DEBUG": "WARN"}}
    assert fab["capture_text"] == "run (replaced the stack's NCCL_DEBUG=WARN)"
    assert "capture=run (replaced the stack's NCCL_DEBUG=WARN)" in fabric.line(fab)
