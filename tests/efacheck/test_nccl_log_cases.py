"""Every condition of the NCCL verdict reached and its outcome asserted: the branches the fixture-driven
tests in test_nccl_log.py did not reach, one small log each, in the line shapes of the published logs."""

from __future__ import annotations

from ray_efa_eks.efacheck.nccl_log import analyze_text


def _p(host: str, pid: int = 1) -> str:
    return f"{host}:{pid}:{pid} [0] NCCL INFO "


def _w(host: str, pid: int = 1) -> str:
    return f"{host}:{pid}:{pid} [0] NCCL WARN "


def _efa(host: str, pid: int = 1, nics: str = " (found 1 nics)") -> list[str]:
    return [
        _p(host, pid) + "NET/Plugin: Loaded net plugin Libfabric (v9)",
        _p(host, pid) + f"NET/OFI Selected provider is efa, fabric is efa-direct{nics}",
        _p(host, pid) + "Using network Libfabric",
    ]


def _chan(host: str, pid: int = 1, via: str = "NET/Libfabric/0/GDRDMA") -> str:
    return _p(host, pid) + f"Channel 00/0 : 0[0] -> 1[0] [send] via {via}"


def judge(lines: list[str], **kw):
    return analyze_text("\n".join(lines) + "\n", **kw)


def test_a_fact_word_outside_an_nccl_line_is_not_read():
    rep = judge(
        _efa("h1")
        + [
            _p("h1") + "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
            "mpirun: launching nRanks 16 nNodes 4 on NET plugin hosts",
        ]
    )
    assert rep.nodes == 1 and rep.verdict == "undetermined" and rep.causes == ["single_node"]


def test_a_line_with_two_nccl_markers_is_read_once():
    lines = _efa("h1", 1) + _efa("h2", 2) + [_chan("h1", 1), _chan("h2", 2)]
    twice = [ln + " (NCCL INFO echoed)" if ln.endswith("Using network Libfabric") else ln for ln in lines]
    plain, rep = judge(lines), judge(twice)
    assert rep.verdict == plain.verdict == "efa" and rep.ranks == plain.ranks == 2
    assert rep.network == "Libfabric (NCCL INFO echoed)"


def test_only_channel_and_ring_lines_name_ranks_when_no_init_line_does():
    rep = judge([_chan("h1"), _chan("h2"), _p("h3") + "Connected all trees via P2P/IPC"])
    assert rep.hosts == ["h1", "h2"] and rep.ranks == 2


def test_a_provider_line_without_a_provider_name_names_none():
    rep = judge([_p("h1") + "NET/OFI Selected provider is (null)", _p("h1") + "Using network Libfabric"])
    assert rep.provider is None


def test_an_ofi_warning_about_the_provider_is_no_efa_provider():
    rep = judge(_efa("h1") + [_chan("h1", via="NET/Socket/0"), _w("h1") + "NET/OFI Couldn't find any optimal provider"])
    assert rep.verdict == "fallback" and "no_efa_provider" in rep.causes
    assert any(r.startswith("aws-ofi-nccl warned") for r in rep.reasons)


def test_another_warning_adds_no_cause():
    lines = _efa("h1", 1) + _efa("h2", 2) + [_chan("h1", 1), _chan("h2", 2)]
    plain = judge(lines)
    rep = judge(lines + [_w("h1") + "Cuda failure 'out of memory'"])
    assert plain.verdict == rep.verdict == "efa" and rep.causes == plain.causes == []


def test_a_net_line_without_a_device_counts_as_libfabric_but_names_no_device():
    lines = (
        _efa("h1", 1, nics="")
        + _efa("h2", 2, nics="")
        + [_chan("h1", 1, via="NET/Libfabric"), _chan("h2", 2, via="NET/Libfabric")]
    )
    rep = judge(lines, expect_nics=2)
    assert rep.verdict == "efa" and "fewer_nics" not in rep.causes and rep.network == "Libfabric"


def test_fewer_devices_on_the_net_lines_than_nics_expected_is_fallback():
    lines = _efa("h1", 1, nics="") + _efa("h2", 2, nics="") + [_chan("h1", 1), _chan("h2", 2)]
    assert judge(lines, expect_nics=1).verdict == "efa"
    rep = judge(lines, expect_nics=2)
    assert rep.verdict == "fallback" and rep.causes == ["fewer_nics"]
    assert rep.reasons[0].startswith("NET connections use 1 EFA device(s) ([0]), expected 2")


def test_no_network_at_all_without_a_failed_plugin_gives_one_reason():
    rep = judge([_w("h1") + "Failed to initialize any NET plugin"])
    assert rep.verdict == "fallback" and rep.causes == ["net_init_failed"] and len(rep.reasons) == 1


def test_ncc_net_forced_to_socket_is_named_but_only_a_reason_when_something_is_bad():
    ok = (
        _efa("h1", 1)
        + _efa("h2", 2)
        + [_chan("h1", 1), _chan("h2", 2), _p("h1", 1) + "NCCL_NET set by environment to Socket."]
    )
    rep = judge(ok)
    assert rep.verdict == "efa" and "net_forced" in rep.causes
    assert not any("forces network" in r for r in rep.reasons)
    bad = judge(ok + [_chan("h2", 2, via="NET/Socket/0")])
    assert bad.verdict == "fallback" and any("NCCL_NET forces network Socket" in r for r in bad.reasons)


def test_a_failed_plugin_on_one_host_while_another_used_libfabric_is_fallback_citing_both():
    rep = judge(
        [
            _p("h1", 1) + "NET/Plugin: No plugin found (libnccl-net.so), using internal implementation",
            _w("h1", 1) + "Network Libfabric not found.",
            _p("h2", 2) + "Using network Libfabric",
        ]
    )
    assert rep.verdict == "fallback" and "plugin_not_found" in rep.causes and "net_forced_absent" in rep.causes
    assert any("Network Libfabric not found" in r for r in rep.reasons)
    assert any(r.startswith("network Libfabric: ") for r in rep.reasons)


def test_one_host_net_lines_without_a_node_count_are_undetermined_and_say_why():
    rep = judge(_efa("h1", 1) + _efa("h1", 2) + [_chan("h1", 1), _chan("h1", 2)])
    assert rep.verdict == "undetermined" and rep.causes == ["single_node"]
    assert rep.reasons[0].startswith("NET connection lines from one host (h1) and no node count")
    with_count = judge(_efa("h1", 1) + [_chan("h1", 1), _p("h1", 1) + "comm 0x1 rank 0 nRanks 8 nNodes 2 localRanks 4"])
    assert with_count.verdict == "efa"  # a rank's own view of a larger job carries NCCL's node count


def test_a_host_without_a_provider_line_is_undetermined_naming_it():
    rep = judge(_efa("h1", 1) + [_p("h2", 2) + "Using network Libfabric", _chan("h1", 1), _chan("h2", 2)])
    assert rep.verdict == "undetermined" and rep.causes == ["no_provider_line"]
    assert rep.reasons[0].startswith("no 'Selected provider' line from host(s) h2")


def test_any_other_ofi_warning_is_ofi_error():
    rep = judge(_efa("h1") + [_chan("h1", via="NET/Socket/0"), _w("h1") + "NET/OFI Unable to register memory"])
    assert rep.verdict == "fallback" and "ofi_error" in rep.causes and rep.exit_code == 1
    assert rep.hints[rep.causes.index("ofi_error")].startswith("aws-ofi-nccl reported an error")


