"""Every condition of the EFA counter witness reached and its outcome asserted (issue 40): the branches
test_efa_counters.py and the exporter tests did not reach."""

from __future__ import annotations

import io
from dataclasses import dataclass
from ray_efa_eks.efacheck import efa_counters as ec

NODE = "ip-10-0-0-1.ec2.internal"


def _served(monkeypatch, text: str) -> None:
    class Answer(io.BytesIO):
        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False
    monkeypatch.setattr("urllib.request.urlopen", lambda url, timeout: Answer(text.encode()))


def test_read_ports_without_a_root_or_with_a_port_without_counters(tmp_path):
    assert ec.read_ports(str(tmp_path / "missing")) == {}
    (tmp_path / "efa_0" / "ports" / "1").mkdir(parents=True)
    out = ec.read_ports(str(tmp_path))
    hw = str(tmp_path / "efa_0" / "ports" / "1" / "hw_counters")
    assert out == {"efa_0": {"ports": {}, "errors": {hw: "No such file or directory"}}}


def test_the_exporter_values_ports_and_missing_counters(monkeypatch):
    _served(monkeypatch, "\n".join([
        "# HELP efa_tx_bytes_total bytes",
        f'efa_tx_bytes_total{{device="efa_0",port="1",node="{NODE}"}} 1.5e3',
        f'efa_rx_bytes_total{{device="efa_0",port="1",node="{NODE}"}} NaNx',
        f'efa_tx_bytes_total{{device="efa_0",port="2",node="{NODE}"}} 7',
        f'efa_send_bytes_total{{device="efa_1",port="1",node="{NODE}"}} 9',
        f'efa_tx_bytes_total{{port="1",node="{NODE}"}} 5',
    ]) + "\n")
    snap, why = ec.read_exporter("http://x/metrics", NODE)
    assert why is None
    assert snap["efa_0"]["tx_bytes"] == 1500  # a float form is rounded to an int; port 2 and no device are skipped
    assert snap["efa_0"]["errors"] == {"rx_bytes": "http://x/metrics: value 'NaNx'"}
    assert snap["efa_1"] == {"send_bytes": 9, "errors": {
        "tx_bytes": "http://x/metrics: efa_tx_bytes_total not served for efa_1",
        "rx_bytes": "http://x/metrics: efa_rx_bytes_total not served for efa_1"}}


def test_an_exporter_with_devices_but_no_counter_says_so(monkeypatch):
    _served(monkeypatch, f'efa_devices{{node="{NODE}"}} 2\nefa_exporter_scrape_errors{{node="{NODE}"}} 3\n')
    snap, why = ec.read_exporter("http://x/metrics", NODE)
    assert snap == {} and why.startswith("2 EFA device(s), no readable port counter (3 read error(s) on the node")


def test_read_view_keeps_the_first_unreadable_root_as_its_fallback(tmp_path):
    for root in ("a", "b"):
        (tmp_path / root / "efa_0").mkdir(parents=True)
    view = ec.read_view((("pod", str(tmp_path / "a")), ("host", str(tmp_path / "b"))))
    assert view["view"] is None and view["root"] == str(tmp_path / "a")
    assert view["unreadable"].count("1 device(s), no readable port counter") == 2
    assert "node agent's EFA exporter" in view["unreadable"].split("; host")[0]
    assert "node agent" not in view["unreadable"].split("; host")[1]


def test_judge_counters_without_nodes_or_expected_bytes_cannot_tell():
    assert ec.judge_counters({}, 1e9, "efa") == (None, ["no node reported EFA counters"])
    ok, reasons = ec.judge_counters({"n1": {"efa_0": {"tx_bytes": 5, "errors": {}}}}, 0, "efa")
    assert ok is None and reasons == ["expected bytes per node is 0: nothing to compare the counters with"]


def test_judge_counters_names_unreadable_counters_and_a_partial_share():
    delta = {"efa_0": {"tx_bytes": 300, "errors": {"rx_bytes": "went backwards by 5 (counter reset?)"}}}
    ok, reasons = ec.judge_counters({"n1": delta}, 1000, "efa")
    assert ok is False
    assert reasons == ["only part of the traffic used EFA: node n1: EFA moved 0.000 GB = 30% of the 0.000 GB the "
                       "collectives had to send across nodes (efa_0 sent 0.000 GB received ?); unreadable: efa_0 "
                       "rx_bytes: went backwards by 5 (counter reset?) < 50%"]
    ok, reasons = ec.judge_counters({"n1": {"efa_0": {"tx_bytes": 5, "errors": {}}}}, 1000, "fallback")
    assert ok is False and reasons[0].startswith("EFA counters did not move: node n1")
    ok, reasons = ec.judge_counters({"n1": {"efa_0": {"tx_bytes": 900, "errors": {}}}}, 1000, "fallback")
    assert ok is True and reasons[-1] == "the EFA counters moved although the NCCL log says fallback"


def test_combine_keeps_a_report_without_a_witness_field():
    @dataclass
    class OldReport:  # an nccl_log Report from before the witness field
        verdict: str
        reasons: list
        causes: list

    rep = ec.combine(OldReport("efa", ["log"], []), (False, ["flat"]))
    assert (rep.verdict, rep.causes, rep.reasons) == ("fallback", ["counters_flat"], ["log", "EFA counters: flat"])
    assert not hasattr(rep, "witness")


def test_an_exporter_on_a_node_without_efa_says_no_device(monkeypatch):
    _served(monkeypatch, f'efa_devices{{node="{NODE}"}} 0\n')
    assert ec.read_exporter("http://x/metrics", NODE) == ({}, f"no EFA device on node {NODE}")
    _served(monkeypatch, "")
    assert ec.read_exporter("http://x/metrics") == ({}, "no EFA device on node ?")


