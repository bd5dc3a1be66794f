"""Every condition of the EFA counter witness reached through its public readers and judgement and its outcome
asserted: the branches test_efa_counters.py and the exporter tests did not reach."""

from __future__ import annotations

import io
import os
import stat
from dataclasses import dataclass

import pytest

from ray_efa_eks.efacheck import efa_counters as ec
from tests.helpers.sysfs import kernel_sysfs

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
    _served(
        monkeypatch,
        "\n".join(
            [
                "# HELP efa_tx_bytes_total bytes",
                f'efa_tx_bytes_total{{device="efa_0",port="1",node="{NODE}"}} 1.5e3',
                f'efa_rx_bytes_total{{device="efa_0",port="1",node="{NODE}"}} NaNx',
                f'efa_tx_bytes_total{{device="efa_0",port="2",node="{NODE}"}} 7',
                f'efa_send_bytes_total{{device="efa_1",port="1",node="{NODE}"}} 9',
                f'efa_tx_bytes_total{{port="1",node="{NODE}"}} 5',
            ]
        )
        + "\n",
    )
    snap, why = ec.read_exporter("http://x/metrics", NODE)
    assert why is None
    assert snap["efa_0"]["tx_bytes"] == 1500  # a float form is rounded to an int; port 2 and no device are skipped
    assert snap["efa_0"]["errors"] == {"rx_bytes": "http://x/metrics: value 'NaNx'"}
    assert snap["efa_1"] == {
        "send_bytes": 9,
        "errors": {
            "tx_bytes": "http://x/metrics: efa_tx_bytes_total not served for efa_1",
            "rx_bytes": "http://x/metrics: efa_rx_bytes_total not served for efa_1",
        },
    }


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
    assert reasons == [
        "only part of the traffic used EFA: node n1: EFA moved 0.000 GB = 30% of the 0.000 GB the "
        "collectives had to send across nodes (efa_0 sent 0.000 GB received ?); unreadable: efa_0 "
        "rx_bytes: went backwards by 5 (counter reset?) < 50%"
    ]
    ok, reasons = ec.judge_counters({"n1": {"efa_0": {"tx_bytes": 5, "errors": {}}}}, 1000, "fallback")
    assert ok is False and reasons[0].startswith("EFA counters did not move: node n1")
    ok, reasons = ec.judge_counters({"n1": {"efa_0": {"tx_bytes": 900, "errors": {}}}}, 1000, "fallback")
    assert ok is True and reasons[-1].startswith("the EFA counters moved") and reasons[-1].endswith("says fallback")


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
    out = ec.counter_delta(
        {"efa_0": one, "efa_1": one}, {"efa_1": {"tx_bytes": 4, "rx_bytes": 30, "errors": {}}, "efa_2": one}
    )
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
    assert unread.reasons[0].startswith("the EFA hardware counters could not be read")
    assert unread.reasons[0].endswith("second witness is missing: n1 ? | n2 ?") and "" not in unread.reasons
    required = ec.combine(efa, (None, ["n1 ?"]), require=True)
    assert required.verdict == "undetermined" and required.reasons[0].startswith(
        "the EFA hardware counters could not be read, so the second witness is missing and efaCheckRequireCounters "
        "makes the verdict undetermined: n1 ?"
    )
    fallback = ec.combine(with_verdict(efa, "fallback", "socket"), (None, ["n1 ?"]), require=True)
    assert fallback.verdict == "fallback" and "counters_unavailable" not in fallback.causes


