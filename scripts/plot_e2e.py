#!/usr/bin/env python3
"""Plots and tables of `hydragen bench e2e` JSON, like the paper's Fig. 3/4.

    scripts/plot_e2e.py SWEEP.json [SWEEP2.json ...] -o docs/e2e-throughput.png
        one row of panels per preset: decode tokens/s vs batch, one panel per prefix, a line
        per mode (an x on the floor: out of memory, the paper's X)
    scripts/plot_e2e.py SWEEP.json --markdown          tables for docs/
    scripts/plot_e2e.py --docqa DOCQA.json --two-level TWO.json -o docs/e2e-scenarios.png
"""
import argparse
import json
import sys
from collections import defaultdict

try:
    import matplotlib
except ImportError:
    sys.exit("plot_e2e.py needs matplotlib: apt-get install python3-matplotlib (run it with /usr/bin/python3)")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from plot_common import figure_legend_entries, mark_out_of_memory  # noqa: E402

MODES = ["hydragen", "paged", "dense", "none"]
STYLE = {"hydragen": ("C0", "-o"), "paged": ("C1", "-s"), "dense": ("C2", "-^"), "none": ("C7", "--")}


def tok(n):
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def load(path):
    with open(path) as f:
        return json.load(f)


def sweep_figure(reports, out):
    presets = [(r, r["rows"][0]["preset"]) for r in reports]
    prefixes = sorted({row["prefix"] for r, _ in presets for row in r["rows"]})
    fig, axes = plt.subplots(len(presets), len(prefixes), figsize=(3.2 * len(prefixes), 3.0 * len(presets)),
                             squeeze=False, sharey="row")
    for i, (report, preset) in enumerate(presets):
        for j, prefix in enumerate(prefixes):
            ax = axes[i][j]
            if not any(r["prefix"] == prefix for r in report["rows"]):
                ax.axis("off")  # this preset's sweep has no such prefix
                continue
            for mode in MODES:
                rows = sorted((r for r in report["rows"] if r["prefix"] == prefix and r["mode"] == mode),
                              key=lambda r: r["batch"])
                ok = [r for r in rows if not r["skipped"]]
                color, style = STYLE[mode]
                ax.plot([r["batch"] for r in ok], [r["tokens_per_s"] / 1e3 for r in ok], style, color=color,
                        label=mode, markersize=4)
                mark_out_of_memory(ax, [r["batch"] for r in rows if r["skipped"]], color)
            ax.set_xscale("log", base=2)
            batches = sorted({r["batch"] for r in report["rows"]})
            ax.set_xticks(batches, [str(b) for b in batches], fontsize=7)
            ax.minorticks_off()
            ax.set_title(f"{preset}, prefix {tok(prefix)}", fontsize=9)
            ax.set_xlabel("batch")
            if j == 0:
                ax.set_ylabel("decode K tokens/s")
            ax.grid(alpha=0.3)
    handles, labels = figure_legend_entries([ax for row in axes for ax in row], True)
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.suptitle(f"decode throughput, {reports[0]['device']}, 128 new tokens, random weights", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(out, dpi=110)


def markdown(report):
    preset = report["rows"][0]["preset"]
    print(f"#### {preset} ({report['device']}, commit {report['git_commit'][:7]}, {report['date']})\n")
    print("| batch | prefix | hydragen tok/s | of floor | paged | dense | none | hydragen / paged |")
    print("|---|---|---|---|---|---|---|---|")
    points = defaultdict(dict)
    for r in report["rows"]:
        points[(r["batch"], r["prefix"])][r["mode"]] = r
    for (batch, prefix), modes in sorted(points.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        def cell(mode):
            r = modes.get(mode)
            if r is None:
                return "-"
            if r["skipped"]:
                return "X"
            return f"{r['tokens_per_s']:,.0f}" + (" (s)" if r.get("sampled") else "")
        h = modes.get("hydragen", {})
        frac = f"{h['fraction_of_floor']:.2f}" if h.get("fraction_of_floor") else "-"
        speed = f"{h['speedup_vs_paged']:.1f}x" if h.get("speedup_vs_paged") else "-"
        print(f"| {batch} | {tok(prefix)} | {cell('hydragen')} | {frac} | {cell('paged')} | {cell('dense')} | "
              f"{cell('none')} | {speed} |")
    print("\n(s): sampled steps; X: the batch does not fit the KV pool at once.\n")


def scenarios_figure(docqa, two_level, out):
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    for mode in ["hydragen", "paged", "dense"]:
        rows = sorted((r for r in docqa["rows"] if r["mode"] == mode), key=lambda r: r["batch"])
        ok = [r for r in rows if not r["skipped"]]
        color, style = STYLE[mode]
        a.plot([r["batch"] for r in ok], [r["total_s"] for r in ok], style, color=color, label=mode)
        mark_out_of_memory(a, [r["batch"] for r in rows if r["skipped"]], color)
    r0 = docqa["rows"][0]
    a.set_title(f"{r0['preset']}: {r0['doc_tokens']}-token document + B questions, {r0['new_tokens']} new tokens",
                fontsize=9)
    a.set_xlabel("questions")
    a.set_ylabel("total time, s (prefill + decode)")
    a.set_xscale("log", base=2)
    a.grid(alpha=0.3)
    a.legend(*figure_legend_entries([a], any(r["skipped"] for r in docqa["rows"])), fontsize=8)
    # The whole job's time where the bench computed it (job_s_computed: rounds x one timed
    # round), else the round's decode rate.
    job = any("job_s_computed" in r for r in two_level["rows"])
    for level, color in [("two-level", "C0"), ("one-level", "C3")]:
        rows = sorted((r for r in two_level["rows"] if r["case"] == level), key=lambda r: r["batch"])
        ok = [r for r in rows if not r["skipped"]]
        ys = [r["job_s_computed"] if job else r["tokens_per_s"] / 1e3 for r in ok]
        b.plot([r["batch"] for r in ok], ys, "-o", color=color, label=level)
        mark_out_of_memory(b, [r["batch"] for r in rows if r["skipped"]], color)
    r0 = two_level["rows"][0]
    b.set_title(f"{r0['preset']}: {r0['fewshot_tokens']}-token prompt, " + (f"{r0['total_problems']} " if job else "")
                + f"problems of {r0['problem_tokens']}, {r0['samples']} x {r0['new_tokens']} tokens", fontsize=8.5)
    b.set_xlabel("batch (problems per round x samples)")
    b.set_ylabel("whole job, s (rounds x one timed round)" if job else "decode K tokens/s")
    b.grid(alpha=0.3)
    b.legend(*figure_legend_entries([b], any(r["skipped"] for r in two_level["rows"])), fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sweeps", nargs="*")
    ap.add_argument("-o", "--output")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--docqa")
    ap.add_argument("--two-level")
    args = ap.parse_args()
    reports = [load(p) for p in args.sweeps]
    if args.markdown:
        for r in reports:
            markdown(r)
    elif args.docqa:
        scenarios_figure(load(args.docqa), load(args.two_level), args.output)
    else:
        sweep_figure(reports, args.output)


if __name__ == "__main__":
    main()