# --- the command, in process (its exit codes and output are the gate's contract) ---

import contextlib  # noqa: E402
import io  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import runpy  # noqa: E402
import sys  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import pytest  # noqa: E402

from ray_efa_eks.efacheck import nccl_input, nccl_log  # noqa: E402

EFA_JOB = "\n".join(_efa("h1", 1) + _efa("h2", 2) + [_chan("h1", 1), _chan("h2", 2)]) + "\n"


def test_main_prints_the_verdict_its_evidence_and_hints(tmp_path, capsys):
    log = tmp_path / "job.log"
    log.write_text(EFA_JOB)
    assert nccl_log.main([str(log)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("verdict: efa  network: Libfabric  provider: efa  ranks: 2  hosts: 2  nodes: 2")
    assert "  evidence: " in out and "hint [" not in out
    assert nccl_log.main(["--json", str(log)]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "efa"
    log.write_text("\n".join(_efa("h1")) + "\n")
    assert nccl_log.main([str(log), str(tmp_path / "gone.log")]) == 2
    out = capsys.readouterr().out
    assert "nodes: 1" in out and "  not read: " in out and "no such file or directory" in out
    assert "  hint [" in out


def test_main_reads_stdin(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(EFA_JOB.encode())))
    assert nccl_log.main(["-"]) == 0
    assert capsys.readouterr().out.startswith("verdict: efa")


def test_main_unreadable_inputs_exit_3(tmp_path, capsys):
    (tmp_path / "README.md").write_text("not a log")
    assert nccl_log.main([str(tmp_path)]) == 3
    assert "no log files in" in capsys.readouterr().err
    assert nccl_log.main([str(tmp_path / "a.log"), str(tmp_path / "b.log")]) == 3
    assert capsys.readouterr().err.count("no such file or directory") == 2


def test_too_many_files_under_a_directory_is_unreadable(tmp_path, monkeypatch):
    monkeypatch.setattr(nccl_input, "MAX_FILES", 1)
    for n in ("a.log", "b.log"):
        (tmp_path / n).write_text(EFA_JOB)
    with pytest.raises(nccl_log.UnreadableInput, match="more than 1 files under it"):
        nccl_log.analyze_paths([str(tmp_path)])


def test_a_fifo_and_an_oversized_file_are_not_read(tmp_path, monkeypatch):
    good = tmp_path / "good.log"
    good.write_text(EFA_JOB)
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    rep = nccl_log.analyze_paths([str(good), str(fifo)])
    assert rep.verdict == "undetermined" and "not a regular file" in rep.silent[0]
    monkeypatch.setattr(nccl_input, "MAX_LOG_BYTES", 10)
    with pytest.raises(nccl_log.UnreadableInput, match="more than 0 GiB"):
        nccl_log.analyze_paths([str(good)])


def test_usage_errors_and_interrupts(tmp_path, monkeypatch, capsys):
    log = tmp_path / "job.log"
    log.write_text(EFA_JOB)
    with pytest.raises(SystemExit) as e:
        nccl_log.main(["--expect-nodes", "0", str(log)])
    assert e.value.code == nccl_log.EXIT["usage"]
    assert nccl_log.main(["--expect-nodes", "2", str(log)]) == 0

    def interrupted(a):
        raise KeyboardInterrupt

    monkeypatch.setattr(nccl_log, "_main", interrupted)
    capsys.readouterr()
    assert nccl_log.main([str(log)]) == 130
    assert capsys.readouterr().err == "nccl_log: interrupted\n"


def test_a_closed_pipe_keeps_the_exit_code(tmp_path, monkeypatch):
    log = tmp_path / "job.log"
    log.write_text(EFA_JOB)

    def closed(rep):
        raise BrokenPipeError

    monkeypatch.setattr(nccl_log, "format_report", closed)
    assert nccl_log.main([str(log)]) == 0


def test_run_as_a_module(tmp_path, monkeypatch, capsys):
    log = tmp_path / "job.log"
    log.write_text(EFA_JOB)
    monkeypatch.setattr(sys, "argv", ["nccl_log", str(log)])
    monkeypatch.delitem(sys.modules, "ray_efa_eks.efacheck.nccl_log")
    with pytest.raises(SystemExit) as e:
        runpy.run_module("ray_efa_eks.efacheck.nccl_log", run_name="__main__")
    assert e.value.code == 0 and "verdict: efa" in capsys.readouterr().out


def _verdict_cli(monkeypatch, capsys, tmp_path, data: bytes, via: str):
    """``nccl-verdict`` on ``data`` read from stdin (``-``, size unknown) or a regular file (its size known)."""
    if via == "stdin":
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
        arg = "-"
    else:
        (tmp_path / "job.log").write_bytes(data)
        arg = str(tmp_path / "job.log")
    code = nccl_log.main([arg])
    out, err = capsys.readouterr()
    return code, out, err


# head and chunk sizes small, so a log of a few hundred bytes crosses them; MAX None keeps 1 GiB
READS = [  # (via, HEAD_BYTES, CHUNK_BYTES, MAX_LOG_BYTES, extra bytes, exit code, output fragment)
    ("stdin", 16, 16, None, b"", 0, "verdict: efa"),  # head + many chunks, joined
    ("file", 16, 16, None, b"", 0, "verdict: efa"),  # read again from the start in one call past its head
    ("stdin", 16, 1 << 20, None, b"", 0, "verdict: efa"),  # head + one chunk: both kept
    ("file", 16, 16, "len", b"", 0, "verdict: efa"),  # exactly the limit: not refused
    ("stdin", 16, 16, 40, b"", 3, "more than 0 GiB: not one rank's log"),  # stdin refused as the limit is crossed
    ("stdin", 16, 16, "len", b"x", 3, "more than 0 GiB: not one rank's log"),  # one byte past the limit
]


@pytest.mark.parametrize("via, head, chunk, limit, extra, code, says", READS)
def test_input_is_read_in_chunks_and_stops_past_the_limit(
    monkeypatch, capsys, tmp_path, via, head, chunk, limit, extra, code, says
):
    monkeypatch.setattr(nccl_input, "HEAD_BYTES", head)
    monkeypatch.setattr(nccl_input, "CHUNK_BYTES", chunk)
    if limit is not None:
        monkeypatch.setattr(nccl_input, "MAX_LOG_BYTES", len(EFA_JOB) if limit == "len" else limit)
    got, out, err = _verdict_cli(monkeypatch, capsys, tmp_path, EFA_JOB.encode() + extra, via)
    assert got == code and says in (out if code == 0 else err)


def test_with_verdict_adds_the_reason_and_a_cause_once():
    rep = judge(EFA_JOB.splitlines())
    flat = nccl_log.with_verdict(rep, "fallback", "counters flat", "counters_flat")
    assert (flat.verdict, flat.reasons[-1], flat.causes) == ("fallback", "counters flat", ["counters_flat"])
    again = nccl_log.with_verdict(flat, "fallback", "again", "counters_flat")
    assert again.causes == ["counters_flat"] and rep.verdict == "efa"


def test_the_json_verdict_carries_every_field():
    """The gate and report.md read these keys (mutmut: 22 survivors in to_dict before this test)."""
    rep = judge(EFA_JOB.splitlines(), expect_nics=1)
    d = rep.to_dict()
    assert d == {
        "verdict": "efa",
        "network": "Libfabric",
        "provider": "efa",
        "ranks": 2,
        "hosts": ["h1", "h2"],
        "nodes": 2,
        "nics": {"h1": 1, "h2": 1},
        "reasons": rep.reasons,
        "evidence": rep.evidence,
        "causes": [],
        "hints": [],
        "silent": [],
        "witness": None,
    }
    assert len(d["reasons"]) == 3 and len(d["evidence"]) == 4  # network, both hosts' provider lines, a NET line
    assert sum("Selected provider is efa" in e for e in d["evidence"]) == 2
    bad = judge(["h1:1:1 [0] NCCL INFO Using network Socket", _chan("h1", via="NET/Socket/0")]).to_dict()
    assert bad["causes"] == ["socket_network"] and bad["hints"] == [nccl_log.HINTS["socket_network"]]


# --- the facts a rank's lines give, in any order (mutmut survivors in _fact) ---


def test_each_host_rule_cites_that_hosts_own_network_and_provider_lines():
    rep = judge(_efa("h1", 1) + _efa("h2", 2))  # no connection line, no node count: the distinct-hosts rule
    assert rep.verdict == "efa"
    assert rep.reasons[:2] == [
        f"host {h}: network Libfabric with provider efa: <text>:{n + 2}: {_p(h, pid)}Using network Libfabric; "
        f"<text>:{n + 1}: {_p(h, pid)}NET/OFI Selected provider is efa, fabric is efa-direct (found 1 nics)"
        for h, pid, n in (("h1", 1, 1), ("h2", 2, 4))
    ]


@pytest.mark.parametrize(
    "loaded",
    ["Using network Libfabric", "Initialized NET plugin Libfabric", "NET/Plugin: Loaded net plugin Libfabric (v9)"],
)
def test_a_plugin_candidate_that_failed_before_or_after_the_plugin_loaded_is_no_failure(loaded):
    """NCCL tries several plugin names; one not found is over once the plugin is loaded, in either line order."""

    def job(first_loaded: bool) -> list[str]:
        out = []
        for h, pid in (("h1", 1), ("h2", 2)):
            pair = [_p(h, pid) + loaded, _p(h, pid) + "NET/Plugin: Could not find: libnccl-net-ofi.so"]
            out += (pair if first_loaded else pair[::-1]) + [
                _p(h, pid) + "NET/OFI Selected provider is efa, fabric is efa-direct",
                _chan(h, pid),
            ]
        return out

    for first_loaded in (True, False):
        rep = judge(job(first_loaded))
        assert (rep.verdict, rep.causes) == ("efa", []), (first_loaded, rep.reasons)
    alone = judge([ln for ln in job(True) if loaded not in ln])  # the candidate failed and nothing loaded
    assert alone.verdict == "fallback" and alone.causes == ["plugin_not_found"]


def test_a_network_named_ofi_in_any_case_is_the_plugins():
    lines = [ln.replace("Libfabric", "OFI") for ln in EFA_JOB.splitlines()]
    rep = judge(lines)
    assert (rep.verdict, rep.network, rep.causes) == ("efa", "OFI", [])
    assert judge([ln.replace("Libfabric", "ofi") for ln in EFA_JOB.splitlines()]).verdict == "efa"


# --- reading inputs (mutmut survivors in iter_files, read_input, _read_bounded, analyze_paths) ---


def test_hidden_files_and_directories_under_a_log_directory_are_not_read(tmp_path):
    (tmp_path / "rank0.log").write_text(EFA_JOB)
    (tmp_path / ".socket.log").write_text("h3:3:3 [0] NCCL INFO Using network Socket\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "rank9.log").write_text("h4:4:4 [0] NCCL INFO Using network Socket\n")
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "rank1.log").write_text("\n".join(_efa("h1", 5)) + "\n")
    rep = nccl_log.analyze_paths([str(tmp_path)])
    assert (rep.verdict, rep.ranks, rep.hosts, rep.silent) == ("efa", 3, ["h1", "h2"], [])


def test_a_directory_of_exactly_max_files_is_read_and_one_more_is_refused_saying_why(tmp_path, monkeypatch):
    monkeypatch.setattr(nccl_input, "MAX_FILES", 2)
    for n in ("a.log", "b.log"):
        (tmp_path / n).write_text(EFA_JOB)
    assert nccl_log.analyze_paths([str(tmp_path)]).verdict == "efa"
    (tmp_path / "c.log").write_text(EFA_JOB)
    with pytest.raises(nccl_log.UnreadableInput) as e:
        nccl_log.analyze_paths([str(tmp_path)])
    assert str(e.value) == (
        f"{tmp_path}: more than 2 files under it; name the directory that holds the job's logs (one file per rank)"
    )


def test_no_log_files_and_all_missing_files_name_every_path(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "README.md").write_text("not a log")
    with pytest.raises(nccl_log.UnreadableInput) as e:
        nccl_log.analyze_paths([str(a), str(b)])
    assert str(e.value) == (
        f"no log files in {a}, {b} (a directory's .md, .json, .png, .yaml, .yml, .html, .py files are not logs)"
    )
    with pytest.raises(nccl_log.UnreadableInput) as e:
        nccl_log.analyze_paths([str(a / "x.log"), str(b / "y.log")])
    assert str(e.value) == f"{a / 'x.log'}: no such file or directory; {b / 'y.log'}: no such file or directory"


def test_a_fifo_is_named_with_the_fix(tmp_path):
    good, fifo = tmp_path / "good.log", tmp_path / "pipe.log"
    good.write_text(EFA_JOB)
    os.mkfifo(fifo)
    rep = nccl_log.analyze_paths([str(good), str(fifo)])
    assert rep.silent == [f"{fifo}: not a regular file (a pipe, socket or device); pass a log file, or - for stdin"]


def test_a_log_of_exactly_the_limit_is_read_and_a_larger_one_is_refused_before_reading(tmp_path, monkeypatch):
    log = tmp_path / "job.log"
    log.write_text(EFA_JOB)
    monkeypatch.setattr(nccl_input, "MAX_LOG_BYTES", len(EFA_JOB))
    assert nccl_log.analyze_paths([str(log)]).verdict == "efa"
    monkeypatch.undo()
    huge = tmp_path / "huge.log"
    with open(huge, "wb") as f:  # sparse: its size says more than 1 GiB, nothing is read
        f.truncate((1 << 30) + 1)
    rep = nccl_log.analyze_paths([str(log), str(huge)])
    assert rep.silent == [f"{huge}: {(1 << 30) + 1} bytes, more than 1 GiB: not one rank's log"]


class _Endless:
    """A stream that never ends (``yes | nccl-verdict -``, a log still growing): reading it whole never returns."""

    LINE = b"h1:1:1 [0] NCCL INFO Using network Libfabric\n"

    def __init__(self):
        self.blocks: dict[int, bytes] = {}  # one object per size: the parts read hold references, not copies

    def read(self, n=-1):
        if n is None or n < 0:
            raise MemoryError("an endless stream read whole")
        if n not in self.blocks:
            self.blocks[n] = (self.LINE * (n // len(self.LINE) + 1))[:n]
        return self.blocks[n]

    def seek(self, pos):
        pass


@pytest.mark.parametrize("via", ["stdin", "file"])
def test_an_endless_input_is_read_in_chunks_and_refused_past_one_gib(monkeypatch, capsys, tmp_path, via):
    """Chunks of 1 MiB (one object, so the test holds 1 MiB): refused once 1 GiB is crossed, never read whole:
    ``yes | nccl-verdict -``, or a regular file that grew past the size stat gave."""
    if via == "stdin":
        monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=_Endless()))
        arg = "-"
    else:
        log = tmp_path / "growing.log"
        log.write_bytes(_Endless.LINE * 2000)  # stat sees ~100 kB; the open file never ends
        monkeypatch.setattr(nccl_input, "open", lambda *a, **kw: contextlib.nullcontext(_Endless()), raising=False)
        arg = str(log)
    assert nccl_log.main([arg]) == 3
    assert capsys.readouterr().err.endswith("more than 1 GiB: not one rank's log\n")


def test_empty_stdin_is_an_empty_input_not_a_seek_error(monkeypatch, capsys):
    r, w = os.pipe()
    os.close(w)
    with open(r, "rb") as pipe:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(pipe))
        assert nccl_log.main(["-"]) == 3
    assert capsys.readouterr().err == "nccl_log: unreadable input: -: empty input\n"


def test_dash_reads_stdin_even_beside_a_directory_named_dash(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-").mkdir()
    (tmp_path / "-" / "socket.log").write_text(
        "h1:1:1 [0] NCCL INFO Using network Socket\n" + _chan("h1", via="NET/Socket/0")
    )
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(EFA_JOB.encode())))
    assert nccl_log.main(["-"]) == 0
    assert capsys.readouterr().out.startswith("verdict: efa")