def analyze_efa():
    from ray_efa_eks.efacheck.nccl_log import analyze_text

    lines = []
    for i, h in enumerate(("h1", "h2")):
        p = f"{h}:{i}:{i} [0] NCCL INFO "
        lines += [
            p + "NET/OFI Selected provider is efa, fabric is efa-direct (found 1 nics)",
            p + "Using network Libfabric",
            p + f"Channel 00/0 : {i}[0] -> {1 - i}[0] [send] via NET/Libfabric/0",
        ]
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
    assert ok is None and reasons == [
        "node n1: no EFA device (exporter down)",
        f"node n2: no EFA device (under {ec.SYSFS_ROOT})",
    ]
    two = {"n1": {"efa_0": {"tx_bytes": 600, "errors": {}}, "efa_1": {"rx_bytes": 700, "errors": {}}}}
    ok, reasons = ec.judge_counters(two, 1000, "efa")
    assert ok is True and "(efa_0 sent 0.000 GB received ?, efa_1 sent ? received 0.000 GB)" in reasons[0]
    none = {"n1": {"efa_0": {"errors": {"tx_bytes": "a", "rx_bytes": "b"}}}}
    ok, reasons = ec.judge_counters(none, 1000, "efa")
    assert ok is None and reasons == ["node n1: no readable EFA counter (efa_0 tx_bytes: a; efa_0 rx_bytes: b)"]
    ok, reasons = ec.judge_counters({"n1": {"efa_0": {"errors": {}}}}, 1000, "efa")
    assert reasons == ["node n1: no readable EFA counter (none)"]


# --- conditions only a mutation run found unasserted ---


@pytest.mark.parametrize("node", ['a"b\\c\nd\\n', "plain", "ip-10-0-0-1.ec2.internal"])
def test_the_exporters_node_label_round_trips_to_the_reader(tmp_path, node):
    """A quote, a backslash, a newline and a literal backslash-n in the node name: the reader takes back exactly the
    node the exporter served (one escaping rule on both sides), so the node check neither refuses nor passes wrongly."""
    from ray_efa_eks.efacheck.efa_exporter import Exporter

    sysfs = kernel_sysfs(tmp_path / "sys", counters={"rdmap0s30": {"tx_bytes": 7}})
    served = tmp_path / "metrics"
    served.write_text(Exporter(str(sysfs), node).scrape())
    snap, why = ec.read_exporter(served.as_uri(), node)
    assert why is None and snap["rdmap0s30"]["tx_bytes"] == 7
    snap, why = ec.read_exporter(served.as_uri(), "other")
    assert snap == {} and why.startswith(f"it answered for node {node}, this pod runs on other")


def test_an_exporter_answer_past_the_size_cap_is_not_read(tmp_path):
    served = tmp_path / "metrics"
    served.write_bytes(b"#" * ec.EXPORTER_MAX_BYTES + b"\n")
    snap, why = ec.read_exporter(served.as_uri(), NODE)
    assert snap == {} and why.startswith(f"it answered more than {ec.EXPORTER_MAX_BYTES} bytes: not the node agent's")
    served.write_bytes(b"#" * (ec.EXPORTER_MAX_BYTES - 1) + b"\n")  # at the cap: read (and nothing served)
    assert ec.read_exporter(served.as_uri(), NODE) == ({}, "no EFA device on node ?")


def _port_counters(root) -> tuple:
    hw = root / "efa_0" / "ports" / "1" / "hw_counters"
    hw.mkdir(parents=True)
    (hw / "rx_bytes").write_text("12\n")
    return hw, hw / "tx_bytes"


@pytest.mark.parametrize(
    "mode, says",
    [(stat.S_IFREG | 0o644, "not a regular file (a FIFO)"), (0, "not a regular file (not a file): not opened")],
)
def test_a_counter_file_that_is_not_a_regular_file_when_opened_is_not_read(monkeypatch, tmp_path, mode, says):
    """A regular file when looked at and a FIFO once opened (replaced between the two), or a kind of file no test
    names: an error naming the file, never a read that could block."""
    hw, tx = _port_counters(tmp_path)
    os.mkfifo(tx)
    real = os.stat

    def looked_at(path, *a, **kw):
        got = real(path, *a, **kw)
        return os.stat_result((mode, *got[1:])) if str(path) == str(tx) else got

    monkeypatch.setattr(os, "stat", looked_at)
    got = ec.read_counters(str(tmp_path))["efa_0"]
    monkeypatch.undo()
    assert got["rx_bytes"] == 12 and "tx_bytes" not in got
    assert got["errors"]["tx_bytes"] == f"{tx}: {says}"


