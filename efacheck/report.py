"""``--report DIR``: the EFA check as something a person looks at — report.md and busbw.png.

report.md leads with the verdict and its reasons, then the headline figures (EFA/Socket ratio, fraction of the EFA
line rate), the versions every rank loaded against the image manifest, and the sweep tables. busbw.png plots bus
bandwidth against message size, one line per collective (FSDP's own message sizes as larger markers), the EFA run
and the Socket run side by side on one y scale, the node's EFA line rate drawn across both.

matplotlib (pinned in requirements.txt) may be missing in the image: then the report says so and stays text only;
the check never fails because of its plot. Everything here is data in, files out: ``efa_check`` hands over the
dicts that ``sweep``, ``stack_probe`` and its verdict produced.
"""

from __future__ import annotations

import os
from typing import Any

from .sweep import COLLECTIVES

PNG_NAME = "busbw.png"
MD_NAME = "report.md"
_COLOURS = {"all_reduce": "#1f77b4", "all_gather_into_tensor": "#d62728", "reduce_scatter_tensor": "#2ca02c"}


def human_bytes(n: int) -> str:
    """1048576 -> '1 MiB', 788480 -> '770 KiB'; exact below 1 KiB."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if v >= 100 or v == int(v) else f"{v:.3g} {unit}"
    return f"{n} B"


def _f(x: float | None, fmt: str = ".3f") -> str:
    return "—" if x is None else format(x, fmt)


def _sweep_table(rows: list[dict[str, Any]], collective: str) -> list[str]:
    out = [
        "| size | bytes | source | dtype | time (us) | algbw (GB/s) | busbw (GB/s) | ok |",
        "|---:|---:|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        if r["collective"] == collective:
            out.append(
                f"| {human_bytes(r['bytes'])} | {r['bytes']} | {r.get('source', 'pow2')} | {r.get('dtype', '')} "
                f"| {r['time_us']:.1f} | {r['algbw_gbps']:.3f} | {r['busbw_gbps']:.3f} "
                f"| {'yes' if r.get('ok', True) else '**NO**'} |"
            )
    return out


def render_markdown(result: dict[str, Any], png: str | None = None, plot_note: str | None = None) -> str:
    """report.md's text from the check's result dict.

    Keys used (all optional but ``verdict``): ``verdict``, ``code``, ``reasons``, ``hints``, ``backend``,
    ``world``, ``nodes``, ``network``, ``provider``, ``instance_type``, ``title``, ``rows`` (sweep.summarize),
    ``socket_rows``, ``comparison`` (sweep.compare), ``line_rate`` (sweep.line_rate), ``versions``
    (stack_probe.compare_versions), ``stack_probes`` (stack_probe.probe per rank; ``probes`` is efa_check's env probe)."""
    r = result
    out = [f"# {r.get('title', 'EFA check report')}", ""]
    out.append(
        f"**Verdict: {r['verdict']}** (exit {r.get('code', '?')}) — backend {r.get('backend', '?')}, "
        f"{r.get('world', '?')} ranks on {r.get('nodes', '?')} node(s)"
        + (f", {r['instance_type']}" if r.get("instance_type") else "")
        + (f", network {r['network']}" if r.get("network") else "")
        + (f", provider {r['provider']}" if r.get("provider") else "")
    )
    img = r.get("image") or {}
    if img.get("reference") or img.get("digest"):
        out += [
            "",
            f"Image: {img.get('reference') or '?'}"
            + (f" (digest {img['digest']})" if img.get("digest") else " (digest not known: pinned by tag)"),
        ]
    out.append("")
    for x in r.get("reasons", []):
        out.append(f"- {x}")
    for h in r.get("hints", []):
        out.append(f"- hint: {h}")
    out += ["", "## Headline", ""]
    cmp = r.get("comparison")
    if cmp and cmp.get("headline_ratio"):
        out.append(
            f"- EFA/Socket busbw ratio at large messages: **{cmp['headline_ratio']:.2f}x** "
            "(geometric mean over the collectives of the median ratio at sizes both runs timed from "
            f"{human_bytes(cmp['headline_bytes'])} up: "
            + ", ".join(f"{c} {v['ratio']:.2f}x" for c, v in cmp["large"].items())
            + ")"
        )
    elif cmp and cmp.get("error"):
        out.append(
            f"- EFA/Socket ratio: the Socket comparison failed ({cmp['error']['stage']}): "
            f"{cmp['error']['reason']}; the verdict above stands"
        )
    else:
        out.append("- EFA/Socket ratio: not measured (run with --compare-socket)")
    rate = r.get("line_rate")
    if rate and rate.get("fraction") is not None:
        out.append(
            f"- Large-message busbw vs the EFA line rate ({rate['efa_gbps']:g} Gbit/s = "
            f"{rate['efa_gbps'] / 8:g} GB/s per node): **{rate['fraction']:.1%}** for the weakest collective ("
            + ", ".join(f"{c} {v['busbw_gbps']:.2f} GB/s = {v['fraction']:.1%}" for c, v in rate["large"].items())
            + ")"
        )
    else:
        out.append("- Fraction of the EFA line rate: unknown (no --efa-gbps for this instance type)")
    if png:
        out += ["", f"![busbw against message size]({os.path.basename(png)})"]
    elif plot_note:
        out += ["", f"_No plot: {plot_note}_"]
    ver = r.get("versions")
    if ver:
        out += [
            "",
            f"## Versions ({ver['status']}{', strict' if ver.get('strict') else ''})",
            "",
            "| layer | image manifest | loaded (ranks) | status |",
            "|---|---|---|---|",
        ]
        for t in ver["table"]:
            vals = "; ".join(f"{'unknown' if v == 'None' else v} (ranks {ranks})" for v, ranks in t["values"].items())
            out.append(f"| {t['key']} | {t['expected'] or '—'} | {vals} | {t['status']} |")
        for x in ver.get("reasons", []):
            out.append(f"- {x}")
        probes = r.get("stack_probes") or []
        if probes:
            out += [
                "",
                "Where each version came from (rank 0): "
                + "; ".join(f"{k}: {v}" for k, v in probes[0].get("sources", {}).items()),
            ]
    if cmp and cmp.get("rows"):
        out += [
            "",
            "## EFA / Socket busbw ratio",
            "",
            "| collective | size | source | EFA busbw (GB/s) | Socket busbw (GB/s) | ratio |",
            "|---|---:|---|---:|---:|---:|",
        ]
        for x in cmp["rows"]:
            out.append(
                f"| {x['collective']} | {human_bytes(x['bytes'])} | {x['source']} | {x['efa_busbw_gbps']:.3f} "
                f"| {x['socket_busbw_gbps']:.3f} | {_f(x['ratio'], '.2f')} |"
            )
    for label, rows in (("sweep", r.get("rows")), ("Socket sweep", r.get("socket_rows"))):
        if not rows:
            continue
        for c in COLLECTIVES:
            if any(x["collective"] == c for x in rows):
                out += ["", f"## {c} {label}", ""] + _sweep_table(rows, c)
    out += [
        "",
        "busbw = algbw x 2(n-1)/n for all_reduce, x (n-1)/n for all_gather_into_tensor and "
        "reduce_scatter_tensor (nccl-tests); sizes are whole arrays; GB/s = 1e9 bytes/s. "
        "Sources: pow2 = the power-of-two sweep, fsdp:<preset> = the training model's FSDP unit messages.",
        "",
    ]
    return "\n".join(out)


def plot(
    path: str,
    rows: list[dict[str, Any]],
    socket_rows: list[dict[str, Any]] | None = None,
    efa_gbps: float | None = None,
    title: str = "",
    labels: tuple[str, str] | None = None,
) -> None:
    """busbw against message size: one panel per transport (EFA, Socket), one line per collective, FSDP message
    sizes as big markers, the EFA line rate (Gbit/s / 8) as a dashed line. Raises ImportError without matplotlib.

    Args:
        labels: the two panels' titles (default: the NCCL transports; the CPU run says gloo instead)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullLocator

    from matplotlib.lines import Line2D

    labels = labels or ("EFA run (NCCL's default transport)", "Socket run (NCCL_NET=Socket)")
    panels = [(labels[0], rows)]
    if socket_rows:
        panels.append((labels[1], socket_rows))
    fig, axes = plt.subplots(1, len(panels), figsize=(6.4 * len(panels), 5.2), sharey=True, squeeze=False)
    all_bytes = sorted({x["bytes"] for _, rs in panels for x in rs})
    ymax = max([x["busbw_gbps"] for _, rs in panels for x in rs] + [efa_gbps / 8 if efa_gbps else 0]) or 1.0
    for ax, (name, rs) in zip(axes[0], panels):
        for c in COLLECTIVES:
            pts = sorted(
                (x["bytes"], x["busbw_gbps"]) for x in rs if x["collective"] == c and x.get("source", "pow2") == "pow2"
            )
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, lw=1.6, color=_COLOURS[c])
            fs = sorted(
                (x["bytes"], x["busbw_gbps"]) for x in rs if x["collective"] == c and x.get("source", "pow2") != "pow2"
            )
            if fs:
                ax.plot(
                    [p[0] for p in fs],
                    [p[1] for p in fs],
                    ls="none",
                    marker="D",
                    ms=7,
                    mfc="white",
                    mew=1.6,
                    color=_COLOURS[c],
                )
        if efa_gbps:
            ax.axhline(efa_gbps / 8, color="black", ls="--", lw=1)
        ax.set_xscale("log", base=2)
        ticks = [b for b in all_bytes if b & (b - 1) == 0]
        step = max(1, len(ticks) // 6)
        ax.xaxis.set_major_locator(FixedLocator(ticks[::step]))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([human_bytes(b) for b in ticks[::step]], fontsize=8)
        ax.set_ylim(0, ymax * 1.15)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("message size (whole array)")
        ax.grid(True, which="major", alpha=0.3)
    axes[0][0].set_ylabel("bus bandwidth (GB/s)")
    handles = [Line2D([], [], color=_COLOURS[c], marker="o", ms=3, label=c) for c in COLLECTIVES]
    handles.append(
        Line2D(
            [],
            [],
            ls="none",
            marker="D",
            ms=7,
            mfc="white",
            mew=1.6,
            color="grey",
            label="the model's FSDP message sizes",
        )
    )
    if efa_gbps:
        handles.append(
            Line2D(
                [],
                [],
                color="black",
                ls="--",
                lw=1,
                label=f"EFA line rate {efa_gbps:g} Gbit/s = {efa_gbps / 8:g} GB/s per node",
            )
        )
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(out_dir: str, result: dict[str, Any], efa_gbps: float | None = None) -> dict[str, Any]:
    """Write report.md and (matplotlib permitting) busbw.png into ``out_dir``; return their paths, the plot error
    if any, and the markdown text (for the Job log when the files cannot be fetched)."""
    os.makedirs(out_dir, exist_ok=True)
    png: str | None = os.path.join(out_dir, PNG_NAME)
    note = None
    if efa_gbps is None and result.get("line_rate"):
        efa_gbps = result["line_rate"]["efa_gbps"]
    if not result.get("rows"):
        png, note = None, "no sweep rows"
    else:
        try:
            cpu = result.get("backend") not in (None, "nccl")
            labels = ("default transport (gloo on the CPU)", "NCCL_NET=Socket set (gloo ignores it)") if cpu else None
            plot(png, result["rows"], result.get("socket_rows"), efa_gbps, result.get("title", ""), labels)
        except ImportError as e:
            png, note = None, f"matplotlib is not installed ({e}); pip install matplotlib for the plot"
    text = render_markdown(result, png, note)
    md = os.path.join(out_dir, MD_NAME)
    with open(md, "w", encoding="utf-8") as f:
        f.write(text)
    return {"report_md": md, "png": png, "plot_error": note, "text": text}