# --- survivors of the mutation tool (mutmut 3.8.1), killed here ---

def test_line_rate_math_at_its_boundaries():
    assert ec.allreduce_bytes_per_node(1000.0, 2, 2) == 1000.0  # 2 ranks on 2 nodes: 2(2-1)/2 = 1 x size
    assert ec.allreduce_bytes_per_node(1000.0, 1, 2) == 0.0 and ec.allreduce_bytes_per_node(1000.0, 8, 1) == 0.0
    assert ec.tree_share(2) == 1.0 and ec.tree_share(8) == 8 / 14
    assert ec.tree_share(1) == 0.0 and ec.tree_share(0) == 0.0


def test_counter_delta_names_appeared_and_disappeared_devices_and_keeps_going():
    one = {"tx_bytes": 10, "rx_bytes": 10, "errors": {}}
    out = ec.counter_delta({"efa_0": one, "efa_1": one}, {"efa_1": {"tx_bytes": 4, "rx_bytes": 30, "errors": {}},
                                                          "efa_2": one})
    assert out["efa_0"] == {"errors": {"device": "disappeared during the sweep"}}
    assert out["efa_2"] == {"errors": {"device": "appeared during the sweep"}}
    assert out["efa_1"] == {"errors": {"tx_bytes": "went backwards by 6 (counter reset?)"}, "rx_bytes": 20}
    half = ec.counter_delta({"efa_0": {"tx_bytes": 1, "errors": {}}}, {"efa_0": {"rx_bytes": 5, "errors": {}}})
    assert half == {"efa_0": {"errors": {}}}  # a counter read on one side only gives no delta


def test_combine_states_reasons_and_causes():
    efa = analyze_efa()
    flat = ec.combine(efa, (False, ["n1 flat"]))
    assert flat.witness == {"counters": "flat", "required": False, "reasons": ["n1 flat"]}
    assert flat.reasons[-1] == "EFA counters: n1 flat" and flat.causes == ["counters_flat"]
    moved = ec.combine(efa, (True, ["n1 moved", "n2 moved"]))
    assert moved.verdict == "efa" and moved.reasons[-1] == "EFA counters: n1 moved | n2 moved"
    assert moved.witness["counters"] == "moved" and moved.causes == []
    unread = ec.combine(efa, (None, ["n1 ?", "n2 ?"]))
    assert unread.verdict == "efa" and unread.causes == ["counters_unavailable"]
    assert unread.reasons[0] == ("the EFA hardware counters could not be read, so the second witness is missing: "
                                 "n1 ? | n2 ?") and "" not in unread.reasons
    required = ec.combine(efa, (None, ["n1 ?"]), require=True)
    assert required.verdict == "undetermined" and required.reasons[0].startswith(
        "the EFA hardware counters could not be read, so the second witness is missing and efaCheckRequireCounters "
        "makes the verdict undetermined: n1 ?")
    fallback = ec.combine(with_verdict(efa, "fallback", "socket"), (None, ["n1 ?"]), require=True)
    assert fallback.verdict == "fallback" and "counters_unavailable" not in fallback.causes


def analyze_efa():
    from ray_efa_eks.efacheck.nccl_log import analyze_text
    lines = []
    for i, h in enumerate(("h1", "h2")):
        p = f"{h}:{i}:{i} [0] NCCL INFO "
        lines += [p + "NET/OFI Selected provider is efa, fabric is efa-direct (found 1 nics)",
                  p + "Using network Libfabric", p + f"Channel 00/0 : {i}[0] -> {1 - i}[0] [send] via NET/Libfabric/0"]
    rep = analyze_text("\n".join(lines) + "\n")
    assert rep.verdict == "efa"
    return rep


from ray_efa_eks.efacheck.nccl_log import with_verdict  # noqa: E402


def test_judge_counters_boundaries_and_words():
    at_flat = {"n1": {"efa_0": {"tx_bytes": 10, "errors": {}}}}
    ok, reasons = ec.judge_counters(at_flat, 1000, "efa")  # exactly FLAT (1%) is "part", not "did not move"
    assert ok is False and reasons[0].startswith("only part of the traffic used EFA")
    ok, reasons = ec.judge_counters({"n1": {"efa_0": {"tx_bytes": 1, "errors": {}}}}, 1, "efa")
    assert ok is True  # one expected byte is still a figure to compare with
    ok, reasons = ec.judge_counters({"n1": {}, "n2": {}}, 1000, "efa", unreadable={"n1": "exporter down"})
    assert ok is None and reasons == ["node n1: no EFA device (exporter down)",
                                      f"node n2: no EFA device (under {ec.SYSFS_ROOT})"]
    two = {"n1": {"efa_0": {"tx_bytes": 600, "errors": {}}, "efa_1": {"rx_bytes": 700, "errors": {}}}}
    ok, reasons = ec.judge_counters(two, 1000, "efa")
    assert ok is True and "(efa_0 sent 0.000 GB received ?, efa_1 sent ? received 0.000 GB)" in reasons[0]
    none = {"n1": {"efa_0": {"errors": {"tx_bytes": "a", "rx_bytes": "b"}}}}
    ok, reasons = ec.judge_counters(none, 1000, "efa")
    assert ok is None and reasons == ["node n1: no readable EFA counter (efa_0 tx_bytes: a; efa_0 rx_bytes: b)"]
    ok, reasons = ec.judge_counters({"n1": {"efa_0": {"errors": {}}}}, 1000, "efa")
    assert reasons == ["node n1: no readable EFA counter (none)"]