def test_a_ports_directory_with_a_name_no_kernel_gives_says_so_and_reads_the_rest(tmp_path):
    hw, tx = _port_counters(tmp_path)
    tx.write_text("5\n")
    (hw.parent.parent / "bad name").mkdir()
    ports = tmp_path / "efa_0" / "ports"
    got = ec.read_ports(str(tmp_path))["efa_0"]
    assert got["ports"]["1"] == {"rx_bytes": 12, "tx_bytes": 5}
    assert got["errors"] == {str(ports): "1 entry with a name no kernel gives (e.g. 'bad name'): not read"}


def test_a_counter_that_is_not_ascii_digits_is_an_error_not_a_number(tmp_path):
    hw = tmp_path / "efa_0" / "ports" / "1" / "hw_counters"
    hw.mkdir(parents=True)
    (hw / "tx_bytes").write_text("\u0663\n", encoding="utf-8")  # ARABIC-INDIC DIGIT THREE: int() would take it
    (hw / "rx_bytes").write_text("12\n")
    got = ec.read_counters(str(tmp_path))["efa_0"]
    assert "tx_bytes" not in got and got["rx_bytes"] == 12
    assert got["errors"]["tx_bytes"].startswith(f"{hw / 'tx_bytes'}: not an unsigned integer (b'\\xd9\\xa3")


def test_read_counters_errors_say_the_file_and_why_exactly(tmp_path):
    hw = tmp_path / "efa_0" / "ports" / "1" / "hw_counters"
    (hw / "tx_bytes").mkdir(parents=True)  # open() fails with an OSError that has a strerror
    (hw / "rx_bytes").write_text("lots\n")
    assert ec.read_counters(str(tmp_path))["efa_0"]["errors"] == {
        "tx_bytes": f"{hw / 'tx_bytes'}: not a regular file (a directory): not opened",
        "rx_bytes": f"{hw / 'rx_bytes'}: not an unsigned integer (b'lots\\n')",
    }


def test_read_ports_reads_on_past_unreadable_devices_and_ports_in_port_order(tmp_path):
    (tmp_path / "efa_0").mkdir()  # no ports directory
    (tmp_path / "efa_1" / "ports" / "1").mkdir(parents=True)  # port 1 without hw_counters
    for port, value in (("2", "5\n"), ("10", "7\n")):
        (tmp_path / "efa_1" / "ports" / port / "hw_counters").mkdir(parents=True)
        (tmp_path / "efa_1" / "ports" / port / "hw_counters" / "tx_bytes").write_text(value)
    (tmp_path / "efa_1" / "ports" / "2" / "hw_counters" / "rx_bytes").write_text("x\n")
    out = ec.read_ports(str(tmp_path))
    p = tmp_path / "efa_1" / "ports"
    assert out["efa_0"] == {"ports": {}, "errors": {str(tmp_path / "efa_0" / "ports"): "No such file or directory"}}
    assert out["efa_1"]["ports"] == {"2": {"tx_bytes": 5}, "10": {"tx_bytes": 7}}
    assert list(out["efa_1"]["ports"]) == ["2", "10"]  # numeric order, as the exporter lists its series
    assert out["efa_1"]["errors"] == {
        str(p / "1" / "hw_counters"): "No such file or directory",
        str(p / "2" / "hw_counters" / "rx_bytes"): "not an unsigned integer (b'x\\n')",
    }


def test_an_unanswered_exporter_names_the_pod_to_look_at_on_this_node(monkeypatch):
    import urllib.error

    def refused(url, timeout):
        raise urllib.error.URLError("Connection refused")

    monkeypatch.setattr("urllib.request.urlopen", refused)
    where = "(the node agent's efa-exporter pod on this node: kubectl -n efa-node-agent get pods -o wide"
    assert ec.read_exporter("http://x/metrics", NODE) == (
        {},
        f"no answer (Connection refused) {where} --field-selector spec.nodeName={NODE})",
    )
    assert ec.read_exporter("http://x/metrics") == ({}, f"no answer (Connection refused) {where})")


