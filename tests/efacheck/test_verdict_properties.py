"""Properties the EFA verdict must keep, over generated NCCL / aws-ofi-nccl logs.

Not cases written next to the parser: Hypothesis draws whole jobs (hosts, ranks per host, which init lines each rank
printed, which transport each connection used, GPUDirect RDMA or not) and writes them in the line shapes of the
published logs in tests/fixtures/nccl-logs/ (real_efa_g7e_slurm_nccl2292_ofi1180_2node.log,
real_efa_p3dn_k8s_mpijob_nccl264_16ranks.log, real_socket_g6e_k8s_ofi_no_eligible_providers_nccl2273.log):
``host:pid:tid [dev] NCCL INFO ...``. Each property is a rule the gate exists for, checked on every drawn job:

- a job whose ranks all ran on one host is never ``efa``;
- NET connection lines with no ``Selected provider`` line bound to their host are never ``efa``;
- adding a Socket / fallback line for any rank never makes the verdict better;
- with GPUDirect RDMA required, an inter-node NET line without /GDRDMA is never ``efa``;
- line order never changes the verdict;
- every ``efa`` verdict cites lines from at least two hosts, or NCCL's own node count, and a provider line;
- counters: more bytes on any counter never lowers a node's measured bytes; a node with no EFA device never counts
  as having moved bytes;
- the run's fabric verdict: a rank with no log never counts as agreeing.

Derandomized with no example database, so CI draws the same examples every run and cannot flake; ~10 s.
"""

from __future__ import annotations

import os
import random

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ray_efa_eks.efacheck import efa_counters, nccl_log
from ray_efa_eks.training import fabric

