#!/usr/bin/env python3
"""Plot and table of `hydragen bench serve` JSON: throughput and TTFT vs concurrency.

    scripts/plot_serve.py SERVE.json [SERVE2.json ...] -o docs/serve-throughput.png
        two panels (output tokens/s, TTFT p50 and p99) vs concurrency, a line per
        (mode, prompts) pair
    scripts/plot_serve.py SERVE.json --markdown [--e2e E2E.json]
        a table; with --e2e, the server's throughput over `bench e2e`'s at the same batch
"""
import argparse
import json
import sys
from collections import defaultdict


def rows_of(paths):
    rows = []
    for path in paths:
        with open(path) as f:
            rows += json.load(f)["rows"]
    return rows


def e2e_throughput(path):
    """(mode, batch) -> decode tokens/s of a bench e2e JSON."""
    with open(path) as f:
        report = json.load(f)
    out = {}
    for r in report["rows"]:
        value = r.get("tokens_per_s") or r.get("decode_tokens_per_s") or r.get("throughput")
        if value:
            out[(r["mode"], r["batch"])] = value
    return out


def markdown(rows, e2e):
    print("| mode | prompts | concurrency | done | tok/s | TTFT p50 / p99 (ms) | ITL p50 / p99 (ms) | latency p50 (ms) |"
          + (" vs bench e2e |" if e2e else ""))
    print("| --- | --- | --- | --- | --- | --- | --- | --- |" + (" --- |" if e2e else ""))
    for r in rows:
        line = (f"| {r['mode']} | {r['prompts']} | {r['concurrency']} | {r['completed']}/{r['requests']} | "
                f"{r['throughput_tok_s']:.0f} | {r['ttft']['p50_ms']:.1f} / {r['ttft']['p99_ms']:.1f} | "
                f"{r['itl']['p50_ms']:.2f} / {r['itl']['p99_ms']:.2f} | {r['latency']['p50_ms']:.0f} |")
        if e2e:
            ref = e2e.get((r["mode"], r["concurrency"]))
            line += f" {r['throughput_tok_s'] / ref:.0%} |" if ref else " |"
        print(line)
        if "long_prompt" in r:
            lp = r["long_prompt"]
            print(f"|  | long prompt {lp['tokens']} | | | | TTFT {lp['ttft_ms']:.0f} | "
                  f"{lp['itl_while_it_arrives']['p50_ms']:.2f} / {lp['itl_while_it_arrives']['p99_ms']:.2f} | |"
                  + (" |" if e2e else ""))


def plot(rows, out):
    try:
        import matplotlib
    except ImportError:
        sys.exit("plot_serve.py needs matplotlib: apt-get install python3-matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    lines = defaultdict(list)
    for r in rows:
        lines[(r["mode"], r["prompts"])].append(r)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for i, ((mode, prompts), points) in enumerate(sorted(lines.items())):
        points.sort(key=lambda r: r["concurrency"])
        xs = [r["concurrency"] for r in points]
        label, color = f"{mode}, {prompts} prompt", f"C{i}"  # one color per line pair
        left.plot(xs, [r["throughput_tok_s"] for r in points], "-o", color=color, label=label)
        right.plot(xs, [r["ttft"]["p50_ms"] for r in points], "-o", color=color, label=label + " p50")
        right.plot(xs, [r["ttft"]["p99_ms"] for r in points], ":", color=color, label=label + " p99")
    clients = sorted({r["concurrency"] for r in rows})
    for ax, title in ((left, "output tokens/s"), (right, "time to first token (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(clients, [str(c) for c in clients])
        ax.minorticks_off()
        ax.set_xlabel("concurrent clients")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    right.set_yscale("log")
    left.legend(fontsize=8)
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=130)
    print(f"wrote {out}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("json", nargs="+")
    p.add_argument("-o", "--output")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--e2e", help="a bench e2e JSON at the same batch, for the ratio")
    a = p.parse_args()
    rows = rows_of(a.json)
    if a.markdown or not a.output:
        markdown(rows, e2e_throughput(a.e2e) if a.e2e else None)
    if a.output:
        plot(rows, a.output)


if __name__ == "__main__":
    main()
