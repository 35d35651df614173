#!/usr/bin/env python3
"""Plot a `hydragen bench attention` JSON like the paper's Fig. 5: speedup over paged
attention vs batch size, one line per prefix length, one panel per (shape, suffix).

    scripts/plot_bench.py bench/results/cpu-attention-DATE.json -o docs/cpu-attention-speedup.png
    scripts/plot_bench.py bench/results/cpu-attention-DATE.json --markdown   (tables for docs/)

Solid lines: hydragen (and hydragen-root when present, dash-dot). Dotted: dense. The speedup
axis is logarithmic; a cross on a panel's floor marks a point a mode could not run (out of
memory), like the paper's X.
"""
import argparse
import json
import sys
from collections import defaultdict

try:
    import matplotlib
except ImportError:
    sys.exit("plot_bench.py needs matplotlib: apt-get install python3-matplotlib, then run it with "
             "/usr/bin/python3 (a pyenv/venv python may not see Debian's packages)")

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from plot_common import figure_legend_entries, mark_out_of_memory, plain_log_ticks  # noqa: E402

MODE_STYLE = {"hydragen": "-", "hydragen-root": "-.", "dense": ":"}


def tokens(n):
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def shape_label(row):
    label = f"Hq={row['heads']}, Hkv={row['kv_heads']}, d={row['head_dim']}"
    if row.get("groups", 0):
        label += f", two-level {row['groups']}x{tokens(row['level2'])}"
    return label


def load_rows(path):
    with open(path) as f:
        report = json.load(f)
    return report, report["rows"]


def panel_series(rows):
    """{(shape, suffix): {(mode, prefix): [(batch, speedup or None)]}}"""
    panels = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row["mode"] == "paged":
            continue
        key = (shape_label(row), row["suffix"])
        speedup = None if row.get("skipped") else row.get("speedup_vs_paged")
        panels[key][(row["mode"], row["prefix"])].append((row["batch"], speedup))
    return panels


def plot(report, rows, out_path, title):
    panels = panel_series(rows)
    if not panels:
        sys.exit("no rows with a speedup over paged: run with --modes including paged")
    shapes = sorted({k[0] for k in panels})
    suffixes = sorted({k[1] for k in panels})
    prefixes = sorted({p for series in panels.values() for (_, p) in series})
    colors = {p: plt.cm.viridis(i / max(1, len(prefixes) - 1) * 0.85) for i, p in enumerate(prefixes)}
    fig, axes = plt.subplots(len(shapes), len(suffixes), figsize=(max(8.0, 4.6 * len(suffixes)), 3.4 * len(shapes) + 1.2),
                             squeeze=False, sharex=True)
    any_oom = False
    legend_order = {}
    for r, shape in enumerate(shapes):
        for c, suffix in enumerate(suffixes):
            ax = axes[r][c]
            ax.axhline(1.0, color="grey", lw=0.8, ls="--")
            for (mode, prefix), points in sorted(panels.get((shape, suffix), {}).items()):
                points.sort()
                xs = [b for b, s in points if s is not None]
                ys = [s for b, s in points if s is not None]
                style = MODE_STYLE.get(mode, "--")
                label = f"{mode}, prefix {tokens(prefix)}"
                legend_order[label] = (mode, prefix)
                ax.plot(xs, ys, style, marker="o", ms=4, color=colors[prefix], label=label,
                        lw=2 if mode == "hydragen" else 1.2)
                oom = [b for b, s in points if s is None]
                any_oom = any_oom or bool(oom)
                mark_out_of_memory(ax, oom, colors[prefix])
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            plain_log_ticks(ax)
            ax.set_title(f"{shape}\nsuffix {tokens(suffix)}", fontsize=9)
            ax.grid(True, alpha=0.3)
            if r == len(shapes) - 1:
                ax.set_xlabel("batch (sequences sharing the prefix)")
            if c == 0:
                ax.set_ylabel("speedup over paged")
    batches = sorted({row["batch"] for row in rows})
    for ax in axes[-1]:
        ax.set_xticks(batches)
        ax.set_xticklabels([str(b) for b in batches])
    handles, labels = figure_legend_entries([ax for row in axes for ax in row], any_oom, order=legend_order)
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle(title or f"speedup over paged attention (log scale)\n{report.get('device', '')}, "
                 f"{report.get('date', '')[:10]}", fontsize=10)
    legend_rows = (len(labels) + 2) // 3
    fig.tight_layout(rect=(0, 0.035 * legend_rows + 0.02, 1, 0.93))
    fig.savefig(out_path, dpi=130)
    print(f"wrote {out_path}")


def markdown_tables(report, rows):
    """One markdown table per (shape, suffix): ms, speedup over paged, measured/floor per mode."""
    ceil = report["ceilings"]
    scale = 1e9 if report.get("settings", {}).get("device", "cpu") == "cpu" else 1e12
    unit = "G" if scale == 1e9 else "T"
    lines = [f"Ceilings measured in the run: {ceil['peak_flops_per_s'] / scale:.1f} {unit}FLOP/s "
             f"({ceil['peak_flops_source']}), {ceil['bandwidth_bytes_per_s'] / scale:.1f} {unit}B/s "
             f"({ceil['bandwidth_source']}).", ""]
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    groups = defaultdict(list)
    for row in rows:
        groups[(shape_label(row), row["suffix"])].append(row)
    for (shape, suffix), group in groups.items():
        lines.append(f"**{shape}, suffix {tokens(suffix)}** — ms (speedup over paged; measured/floor)")
        lines.append("")
        lines.append("| batch | prefix | " + " | ".join(modes) + " |")
        lines.append("|---:|---:|" + "---:|" * len(modes))
        points = defaultdict(dict)
        for row in group:
            points[(row["prefix"], row["batch"])][row["mode"]] = row
        for (prefix, batch), by_mode in sorted(points.items()):
            cells = []
            for mode in modes:
                row = by_mode.get(mode)
                if row is None:
                    cells.append("")
                elif row.get("skipped"):
                    cells.append(f"X ({row['kv_bytes_held'] / 1e9:.1f} GB)")
                else:
                    speedup = row.get("speedup_vs_paged")
                    speed = f"{speedup:.2f}x" if speedup is not None else "-"
                    cells.append(f"{row['median_ms']:.1f} ({speed}; {row['measured_over_floor']:.1f})")
            lines.append(f"| {batch} | {tokens(prefix)} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", nargs="+", help="JSON written by `hydragen bench attention --json` (rows joined)")
    parser.add_argument("-o", "--output", default=None, help="PNG path (default: the JSON's name with .png)")
    parser.add_argument("--title", default=None)
    parser.add_argument("--markdown", action="store_true", help="print markdown tables instead of plotting")
    args = parser.parse_args()
    report, rows = load_rows(args.json[0])
    for path in args.json[1:]:
        rows = rows + load_rows(path)[1]
    if args.markdown:
        print(markdown_tables(report, rows))
        return
    out = args.output or args.json[0].rsplit(".", 1)[0] + ".png"
    plot(report, rows, out, args.title)


if __name__ == "__main__":
    main()