def test_read_view_reads_an_https_exporter_for_this_pods_node(monkeypatch):
    _served(
        monkeypatch,
        f'efa_tx_bytes_total{{device="efa_0",port="1",node="{NODE}"}} 5\n'
        f'efa_rx_bytes_total{{device="efa_0",port="1",node="{NODE}"}} 6\n',
    )
    monkeypatch.setenv(ec.NODE_ENV, NODE)
    v = ec.read_view((("exporter", "https://x/metrics"),))
    assert v == {
        "view": "exporter",
        "root": "https://x/metrics",
        "unreadable": None,
        "snapshot": {"efa_0": {"tx_bytes": 5, "rx_bytes": 6, "errors": {}}},
    }
    monkeypatch.setenv(ec.NODE_ENV, "ip-10-0-9-9.ec2.internal")  # the Service sent the scrape to another node
    v = ec.read_view((("exporter", "https://x/metrics"),))
    assert v["view"] is None and v["unreadable"] == (
        f"exporter https://x/metrics: it answered for node {NODE}, this pod runs on ip-10-0-9-9.ec2.internal: the "
        "Service must keep traffic on the node (internalTrafficPolicy: Local)"
    )


def test_an_exporter_without_tx_rx_counters_is_no_readable_view(monkeypatch):
    _served(monkeypatch, f'efa_send_bytes_total{{device="efa_0",port="1",node="{NODE}"}} 5\n')
    v = ec.read_view((("exporter", "http://x/metrics"),))
    assert v == {
        "view": None,
        "root": None,
        "snapshot": {},
        "unreadable": "exporter http://x/metrics: no readable port counter",
    }


def test_read_view_words_each_unreadable_sysfs_view_exactly(tmp_path):
    for root in ("pod", "host"):
        for dev in ("efa_0", "efa_1"):
            (tmp_path / root / dev).mkdir(parents=True)
    good = tmp_path / "good" / "efa_0" / "ports" / "1" / "hw_counters"
    good.mkdir(parents=True)
    (good / "tx_bytes").write_text("1\n")
    (good / "rx_bytes").write_text("2\n")
    v = ec.read_view((("pod", str(tmp_path / "pod")), ("host", str(tmp_path / "host"))))
    why = "; ".join(
        f"{tmp_path / root / dev / 'ports/1/hw_counters'}: no such directory"
        for root in ("pod",)
        for dev in ("efa_0", "efa_1")
    )
    why_host = why.replace(str(tmp_path / "pod"), str(tmp_path / "host"))
    assert v["unreadable"] == (
        f"pod view {tmp_path / 'pod'}: 2 device(s), no readable port counter ({why}) (a pod's network namespace "
        f"gets no port counters: the node agent's EFA exporter reads them, reached through ${ec.EXPORTER_ENV}); "
        f"host view {tmp_path / 'host'}: 2 device(s), no readable port counter ({why_host})"
    )
    v = ec.read_view((("pod", str(tmp_path / "pod")), ("host", str(tmp_path / "good"))))
    assert (v["view"], v["root"], v["unreadable"]) == ("host", str(tmp_path / "good"), None)


def test_unreadable_counters_leave_only_the_witness_reason():
    rep = ec.combine(analyze_efa(), (None, ["n1 ?"]))
    assert rep.reasons[0].startswith("the EFA hardware counters could not be read") and rep.reasons[0].endswith(
        "the second witness is missing: n1 ?"
    )
    assert rep.reasons[1:] == analyze_efa().reasons  # the log's own reasons, nothing added after them


def test_the_exporter_is_asked_with_a_timeout_and_a_stray_byte_spoils_nothing(monkeypatch):
    asked = []

    class Answer(io.BytesIO):
        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    body = (
        b"# HELP efa_tx_bytes_total bytes \xff\xfe moved\n"
        + f'efa_tx_bytes_total{{device="efa_0",port="1",node="{NODE}"}} 5\n'.encode()
        + f'efa_rx_bytes_total{{device="efa_0",port="1",node="{NODE}"}} 6\n'.encode()
    )
    monkeypatch.setattr("urllib.request.urlopen", lambda url, timeout: asked.append(timeout) or Answer(body))
    assert ec.read_exporter("http://x/metrics", NODE) == ({"efa_0": {"tx_bytes": 5, "rx_bytes": 6, "errors": {}}}, None)
    assert asked == [ec.EXPORTER_TIMEOUT_S]  # a hung exporter cannot hold the rank