# --- the command line (mutmut survivors in main, _main, _positive, format_report) ---


def test_help_names_the_command_every_option_and_the_exit_codes(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")
    from ray_efa_eks.efacheck import exit_codes

    for prog in (None, "ray-efa-eks nccl-verdict"):
        with pytest.raises(SystemExit) as e:
            nccl_log.main(["--help"], prog)
        assert e.value.code == 0
        name = prog or "python -m ray_efa_eks.efacheck.nccl_log"
        assert capsys.readouterr().out == (
            f"usage: {name} [-h] [--json] [--expect-nodes N] [--expect-nics K] [--expect-gdrdma] "
            "FILE_OR_DIR [FILE_OR_DIR ...]\n\n"
            "Decide from NCCL_DEBUG=INFO output whether inter-node traffic really went over EFA.\n\n"
            "positional arguments:\n  FILE_OR_DIR\n\n"
            "options:\n"
            "  -h, --help        show this help message and exit\n"
            "  --json            print one JSON object\n"
            "  --expect-nodes N  nodes that must take part (fewer: exit 1)\n"
            "  --expect-nics K   EFA interfaces each node must use, e.g. 32 on p5.48xlarge (fewer: exit 1)\n"
            "  --expect-gdrdma   every NET connection must be /GDRDMA (instance types with GPUDirect RDMA)\n\n"
            "A FILE of - reads stdin.\n\n"
            f"{exit_codes.epilog('nccl-verdict', 198)}\n"
        )
    monkeypatch.setenv("COLUMNS", "60")  # the description is printed as written, not wrapped to the terminal
    with pytest.raises(SystemExit):
        nccl_log.main(["--help"])
    assert (
        "\n\nDecide from NCCL_DEBUG=INFO output whether inter-node traffic really went over EFA.\n\n"
        in capsys.readouterr().out
    )


def test_each_expect_option_reaches_the_verdict(tmp_path, capsys):
    log = tmp_path / "job.log"
    log.write_text(EFA_JOB)  # 2 nodes, 1 NIC each, every NET line /GDRDMA
    plain = tmp_path / "plain.log"
    plain.write_text(EFA_JOB.replace("/GDRDMA", ""))
    cases = [
        (["--expect-nodes", "1"], log, 0),
        (["--expect-nodes", "2"], log, 0),
        (["--expect-nodes", "3"], log, 1, "2 node(s) took part, expected 3"),
        (["--expect-nics", "1"], log, 0),
        (["--expect-nics", "2"], log, 1, "host h1: aws-ofi-nccl found 1 EFA interface(s), expected 2"),
        (["--expect-gdrdma"], log, 0),
        ([], plain, 0),
        (["--expect-gdrdma"], plain, 1, "2 of 2 NET connection line(s) without /GDRDMA"),
    ]
    for args, path, code, *said in cases:
        assert nccl_log.main([*args, str(path)]) == code, args
        out = capsys.readouterr().out
        assert all(f"  reason: {s}" in out for s in said), (args, out)


def test_a_count_below_one_is_a_usage_error_naming_it(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        nccl_log.main(["--expect-nics", "0", str(tmp_path)])
    assert e.value.code == 64
    assert capsys.readouterr().err.endswith("error: argument --expect-nics: invalid positive integer value: '0'\n")


def test_json_is_the_report_indented_for_reading(tmp_path, capsys):
    log = tmp_path / "job.log"
    log.write_text(EFA_JOB)
    assert nccl_log.main(["--json", str(log)]) == 0
    rep = nccl_log.analyze_paths([str(log)])
    assert capsys.readouterr().out == json.dumps(rep.to_dict(), indent=2) + "\n"


def test_the_report_says_an_unknown_node_count_with_a_question_mark():
    rep = analyze_text("NCCL INFO Using network Libfabric\n")
    assert rep.nodes is None
    assert nccl_log.format_report(rep).split("\n") == [
        "verdict: undetermined  network: Libfabric  provider: None  ranks: 1  hosts: 0  nodes: ?",
        f"  reason: {rep.reasons[0]}",
        "  evidence: <text>:1: NCCL INFO Using network Libfabric",
        f"  hint [no_connections]: {nccl_log.HINTS['no_connections']}",
    ]


# --- every rule's reasons, word for word (mutmut survivors in report: a reason is what the user reads) ---


def _at(n: int, line: str) -> str:
    return f"<text>:{n}: {line}"


_NOPLUGIN = _p("h1") + "NET/Plugin: No plugin found (libnccl-net.so)"
_SOCK = _p("h1") + "Using network Socket"
_SOCK_CHAN = _chan("h1", via="NET/Socket/0")
_PROV = {
    h: _p(h, pid) + "NET/OFI Selected provider is efa, fabric is efa-direct (found 1 nics)"
    for h, pid in (("h1", 1), ("h2", 2))
}
_ONE_NODE = _p("h1") + "comm 0x1 rank 0 nRanks 8 nNodes 1 localRanks 8"
_TWO_NODES = _p("h1") + "comm 0x1 rank 0 nRanks 8 nNodes 2 localRanks 4"
_EFA_LINES = EFA_JOB.splitlines()  # h1: lines 1-3, h2: 4-6, their NET lines 7-8

RULES = {
    "the run failed, and why": (
        [_NOPLUGIN, _w("h1") + "Failed to initialize any NET plugin"],
        {},
        "fallback",
        ["net_init_failed", "plugin_not_found"],
        [
            "NCCL could not initialize any network plugin, the run failed: "
            + _at(2, _w("h1") + "Failed to initialize any NET plugin"),
            "net plugin failed to load: " + _at(1, _NOPLUGIN),
        ],
    ),
    "IB verbs across nodes": (
        _efa("h1", 1) + _efa("h2", 2) + [_chan("h1", 1, via="NET/IB/0"), _chan("h2", 2)],
        {},
        "fallback",
        ["non_efa_network"],
        ["inter-node connections via NET/IB (1 lines), first at " + _at(7, _chan("h1", 1, via="NET/IB/0"))],
    ),
    "Socket selected on two hosts": (
        [_SOCK, _p("h2", 2) + "Using network Socket"],
        {},
        "fallback",
        ["socket_network"],
        ["NCCL selected network Socket with 2 nodes: " + _at(1, _SOCK)],
    ),
    "Socket selected on one host with another's NET line": (
        [_NOPLUGIN, _SOCK, _SOCK_CHAN, _chan("h2", 2, via="NET/Socket/0")],
        {},
        "fallback",
        ["socket_network", "plugin_not_found"],
        [
            "inter-node connections via NET/Socket (2 lines), first at " + _at(3, _SOCK_CHAN),
            "NCCL selected network Socket with 1 nodes: " + _at(2, _SOCK),
            "net plugin failed to load: " + _at(1, _NOPLUGIN),
        ],
    ),
    "provider tcp on two nodes": (
        [ln.replace("provider is efa", "provider is tcp") for ln in _EFA_LINES] + [_TWO_NODES],
        {},
        "fallback",
        ["non_efa_provider"],
        [
            "aws-ofi-nccl selected provider tcp, not efa: " + _at(2, _PROV["h1"].replace("efa,", "tcp,")),
            "NCCL counted 2 nodes: " + _at(9, _TWO_NODES),
        ],
    ),
    "no eligible provider, Socket on the wire": (
        [_p("h1") + "NET/OFI No eligible providers were found", _SOCK_CHAN],
        {},
        "fallback",
        ["no_efa_provider", "socket_network", "ofi_init_failed"],
        [
            "inter-node connections via NET/Socket (1 lines), first at " + _at(2, _SOCK_CHAN),
            "aws-ofi-nccl loaded but failed to initialize: "
            + _at(1, _p("h1") + "NET/OFI No eligible providers were found"),
        ],
    ),
    "fewer hosts than nodes expected": (
        _EFA_LINES,
        {"expect_nodes": 3},
        "fallback",
        ["fewer_nodes"],
        ["2 node(s) took part, expected 3: hosts h1, h2"],
    ),
    "fewer NICs than expected, each host citing its own line": (
        _EFA_LINES,
        {"expect_nics": 2},
        "fallback",
        ["fewer_nics"],
        [
            f"host {h}: aws-ofi-nccl found 1 EFA interface(s), expected 2: " + _at(n, _PROV[h])
            for h, n in (("h1", 2), ("h2", 5))
        ],
    ),
    "efa by connection lines": (
        _EFA_LINES,
        {},
        "efa",
        [],
        [
            "network Libfabric on 2 rank(s): " + _at(3, _p("h1") + "Using network Libfabric"),
            "provider efa: " + _at(2, _PROV["h1"]) + "; " + _at(5, _PROV["h2"]),
            "2 inter-node connection line(s) via NET/Libfabric, first at " + _at(7, _chan("h1", 1)),
        ],
    ),
    "efa by NCCL's node count": (
        _efa("h1") + [_TWO_NODES],
        {},
        "efa",
        [],
        [
            "network Libfabric on 1 rank(s): " + _at(3, _p("h1") + "Using network Libfabric"),
            "provider efa: " + _at(2, _PROV["h1"]),
            "NCCL counted 2 nodes: " + _at(4, _TWO_NODES),
        ],
    ),
    "NCCL counted one node": (
        _efa("h1") + [_ONE_NODE],
        {},
        "undetermined",
        ["single_node"],
        ["NCCL counted one node, nothing crossed nodes: " + _at(4, _ONE_NODE)],
        (2, _PROV["h1"]),
    ),
    "bound to loopback": (
        [_p("h1") + "Bootstrap : Using lo:127.0.0.1<0>", _p("h1") + "Using network Libfabric"],
        {},
        "undetermined",
        ["socket_ifname", "single_node"],
        [
            "NCCL is bound to loopback, so only one node took part: "
            + _at(1, _p("h1") + "Bootstrap : Using lo:127.0.0.1<0>")
        ],
    ),
    "P2P and SHM only": (
        _efa("h1")
        + [
            _p("h1") + "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
            _p("h1", 2) + "Channel 00/0 : 1[1] -> 0[0] via SHM/direct/direct",
        ],
        {},
        "undetermined",
        ["single_node"],
        [
            "one host (h1), only intra-node connections (2 P2P/SHM lines), nothing crossed nodes: "
            + _at(4, _p("h1") + "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read")
        ],
        (2, _PROV["h1"]),
    ),
    "Libfabric without any provider line": (
        [_p("h1") + "Using network Libfabric", _p("h2", 2) + "Using network Libfabric", _chan("h1", 1), _chan("h2", 2)],
        {},
        "undetermined",
        ["no_provider_line"],
        [
            "Libfabric network but no 'Selected provider' line to show efa (aws-ofi-nccl, the early 'AWS Libfabric' "
            "plugin too, also runs on the tcp and sockets providers): "
            + _at(1, _p("h1") + "Using network Libfabric")
            + "; "
            + _at(3, _chan("h1", 1))
        ],
    ),
    "one host, a network and nothing else": (
        [_p("h1") + "Using network Libfabric"],
        {},
        "undetermined",
        ["no_connections"],
        [
            "no inter-node connection line and no node count > 1 (Libfabric selected, 1 host name(s) seen): nothing "
            "shows traffic crossed nodes: " + _at(1, _p("h1") + "Using network Libfabric")
        ],
    ),
    "one host, not even a network": (
        [_p("h1") + "NET/Plugin: Loaded net plugin Libfabric (v9)"],
        {},
        "undetermined",
        ["no_net_info"],
        [
            "no inter-node connection line and no node count > 1 (no network selected, 1 host name(s) seen): nothing "
            "shows traffic crossed nodes"
        ],
    ),
    "an unattributed line and no network": (
        ["NCCL INFO NET/Plugin: Loaded net plugin Libfabric (v9)"],
        {},
        "undetermined",
        ["no_net_info"],
        [
            "an unattributed excerpt: no host name, node count or connection line (no network selected by 1 rank(s)), "
            "and the same lines from one node read the same in any order, so nothing shows traffic crossed nodes"
        ],
    ),
    "a failed plugin on one node": (
        [_NOPLUGIN, _ONE_NODE],
        {},
        "undetermined",
        ["single_node", "plugin_not_found"],
        [
            "NCCL counted one node, nothing crossed nodes: " + _at(2, _ONE_NODE),
            "net plugin failed to load: " + _at(1, _NOPLUGIN),
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(RULES))
def test_each_rule_gives_its_verdict_causes_and_reasons_word_for_word(name):
    lines, kw, verdict, causes, reasons, *extra = RULES[name]
    rep = judge(lines, **kw)
    assert (rep.verdict, rep.causes, rep.reasons) == (verdict, causes, reasons)
    # every evidence line is one a reason cites, but for an efa provider line beside an undetermined verdict
    assert [e for e in rep.evidence if e not in " ".join(reasons)] == [_at(*x) for x in extra]
    assert len(set(rep.evidence)) == len(rep.evidence)


def test_a_rank_without_a_log_is_named_in_the_reason():
    rep = nccl_log.analyze_bytes([("a.log", EFA_JOB.encode()), ("b.log", None)])
    assert (rep.verdict, rep.causes) == ("undetermined", ["rank_silent"])
    assert rep.reasons == ["1 rank log(s) gave no NCCL line, so not every rank spoke: b.log: missing"]


# --- NET/Plugin lines in any order, and which of them are failures (mutmut survivors in _fact) ---

_PLUGIN_LINES = {
    "candidate": "NET/Plugin: Could not find: libnccl-net-ofi.so",
    "loaded": "NET/Plugin: Loaded net plugin Libfabric (v9)",
    "init_failed": "NET/OFI No eligible providers were found",
}


@pytest.mark.parametrize("order", list(itertools.permutations(_PLUGIN_LINES)))
def test_a_plugin_that_loaded_then_failed_to_initialize_reads_the_same_in_any_line_order(order):
    lines = [_p(h, pid) + _PLUGIN_LINES[k] for h, pid in (("h1", 1), ("h2", 2)) for k in order]
    rep = judge(lines + [_chan("h1", 1, via="NET/Socket/0"), _chan("h2", 2, via="NET/Socket/0")])
    assert rep.verdict == "fallback"
    assert rep.causes == ["no_efa_provider", "socket_network", "ofi_init_failed"]
    assert rep.reasons[1].startswith("aws-ofi-nccl loaded but failed to initialize: ")


@pytest.mark.parametrize(
    "line",
    [
        "NET/Plugin: No plugin found (libnccl-net.so)",  # NCCL 2.21
        "NET/Plugin: Using internal network plugin.",  # NCCL 2.21, the line after it
        "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",  # NCCL 2.23
        "NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: undefined symbol: ncclNetPlugin_v9",
        "NET/Plugin: Failed to find ncclNetPlugin symbol (>= v5). ncclNetPlugin symbols v4 and lower are not supported.",
    ],
)
def test_each_nccl_plugin_failure_message_alone_is_a_failed_plugin(line):
    rep = judge([_p("h1") + line, _TWO_NODES, _SOCK_CHAN])
    assert rep.verdict == "fallback" and rep.causes == ["socket_network", "plugin_not_found"]
    assert rep.reasons[1] == "net plugin failed to load: " + _at(1, _p("h1") + line)


@pytest.mark.parametrize(
    "line",
    ["NET/Plugin: Plugin name set by env to libnccl-net.so", "NET/Plugin: Failed to find ncclCollNetPlugin_v9 symbol."],
)
def test_plugin_lines_that_are_no_failure_leave_an_efa_job_efa(line):
    """The plugin's name from the environment, and a missing CollNet symbol (CollNet is optional), say nothing of
    the net plugin: a rank whose only plugin line is one of them is not a failed plugin."""
    lines = [_p(h, pid) + x for h, pid in (("h1", 1), ("h2", 2)) for x in (line, _PROV[h].split("INFO ")[1])]
    rep = judge(lines + [_chan("h1", 1), _chan("h2", 2)])
    assert (rep.verdict, rep.causes) == ("efa", [])


@pytest.mark.parametrize(
    "line",
    ["Bootstrap : Using lo:127.0.0.1<0>", "NET/Socket : Using [0]lo:::1<0>", "Bootstrap : Using eth0:127.0.1.1<0>"],
)
def test_a_loopback_interface_or_address_is_one_node(line):
    rep = judge([_p("h1") + line, _p("h1") + "Using network Libfabric"])
    assert (rep.verdict, rep.causes) == ("undetermined", ["socket_ifname", "single_node"])
    assert rep.reasons == ["NCCL is bound to loopback, so only one node took part: " + _at(1, _p("h1") + line)]


def test_nccl_net_forced_is_named_without_its_full_stop():
    rep = judge(_EFA_LINES + [_SOCK_CHAN, _p("h1") + "NCCL_NET set by environment to Socket."])
    assert (
        "NCCL_NET forces network Socket: " + _at(10, _p("h1") + "NCCL_NET set by environment to Socket.") in rep.reasons
    )


# --- cited line numbers and text (mutmut survivors in _line_at) ---


def test_cited_lines_are_numbered_in_their_own_file_whatever_comes_first():
    a = "\n".join(_efa("h1", 1)) + "\n"
    b = "\n".join(
        ["", _p("h2", 2) + "cudaDriverVersion 12040 " + "x" * 300, _chan("h2", 2)]
        + _efa("h2", 2)
        + [_chan("h2", 2).replace("00/0", "01/0")]
    )  # a blank first line, no final \n
    rep = nccl_log.analyze_bytes([("a.log", a.encode()), ("b.log", b.encode())])
    assert rep.verdict == "efa"
    assert rep.evidence == [
        f"a.log:3: {_p('h1')}Using network Libfabric",
        f"a.log:2: {_PROV['h1']}",
        f"b.log:5: {_PROV['h2']}",
        f"b.log:3: {_chan('h2', 2)}",
    ]
    last = nccl_log.analyze_bytes([("c.log", "\n".join(_efa("h1")).encode())])  # the cited line ends the file
    assert last.evidence[0] == f"c.log:3: {_p('h1')}Using network Libfabric"
    second = nccl_log.analyze_bytes([("d.log", f"\n{_p('h1')}Using network Libfabric\n".encode())])
    assert second.evidence == [f"d.log:2: {_p('h1')}Using network Libfabric"]  # after a blank first line


def test_a_cited_line_that_is_not_utf8_is_quoted_with_replacement_characters():
    rep = nccl_log.analyze_bytes([("a.log", b"h1:1:1 [0] NCCL INFO Using network Libfabric \xff\xfe\n")])
    assert rep.evidence == ["a.log:1: h1:1:1 [0] NCCL INFO Using network Libfabric \ufffd\ufffd"]


# --- ranks, counts and names across files (mutmut survivors in feed and report) ---


def test_unprefixed_lines_make_one_rank_per_using_network_line_per_file():
    one = "NCCL INFO Using network Libfabric\nNCCL INFO NET/OFI Selected provider is efa\n"
    rep = nccl_log.analyze_bytes([("a.log", (one + one).encode()), ("b.log", one.encode())])
    assert rep.ranks == 3 and "(Libfabric selected by 3 rank(s))" in rep.reasons[0]


def test_connection_lines_are_counted_over_files_and_devices():
    lines = _efa("h1", 1) + _efa("h2", 2)
    a = "\n".join(lines + [_chan("h1", 1, via="NET/Libfabric/0/GDRDMA"), _chan("h1", 1, via="NET/Libfabric/1/GDRDMA")])
    b = "\n".join([_chan("h2", 2, via="NET/Libfabric/0/GDRDMA"), _chan("h2", 2, via="NET/Libfabric/2")])
    rep = nccl_log.analyze_bytes([("a.log", a.encode()), ("b.log", b.encode())], expect_gdrdma=True)
    assert rep.reasons == [
        "1 of 4 NET connection line(s) without /GDRDMA where the instance supports GPUDirect "
        f"RDMA: a.log:7: {_chan('h1', 1, via='NET/Libfabric/0/GDRDMA')}"
    ]
    ok = nccl_log.analyze_bytes([("a.log", a.encode()), ("b.log", b.encode())])
    assert ok.reasons[-1].startswith("4 inter-node connection line(s) via NET/Libfabric, first at a.log:7: ")


def test_a_net_line_with_a_ray_suffix_and_no_device_names_the_network_alone():
    lines = _efa("h1", 1) + _efa("h2", 2) + [_chan("h1", 1, via="NET/AWS Libfabric [repeated 3x across cluster]")]
    rep = judge(lines)
    assert rep.verdict == "efa" and rep.reasons[-1].startswith(
        "1 inter-node connection line(s) via NET/AWS Libfabric, first at <text>:7: "
    )


def test_network_and_provider_name_every_one_seen():
    mixed = judge(
        [
            _p("h1", 1) + "Using network Libfabric",
            _p("h2", 2) + "Using network Socket",
            _PROV["h1"],
            _p("h2", 2) + "NET/OFI Selected provider is tcp",
        ]
    )
    assert (mixed.network, mixed.provider, mixed.verdict) == ("Libfabric, Socket", "efa, tcp", "fallback")
    chans = judge([_chan("h1", 1, via="NET/IB/0"), _chan("h2", 2)])  # no network line: the connections name it
    assert chans.network == "IB, Libfabric"
    assert judge([_chan("h1", 1), _chan("h2", 2)]).network == "Libfabric"


def test_a_hosts_nics_are_the_most_any_of_its_ranks_found():
    rep = judge(_efa("h1", 1, nics=" (found 2 nics)") + _efa("h1", 2) + _efa("h2", 3, nics=" (found 0 nics)"))
    assert rep.nics == {"h1": 2, "h2": 0}


def test_one_loopback_host_beside_a_real_one_is_not_one_node():
    rep = judge(
        [
            _p("h1", 1) + "Bootstrap : Using lo:127.0.0.1<0>",
            _p("h2", 2) + "Bootstrap : Using eth0:10.0.0.2<0>",
            _p("h1", 1) + "Using network Socket",
            _p("h2", 2) + "Using network Socket",
        ]
    )
    assert rep.verdict == "fallback" and "single_node" not in rep.causes


def test_socket_across_two_hosts_with_intra_node_lines_or_one_host_counting_two_nodes_is_fallback():
    two = judge([_SOCK, _p("h2", 2) + "Using network Socket", _p("h1") + "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"])
    assert (two.verdict, two.reasons) == ("fallback", ["NCCL selected network Socket with 2 nodes: " + _at(1, _SOCK)])
    counted = judge([_SOCK, _TWO_NODES])
    assert counted.verdict == "fallback" and counted.reasons[0] == "NCCL selected network Socket with 2 nodes: " + _at(
        1, _SOCK
    )


def test_lines_that_are_not_utf8_are_read_with_replacement_characters():
    lines = [ln.encode() for ln in _efa("h1", 1) + _efa("h2", 2)] + [
        _p("h1", 1).encode() + b"NET/OFI Selected provider is efa \xff",
        _chan("h1", 1).encode() + b" \xfe",
    ]
    rep = nccl_log.analyze_bytes([("a.log", b"\n".join(lines) + b"\n")])
    assert rep.verdict == "efa" and "Libfabric/0/GDRDMA \ufffd" in " ".join(rep.evidence)


def test_more_reasons_word_for_word():
    """The rest of report()'s reasons (mutmut survivors): a network on an unknown number of nodes, IB selected, an
    aws-ofi-nccl warning (said only when it is no initialization failure), NCCL's count of one node beside a Socket
    line, a failed plugin NCCL carried on without, a failed plugin beside too few nodes."""
    unnamed = judge(["NCCL INFO Using network Socket", "NCCL INFO " + _SOCK_CHAN.split("INFO ")[1]])
    assert (
        unnamed.reasons[1]
        == "NCCL selected network Socket with several nodes: <text>:1: NCCL INFO Using network Socket"
    )
    ib = judge([_p("h1", 1) + "Using network IB", _p("h2", 2) + "Using network IB"])
    assert (ib.causes, ib.reasons) == (
        ["non_efa_network"],
        ["NCCL selected network IB with 2 nodes: " + _at(1, _p("h1", 1) + "Using network IB")],
    )
    warned = judge([_SOCK_CHAN, _w("h1") + "NET/OFI Unable to register memory"])
    assert warned.reasons[-1] == "aws-ofi-nccl warned: " + _at(2, _w("h1") + "NET/OFI Unable to register memory")
    init = judge([_SOCK_CHAN, _w("h1") + "NET/OFI Failed to initialize sendrecv protocol", _ONE_NODE])
    assert init.reasons == [
        "inter-node connections via NET/Socket (1 lines), first at " + _at(1, _SOCK_CHAN),
        "aws-ofi-nccl loaded but failed to initialize: "
        + _at(2, _w("h1") + "NET/OFI Failed to initialize sendrecv protocol"),
    ]
    carried = judge([_NOPLUGIN, _w("h1") + "Network Libfabric not found.", _p("h2", 2) + "Using network Libfabric"])
    assert carried.reasons == [
        "net plugin failed to load: " + _at(1, _NOPLUGIN) + " and NCCL carried on with its internal networks",
        _at(2, _w("h1") + "Network Libfabric not found."),
        "network Libfabric: " + _at(3, _p("h2", 2) + "Using network Libfabric"),
    ]
    short = judge([_NOPLUGIN, _ONE_NODE], expect_nodes=2)
    assert short.reasons == [
        "1 node(s) took part, expected 2: " + _at(2, _ONE_NODE),
        "net plugin failed to load: " + _at(1, _NOPLUGIN),
    ]


def test_each_host_must_show_one_rank_with_both_libfabric_and_provider_efa():
    split = judge(_efa("h1", 1) + [_p("h2", 2) + "Using network Libfabric", _PROV["h2"].replace(":2:2", ":3:3")])
    only_provider = judge(_efa("h1", 1) + [_PROV["h2"]])
    assert split.verdict == only_provider.verdict == "undetermined"
    named = judge([ln.replace("network Libfabric", "network AWS Libfabric") for ln in _efa("h1", 1)] + _efa("h2", 2))
    assert named.verdict == "efa" and named.reasons[1].startswith("host h2: network Libfabric with provider efa: ")


def test_the_last_reasons_and_evidence_word_for_word():
    """report()'s survivors of the full run at 03:56: each reason with two names, no host, or no line."""
    hosts = judge(_efa("h1", 1) + _efa("h2", 2))
    assert hosts.reasons[2] == (
        "2 distinct hosts each selected Libfabric with provider efa and nothing contradicts "
        "it: the inter-node transport was Libfabric over EFA"
    )
    unnamed = judge(
        [
            "NCCL INFO NET/OFI Selected provider is efa",
            "NCCL INFO Using network Libfabric",
            "NCCL INFO comm 0x1 rank 0 nRanks 8 nNodes 2 localRanks 4",
        ]
    )
    assert unnamed.verdict == "efa"
    assert unnamed.reasons[1] == "provider efa: <text>:1: NCCL INFO NET/OFI Selected provider is efa"
    two_silent = nccl_log.analyze_bytes([("a.log", EFA_JOB.encode()), ("b.log", None), ("c.log", None)])
    assert (
        two_silent.reasons
        == ["2 rank log(s) gave no NCCL line, so not every rank spoke: b.log: missing; c.log: missing"]
        and two_silent.evidence == []
    )
    intra = judge(["NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"])
    assert intra.reasons[0].startswith("one host (unnamed), only intra-node connections (1 P2P/SHM lines)")
    unproven = judge(
        _efa("h1", 1)
        + [_p(h, pid) + "Using network Libfabric" for h, pid in (("h2", 2), ("h3", 3))]
        + [_chan("h1", 1), _chan("h2", 2)]
    )
    assert unproven.reasons == [
        "no 'Selected provider' line from host(s) h2, h3: another host's efa provider says "
        "nothing of theirs: " + _at(2, _PROV["h1"])
    ]
    both = judge(["NCCL INFO Using network Libfabric", "NCCL INFO Using network Socket"])
    assert "(Libfabric, Socket selected by 2 rank(s))" in both.reasons[0]
    named = judge([_p("h1") + "Using network Libfabric", _p("h1", 2) + "Using network IB"])
    assert "(IB, Libfabric selected, 1 host name(s) seen)" in named.reasons[0]
    counted = judge(["NCCL INFO comm 0x1 rank 0 nRanks 8 nNodes 2 localRanks 4"])
    assert "(no network selected, no host name(s) seen)" in counted.reasons[0]
    socket = judge(_efa("h1")[:2] + [_SOCK.replace("h1:1:1", "h1:2:2"), _ONE_NODE])  # efa provider, no Libfabric
    assert socket.evidence == [_at(4, _ONE_NODE)]


def test_binary_is_a_nul_or_more_than_one_byte_in_20_of_control_in_the_first_64_kib():
    line = b"h1:1:1 [0] NCCL INFO Using network Libfabric\n"

    def binary(data: bytes) -> bool:
        try:
            nccl_log.analyze_bytes([("a.log", data)])
        except nccl_log.UnreadableInput as e:
            return "binary data" in str(e)
        return False

    assert binary(line + b"\x00") and not binary(line)
    text = (line * 10)[:420]
    assert not binary(text[:399] + b"\x01" * 21) and binary(text[:398] + b"\x01" * 22)
    padded = line + b"#" * (65536 - len(line)) + b"\x00"  # the NUL is byte 65537
    assert nccl_log.analyze_bytes([("a.log", padded)]).ranks == 1
    with pytest.raises(nccl_log.UnreadableInput) as e:
        nccl_log.analyze_bytes([("a.log", b""), ("b.log", b"\x00")])
    assert str(e.value) == "a.log: empty input; b.log: binary data, not a text NCCL log"
    with pytest.raises(nccl_log.UnreadableInput, match="^no input$"):
        nccl_log.analyze_bytes([])


def test_connection_lines_alone_name_their_ranks_net_or_ring_and_per_file():
    assert judge([_chan("h1", 1), _chan("h2", 2)]).hosts == ["h1", "h2"]  # NET lines, no P2P/SHM line
    ring = judge(
        [_p(h, pid) + "Ring 00 : 7 -> 8 [receive] via NET/AWS Libfabric/0" for h, pid in (("h1", 1), ("h2", 2))]
    )
    assert ring.hosts == ["h1", "h2"] and ring.ranks == 2
    bare = ("NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Libfabric/0\n").encode()
    assert nccl_log.analyze_bytes([("a.log", bare), ("b.log", bare)]).ranks == 2


# --- conditions only a mutation run found unasserted ---


def test_an_unprefixed_excerpt_with_connection_lines_is_as_many_ranks_as_it_has_using_network_lines():
    """Connection lines without a prefix name no new process: they go to the file's last anonymous rank (before the
    fix one such excerpt counted 2 ranks, two counted 3)."""
    chan = "NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Libfabric/0"
    one = judge(["NCCL INFO Using network Libfabric", chan])
    assert (one.ranks, one.verdict, one.causes) == (1, "undetermined", ["no_provider_line"])
    assert judge(["NCCL INFO Using network Libfabric", "NCCL INFO Using network Libfabric", chan]).ranks == 2


def test_a_host_whose_only_nccl_line_holds_no_init_fact_is_no_rank():
    """A WARN/INFO line without a fact literal (here cudaDriverVersion, first in the log) names no rank, whatever the
    lines after it hold: a host counted without a provider line would make an EFA job undetermined."""
    rep = judge(
        [_p("h3", 3) + "cudaDriverVersion 12040"] + _efa("h1", 1) + _efa("h2", 2) + [_chan("h1", 1), _chan("h2", 2)]
    )
    assert (rep.verdict, rep.hosts, rep.ranks) == ("efa", ["h1", "h2"], 2)


def test_connection_lines_echoed_after_a_second_marker_still_name_their_ranks():
    echoed = [_chan(h, pid) + " (NCCL INFO echoed)" for h, pid in (("h1", 1), ("h2", 2))]
    assert judge(echoed).hosts == ["h1", "h2"]


def test_a_plugin_library_dlopen_could_not_open_is_a_failed_plugin():
    """NCCL prints dlopen's own error when it is not "<name>: No such file" (a dependency missing, no permission):
    NVIDIA/nccl src/plugin/plugin_open.cc, openPluginLib: INFO "%s/Plugin: %s: %s" (type, library, dlerror)."""
    line = _p("h1") + "NET/Plugin: libnccl-net-ofi.so: libfabric.so.1: cannot open shared object file: No such file"
    rep = judge([line, _TWO_NODES, _SOCK_CHAN])
    assert rep.verdict == "fallback" and rep.causes == ["socket_network", "plugin_not_found"]
    assert rep.reasons[1] == "net plugin failed to load: " + _at(1, line)


@pytest.mark.parametrize(
    "warning, causes",
    [
        ("XML Import Channel : dev 3 not found.", []),  # NCCL graph/search.cc: "not found" without a network
        ("NET/OFI MR key allocation failed", ["ofi_error"]),  # aws-ofi-nccl nccl_ofi_rdma.cpp: a failure, no init
    ],
)
def test_a_warning_is_a_missing_network_or_a_failed_plugin_only_when_it_says_so(warning, causes):
    rep = judge(_efa("h1", 1) + _efa("h2", 2) + [_chan("h1", 1), _chan("h2", 2), _w("h1") + warning])
    assert (rep.verdict, rep.causes) == ("efa", causes)


def test_a_warning_that_says_provider_is_without_selected_is_no_efa_provider():
    """aws-ofi-nccl 1.0-1.5 warn "Only EFA provider is supported" (src/nccl_ofi_net.c): no provider line."""
    rep = judge(_efa("h1") + [_chan("h1", via="NET/Socket/0"), _w("h1") + "NET/OFI Only EFA provider is supported"])
    assert rep.verdict == "fallback" and rep.causes == ["no_efa_provider", "socket_network"]
    assert rep.reasons[-1] == "aws-ofi-nccl warned: " + _at(5, _w("h1") + "NET/OFI Only EFA provider is supported")