EXAMPLES = int(os.environ.get("RAY_EFA_EKS_PROPERTY_EXAMPLES", "150"))
"""150 in .ci/run; .ci/mutation.py sets fewer (each surviving mutant runs every covering test, and these dominate)."""
SETTINGS = dict(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
RANK = {"efa": 0, "undetermined": 1, "fallback": 2}
"""Better is lower: a fallback line may turn efa into undetermined or fallback, never the other way."""


@st.composite
def jobs(draw, nodes=st.integers(1, 3)):
    """One NCCL job as facts: hosts, ranks per host, what each rank printed."""
    n_nodes = draw(nodes)
    hosts = [f"ip-10-0-{i}-{draw(st.integers(1, 250))}" for i in range(n_nodes)]
    per_host = draw(st.integers(1, 2))
    ranks = []
    for h, host in enumerate(hosts):
        for local in range(per_host):
            ranks.append(
                {
                    "host": host,
                    "pid": 1000 + 10 * h + local,
                    "rank": h * per_host + local,
                    "local": local,
                    "plugin": draw(st.sampled_from(["Libfabric", "Libfabric", "AWS Libfabric", None])),
                    "provider": draw(st.sampled_from(["efa", "efa", "efa", "tcp", None])),
                    "network": draw(st.sampled_from(["Libfabric", "Libfabric", "Socket", None])),
                    "comm": draw(st.booleans()),
                    "gdr": draw(st.booleans()),
                    "intra_net": draw(st.booleans()),  # single node with P2P/SHM disabled: NET lines inside the node
                }
            )
    return {"nodes": n_nodes, "hosts": hosts, "per_host": per_host, "ranks": ranks, "channels": draw(st.integers(1, 2))}


def _p(r: dict) -> str:
    return f"{r['host']}:{r['pid']}:{r['pid']} [{r['local']}] NCCL INFO "


def render(job: dict) -> list[str]:
    """The job's log lines, in the shapes NCCL 2.2x and aws-ofi-nccl 1.1x print them (see the module docstring)."""
    lines: list[str] = []
    world = len(job["ranks"])
    for r in job["ranks"]:
        p = _p(r)
        lines.append(p + f"Bootstrap: Using eth0:10.0.{r['rank']}.5<0>")
        if r["plugin"]:
            lines.append(p + f"NET/Plugin: Loaded net plugin {r['plugin']} (v9)")
            lines.append(p + "NET/OFI Initializing aws-ofi-nccl 1.16.2")
        if r["plugin"] and r["provider"]:
            fabric_name = "efa-direct" if r["provider"] == "efa" else "10.0.0.0/16"
            lines.append(p + f"NET/OFI Selected provider is {r['provider']}, fabric is {fabric_name} (found 1 nics)")
        if r["network"]:
            lines.append(p + f"Using network {r['network']}")
        if r["comm"]:
            lines.append(
                p + f"comm 0x7f00{r['rank']:04x} rank {r['rank']} nRanks {world} nNodes {job['nodes']} "
                f"localRanks {job['per_host']} localRank {r['local']} MNNVL 0"
            )
        net = r["network"] or "Socket"
        for c in range(job["channels"]):
            for peer in job["ranks"]:
                if peer is r or peer["rank"] != (r["rank"] + 1) % world:
                    continue
                if peer["host"] != r["host"] or (job["nodes"] == 1 and r["intra_net"]):
                    dev = f"NET/{net}/0" + ("/GDRDMA" if net != "Socket" and r["gdr"] else "")
                    lines.append(
                        p + f"Channel {c:02d}/0 : {r['rank']}[{r['local']}] -> {peer['rank']}"
                        f"[{peer['local']}] [send] via {dev}"
                    )
                else:
                    lines.append(
                        p + f"Channel {c:02d}/0 : {r['rank']}[{r['local']}] -> {peer['rank']}"
                        f"[{peer['local']}] via P2P/CUMEM/read"
                    )
    return lines


def judge(lines: list[str], **expect) -> nccl_log.Report:
    return nccl_log.analyze_bytes([("job.log", ("\n".join(lines) + "\n").encode())], **expect)


def _efa_rank(host: str, i: int, **kw) -> dict:
    return {
        "host": host,
        "pid": 100 + i,
        "rank": i,
        "local": i,
        "plugin": "Libfabric",
        "provider": "efa",
        "network": "Libfabric",
        "comm": False,
        "gdr": True,
        "intra_net": True,
        **kw,
    }


@settings(**SETTINGS)
@given(jobs(nodes=st.just(1)))
# NET lines inside one node (P2P/SHM off) and no comm line: once judged efa
@example({"nodes": 1, "hosts": ["h1"], "per_host": 2, "ranks": [_efa_rank("h1", 0), _efa_rank("h1", 1)], "channels": 1})
def test_one_host_is_never_efa(job):
    rep = judge(render(job))
    assert rep.verdict != "efa", rep.reasons


@settings(**SETTINGS)
@given(jobs(), st.data())
def test_net_lines_without_a_provider_line_of_their_host_are_never_efa(job, data):
    unbound = data.draw(st.sampled_from(job["hosts"]))
    for r in job["ranks"]:
        if r["host"] == unbound:
            r["provider"] = None
    rep = judge(render(job))
    assert rep.verdict != "efa", rep.reasons


@settings(**SETTINGS)
@given(jobs(), st.data())
def test_a_fallback_line_never_makes_the_verdict_better(job, data):
    lines = render(job)
    before = judge(lines).verdict
    r = data.draw(st.sampled_from(job["ranks"]))
    peer = data.draw(st.sampled_from(job["ranks"]))
    extra = data.draw(
        st.sampled_from(
            [
                _p(r) + "Using network Socket",
                _p(r)
                + f"Channel 00/0 : {r['rank']}[{r['local']}] -> {peer['rank']}[{peer['local']}] [send] via NET/Socket/0",
                _p(r) + "NET/Plugin: No plugin found (libnccl-net.so), using internal implementation",
                _p(r).replace("INFO ", "WARN ") + "NET/OFI No eligible providers were found",
                _p(r) + "NET/OFI Selected provider is tcp, fabric is 10.0.0.0/16 (found 1 nics)",
            ]
        )
    )
    at = data.draw(st.integers(0, len(lines)))
    after = judge(lines[:at] + [extra] + lines[at:]).verdict
    assert RANK[after] >= RANK[before], (before, after, extra)


@settings(**SETTINGS)
@given(jobs(nodes=st.integers(2, 3)), st.data())
def test_gdrdma_required_and_a_net_line_without_it_is_never_efa(job, data):
    for r in job["ranks"]:
        r["gdr"] = True
    data.draw(st.sampled_from(job["ranks"]))["gdr"] = False
    lines = render(job)
    rep = judge(lines, expect_gdrdma=True)
    if any(" via NET/Libfabric/0\n" in ln + "\n" for ln in lines):
        assert rep.verdict != "efa", rep.reasons


@settings(**SETTINGS)
@given(jobs(), st.randoms(use_true_random=False))
def test_line_order_never_changes_the_verdict(job, rnd):
    lines = render(job)
    shuffled = list(lines)
    rnd.shuffle(shuffled)
    assert judge(shuffled).verdict == judge(lines).verdict


@settings(**SETTINGS)
@given(jobs())
def test_every_efa_verdict_cites_two_hosts_or_the_node_count_and_a_provider_line(job):
    rep = judge(render(job))
    if rep.verdict != "efa":
        return
    cited_hosts = {h for h in job["hosts"] for ln in rep.evidence if f": {h}:" in ln}
    assert len(cited_hosts) >= 2 or any(" nNodes " in ln and " nNodes 1 " not in ln for ln in rep.evidence), (
        rep.evidence
    )
    assert any("Selected provider is efa" in ln for ln in rep.evidence), rep.evidence


def test_the_generator_draws_efa_and_each_failure():
    """The properties above are not vacuous: the generator draws efa, fallback and undetermined jobs."""
    seen = set()
    for seed in range(300):
        rnd = random.Random(seed)
        n = rnd.randint(1, 3)
        hosts = [f"ip-10-0-{i}-9" for i in range(n)]
        ranks = [
            {
                "host": h,
                "pid": 100 + i,
                "rank": i,
                "local": 0,
                "plugin": rnd.choice(["Libfabric"] * 5 + [None]),
                "provider": rnd.choice(["efa"] * 5 + ["tcp", None]),
                "network": rnd.choice(["Libfabric"] * 5 + ["Socket", None]),
                "comm": rnd.random() < 0.5,
                "gdr": True,
                "intra_net": False,
            }
            for i, h in enumerate(hosts)
        ]
        seen.add(judge(render({"nodes": n, "hosts": hosts, "per_host": 1, "ranks": ranks, "channels": 1})).verdict)
    assert seen == {"efa", "fallback", "undetermined"}


# --- the second witness: EFA hardware counters ---

counter_values = st.integers(0, 10**12)
device_delta = st.dictionaries(
    st.sampled_from(efa_counters.COUNTERS), counter_values, max_size=len(efa_counters.COUNTERS)
)


@settings(**SETTINGS)
@given(st.dictionaries(st.sampled_from(["efa_0", "efa_1"]), device_delta, min_size=1), st.data())
def test_more_bytes_on_any_counter_never_lowers_a_nodes_bytes(deltas, data):
    deltas = {d: {**e, "errors": {}} for d, e in deltas.items()}
    dev = data.draw(st.sampled_from(sorted(deltas)))
    name = data.draw(st.sampled_from(efa_counters.COUNTERS))
    more = {d: dict(e) for d, e in deltas.items()}
    more[dev][name] = more[dev].get(name, 0) + data.draw(st.integers(1, 10**12))

    def measured(ds):
        per = efa_counters.node_bytes(ds)
        return tuple(sum(v[k] or 0 for v in per.values()) for k in ("sent", "received"))

    before, after = measured(deltas), measured(more)
    assert after[0] >= before[0] and after[1] >= before[1]
    expected = data.draw(st.integers(1, 10**12))
    ok_before, _ = efa_counters.judge_counters({"n1": deltas}, expected, "efa")
    ok_after, _ = efa_counters.judge_counters({"n1": more}, expected, "efa")
    order = {False: 0, None: 1, True: 2}
    if ok_before is not None:  # more bytes never turns a pass into a failure, nor a readable node unreadable
        assert order[ok_after] >= order[ok_before]


@settings(**SETTINGS)
@given(
    st.dictionaries(
        st.sampled_from(["n1", "n2", "n3"]), st.dictionaries(st.sampled_from(["efa_0"]), device_delta), min_size=1
    ),
    st.sampled_from(["n1", "n2", "n3"]),
)
def test_a_node_without_an_efa_device_never_counts_as_moving_bytes(nodes, bare):
    nodes = {n: {d: {**e, "errors": {}} for d, e in devs.items()} for n, devs in nodes.items()}
    nodes[bare] = {}
    ok, reasons = efa_counters.judge_counters(nodes, 10**6, "efa")
    assert ok is not True, reasons
    assert any(r.startswith(f"node {bare}: no EFA device") for r in reasons)
    fab = fabric.summarize("gloo", {}, counter_deltas=nodes)
    assert bare not in (fab["efa_bytes"] or {})


# --- the run's fabric verdict ---


@settings(**SETTINGS)
@given(jobs(nodes=st.integers(2, 3)), st.data())
def test_a_rank_with_no_log_never_counts_as_agreeing(job, data):
    for r in job["ranks"]:  # every rank that logged says efa
        r.update(plugin="Libfabric", provider="efa", network="Libfabric", gdr=True)
    logs = {}
    for r in job["ranks"]:
        logs[f"rank{r['rank']}.log"] = ("\n".join(ln for ln in render(job) if ln.startswith(_p(r))) + "\n").encode()
    assert fabric.summarize("nccl", logs)["verdict"] == "efa"
    silent = data.draw(st.sampled_from(sorted(logs)))
    logs[silent] = data.draw(st.sampled_from([None, b"", b"no nccl here\n"]))
    fab = fabric.summarize("nccl", logs)
    assert fab["verdict"] != "efa", fab["reasons"]
    assert any("gave no NCCL line" in r or "missing" in r for r in fab["reasons"]), fab["reasons"]