def test_why_an_exporter_did_not_answer_in_the_errors_own_words(monkeypatch):
    where = "(the node agent's efa-exporter pod on this node: kubectl -n efa-node-agent get pods -o wide)"
    assert ec.read_exporter("efa-exporter.local/metrics") == (  # urllib: ValueError, no reason or strerror
        {},
        f"no answer (unknown url type: 'efa-exporter.local/metrics') {where}",
    )

    def refused(url, timeout):
        raise ConnectionRefusedError(111, "Connection refused")  # an OSError: its strerror, not '[Errno 111] ...'

    monkeypatch.setattr("urllib.request.urlopen", refused)
    assert ec.read_exporter("http://x/metrics") == ({}, f"no answer (Connection refused) {where}")


def test_series_without_a_node_label_do_not_count_as_another_node(monkeypatch):
    _served(
        monkeypatch,
        "process_start_time_seconds 1\n"
        f'efa_tx_bytes_total{{device="efa_0",port="1",node="{NODE}"}} 5\n'
        f'efa_rx_bytes_total{{device="efa_0",port="1",node="{NODE}"}} 6\n',
    )
    assert ec.read_exporter("http://x/metrics", NODE) == ({"efa_0": {"tx_bytes": 5, "rx_bytes": 6, "errors": {}}}, None)


def test_an_exporter_answering_for_other_nodes_names_them_all(monkeypatch):
    _served(monkeypatch, 'efa_devices{node="ip-b"} 1\nefa_devices{node="ip-a"} 1\n')
    assert ec.read_exporter("http://x/metrics", NODE) == (
        {},
        f"it answered for node ip-a, ip-b, this pod runs on {NODE}: the Service must keep traffic on the node "
        "(internalTrafficPolicy: Local)",
    )


def test_judge_counters_refuses_a_negative_expectation_and_takes_deltas_without_errors():
    one = {"n1": {"efa_0": {"tx_bytes": 600}}}  # a hand-made delta: no "errors" key
    assert ec.judge_counters(one, -5, "efa") == (
        None,
        ["expected bytes per node is -5: nothing to compare the counters with"],
    )
    ok, reasons = ec.judge_counters(one, 1000, "efa")
    assert ok is True and reasons == [
        "node n1: EFA moved 0.000 GB = 60% of the 0.000 GB the collectives had to send "
        "across nodes (efa_0 sent 0.000 GB received ?) >= 50%"
    ]
    # a long run on a p5 (3200 Gbps) moves petabytes: GB are 10**9 bytes to the last digit shown
    ok, reasons = ec.judge_counters({"n1": {"efa_0": {"tx_bytes": 3 * 10**15}}}, 5 * 10**15, "efa")
    assert reasons[0].startswith("node n1: EFA moved 3000000.000 GB = 60% of the 5000000.000 GB")


def test_exporter_answers_without_counters_word_their_figures(monkeypatch):
    _served(monkeypatch, f'efa_devices{{node="{NODE}"}} 2\n')  # an exporter that does not serve its error count
    snap, why = ec.read_exporter("http://x/metrics", NODE)
    assert snap == {} and why.startswith("2 EFA device(s), no readable port counter (0 read error(s) on the node; ")
    _served(monkeypatch, 'efa_devices{node="ip-a"} 0\nefa_devices{node="ip-b"} 0\n')
    assert ec.read_exporter("http://x/metrics") == ({}, "no EFA device on node ip-a, ip-b")


def test_a_device_whose_first_served_counter_is_bad_keeps_that_error(monkeypatch):
    _served(monkeypatch, f'efa_rx_bytes_total{{device="efa_2",port="1",node="{NODE}"}} many\n')
    assert ec.read_exporter("http://x/metrics", NODE) == (
        {
            "efa_2": {
                "errors": {
                    "rx_bytes": "http://x/metrics: value 'many'",
                    "tx_bytes": "http://x/metrics: efa_tx_bytes_total not served for efa_2",
                }
            }
        },
        None,
    )


def test_message_and_rdma_parts_count_when_they_exceed_the_totals():
    delta = {"efa_0": {"tx_bytes": 10, "send_bytes": 30, "rdma_write_bytes": 40, "rx_bytes": 5, "errors": {}}}
    assert ec.node_bytes(delta) == {"efa_0": {"sent": 70, "received": 5}}


def test_every_unreadable_counter_of_a_node_that_moved_bytes_is_named():
    delta = {"efa_0": {"tx_bytes": 900, "errors": {"rx_bytes": "a", "send_bytes": "b"}}}
    ok, reasons = ec.judge_counters({"n1": delta}, 1000, "efa")
    assert ok is True and reasons[0].endswith("; unreadable: efa_0 rx_bytes: a; efa_0 send_bytes: b >= 50%")


def test_read_ports_skips_rdma_devices_of_another_driver(tmp_path):
    for dev, driver in (("mlx5_0", "mlx5_core"), ("efa_0", "efa")):
        (tmp_path / dev / "ports").mkdir(parents=True)
        (tmp_path / dev / "device").mkdir()
        (tmp_path / dev / "device" / "driver").symlink_to(f"../../../bus/pci/drivers/{driver}")
    assert ec.read_ports(str(tmp_path)) == {"efa_0": {"ports": {}, "errors": {}}}


# --- the bounded sysfs reads: what a hostile or odd tree is answered with ------------------------------------------


@pytest.mark.parametrize(
    "mode, kind",
    [(stat.S_IFCHR, "a character device"), (stat.S_IFBLK, "a block device"), (stat.S_IFSOCK, "a socket")],
)
def test_a_counter_that_is_a_device_or_socket_is_named_and_not_opened(monkeypatch, tmp_path, mode, kind):
    hw, tx = _port_counters(tmp_path)
    tx.write_text("5\n")
    real = os.stat
    monkeypatch.setattr(
        os, "stat", lambda p, *a, **kw: os.stat_result((mode, *real(p)[1:])) if str(p) == str(tx) else real(p, *a, **kw)
    )
    got = ec.read_counters(str(tmp_path))["efa_0"]
    monkeypatch.undo()
    assert got["errors"]["tx_bytes"] == f"{tx}: not a regular file ({kind}): not opened"


@pytest.mark.parametrize(
    "text, value, why",
    [
        (b"18446744073709551615\n", 2**64 - 1, None),  # the largest 64-bit counter
        (b"18446744073709551616\n", None, "18446744073709551616 is past a 64-bit counter's range"),
        (b" \t12\n", 12, None),
        (b"12\r\n", None, "not an unsigned integer (b'12\\r\\n')"),  # only space, tab and newline are stripped
        (b"X12\n", None, "not an unsigned integer (b'X12\\n')"),
        (b"#" * 30, None, f"not an unsigned integer ({b'#' * 24!r})"),  # its first 24 bytes shown
        (b"1" * ec.MAX_FILE_BYTES, None, "not an unsigned integer"),  # read whole: 64 digits, no counter
        (b"1" * (ec.MAX_FILE_BYTES + 1), None, f"longer than {ec.MAX_FILE_BYTES} bytes: not a counter"),
    ],
)
def test_a_counter_file_is_an_unsigned_64_bit_integer_or_an_error_saying_why(tmp_path, text, value, why):
    counter = tmp_path / "tx_bytes"
    counter.write_bytes(text)
    if why is None:
        assert ec.read_counter(str(counter)) == value
    else:
        with pytest.raises(ec.NotACounter) as e:
            ec.read_counter(str(counter))
        assert str(e.value).startswith(why) if why == "not an unsigned integer" else str(e.value) == why


def test_read_small_reads_up_to_its_limit_exactly(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"abcd")
    assert ec.read_small(str(f), 4) == b"abcd"
    with pytest.raises(ec.NotACounter, match="^longer than 3 bytes: not a counter$"):
        ec.read_small(str(f), 3)


@pytest.mark.parametrize(
    "names, limit, want",
    [
        (["a", "b", "c"], 3, (["a", "b", "c"], [])),  # at the limit: all read, nothing said
        (["a", "b", "c", "d"], 3, None),  # past it: `limit` names, and the problem
        (["a", "bad name", "x y"], 5, (["a"], ["2 entries with a name no kernel gives (e.g. 'bad name'): not read"])),
        (["a", "é" * 45], 5, (["a"], [f"1 entry with a name no kernel gives (e.g. {ascii('é' * 45)[:40]}): not read"])),
    ],
)
def test_list_names_reads_at_most_its_limit_and_names_what_it_left(tmp_path, names, limit, want):
    for n in names:
        (tmp_path / n).mkdir()
    got = ec.list_names(str(tmp_path), limit)
    if want is None:
        assert len(got[0]) == limit and set(got[0]) <= set(names)
        assert got[1] == [f"more than {limit} entries: only {limit} read"]
    else:
        assert got == want


def test_read_ports_fills_the_callers_problems_or_its_own(tmp_path):
    root = kernel_sysfs(tmp_path)
    (root / "class" / "infiniband" / "odd one").mkdir()
    problems: dict[str, str] = {}
    devices = ec.read_ports(str(root / "class" / "infiniband"), problems=problems)
    assert devices and problems == {
        str(root / "class" / "infiniband"): "1 entry with a name no kernel gives (e.g. 'odd one'): not read"
    }
    assert ec.read_ports(str(root / "class" / "infiniband")) == devices  # no dict given: its own


def test_read_ports_names_odd_entries_of_a_ports_and_a_counters_directory(tmp_path):
    hw, tx = _port_counters(tmp_path)
    tx.write_text("5\n")
    for odd in ("bad name", "x y"):
        (hw / odd).mkdir()
        (hw.parent.parent / odd).mkdir()
    got = ec.read_ports(str(tmp_path))["efa_0"]
    said = "2 entries with a name no kernel gives (e.g. 'bad name'): not read"
    assert got["errors"] == {str(hw.parent.parent): said, str(hw): said}
    assert got["ports"]["1"] == {"rx_bytes": 12, "tx_bytes": 5}


def test_read_ports_stops_reading_files_at_its_deadline_but_lists_every_port(monkeypatch, tmp_path):
    hw, tx = _port_counters(tmp_path)
    tx.write_text("5\n")
    monkeypatch.setattr(ec.time, "monotonic", lambda: 100.0)
    problems: dict[str, str] = {}
    assert ec.read_ports(str(tmp_path), deadline=100.0, problems=problems)["efa_0"]["ports"]["1"] == {
        "rx_bytes": 12,
        "tx_bytes": 5,
    }  # the deadline itself is not past it
    assert problems == {}
    got = ec.read_ports(str(tmp_path), deadline=99.9, problems=problems)
    assert got == {"efa_0": {"ports": {"1": {}}, "errors": {}}}
    assert problems == {ec.BUDGET: f"stopped at {hw / 'rx_bytes'}: the time budget was spent"}


def test_judge_counters_judges_the_nodes_after_one_without_a_readable_counter():
    deltas = {"n1": {"efa_0": {"errors": {"tx_bytes": "a"}}}, "n2": {"efa_0": {"tx_bytes": 900, "errors": {}}}}
    ok, reasons = ec.judge_counters(deltas, 1000, "efa")
    assert ok is None and len(reasons) == 2 and reasons[1].startswith("node n2: EFA moved")  # n1 cannot tell


def test_each_directory_says_every_problem_it_found_in_one_line(tmp_path):
    """Too many entries and odd names in one directory: both said, joined, for the class root, a ports directory and
    a counters directory (each read up to its own limit)."""
    for name, limit in (("ports", ec.MAX_PORTS), ("hw_counters", ec.MAX_FILES_PER_PORT)):
        hw, _ = _port_counters(tmp_path / name)
        crowded = hw if name == "hw_counters" else hw.parent.parent  # the other one as the kernel has it
        for i in range(limit + 1):
            (crowded / f"odd {i}").mkdir()
        said = ec.read_ports(str(tmp_path / name))["efa_0"]["errors"][str(crowded)]
        assert said.startswith(f"more than {limit} entries: only {limit} read; "), said
        assert " entries with a name no kernel gives (e.g. 'odd " in said
    root = tmp_path / "crowded"
    for i in range(ec.MAX_DEVICES + 1):
        (root / f"odd {i}").mkdir(parents=True)
    problems: dict[str, str] = {}
    assert ec.read_ports(str(root), problems=problems) == {}
    assert problems[str(root)].startswith(
        f"more than {ec.MAX_DEVICES} entries: only {ec.MAX_DEVICES} read; {ec.MAX_DEVICES} entries with a name no "
        "kernel gives (e.g. 'odd "
    )
