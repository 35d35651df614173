#!/usr/bin/env python3
"""Compares the JSON files of gpu-check's ab stage: for each part (gpu-check's ab_parts that
write JSON) and each variant, every point next to the same point of the base variant.

    scripts/ab_compare.py DIR [DIR ...] [--base base]

Each DIR holds ab-NAME-PART.json files (several runs' folders may be given: a variant measured
in one run is compared with the base measured in another). Attention points compare median ms, end-to-end points
step ms (lower is better); the ratio column is variant / base, so below 1 is a gain.
"""
import argparse
import collections
import glob
import json
import math
import os
import re
import sys

# How a file's points are keyed and timed, told by the fields its rows carry (the `tool` of
# the JSON: the attention bench, the end-to-end bench, its docqa scenario).
ATTENTION = (("heads", "kv_heads", "batch", "prefix", "suffix", "mode"), "median_ms")
END_TO_END = (("preset", "batch", "prefix", "mode"), "step_ms")
DOCQA = (("preset", "batch", "mode"), "step_ms")


def kind_of(rows):
    first = next((row for row in rows if not row.get("skipped")), rows[0] if rows else {})
    if "median_ms" in first:
        return ATTENTION
    return END_TO_END if "prefix" in first else DOCQA


def load(directories):
    """({part: {variant: {key: seconds}}}, {part: (keys, time field)}) from the
    ab-VARIANT-PART.json files of the folders."""
    found = collections.defaultdict(dict)
    kinds = {}
    paths = [p for d in directories for p in sorted(glob.glob(os.path.join(d, "ab-*-*.json")))]
    for path in paths:
        match = re.fullmatch(r"ab-(.+)-([a-z0-9]+)\.json", os.path.basename(path))
        if not match:
            continue
        variant, part = match.groups()
        with open(path) as f:
            rows = json.load(f).get("rows", [])
        if not rows:
            continue
        keys, time_field = kinds[part] = kind_of(rows)
        found[part][variant] = {
            tuple(row.get(k) for k in keys): row[time_field]
            for row in rows
            if not row.get("skipped") and row.get(time_field) is not None
        }
    return found, kinds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directories", nargs="+", metavar="DIR")
    parser.add_argument("--base", default="base", help="the variant the others are compared with")
    args = parser.parse_args()
    found, kinds = load(args.directories)
    if not found:
        sys.exit(f"ab_compare: no ab-*-PART.json files in {' '.join(args.directories)}")
    for part, variants in found.items():
        base = variants.get(args.base)
        if base is None:
            print(f"== {part}: no '{args.base}' variant, skipped")
            continue
        keys, time_field = kinds[part]
        for variant, points in variants.items():
            if variant == args.base:
                continue
            print(f"== {part}: {variant} vs {args.base} ({time_field}, ratio < 1 is a gain)")
            print("  " + " ".join(f"{k:>9}" for k in keys) + f" {'base':>10} {variant[:10]:>10} {'ratio':>7}")
            ratios = []
            for key, base_value in sorted(base.items(), key=lambda kv: [str(v) for v in kv[0]]):
                if key not in points:
                    continue
                ratio = points[key] / base_value
                ratios.append(ratio)
                print("  " + " ".join(f"{str(v):>9}" for v in key) + f" {base_value:10.4f} {points[key]:10.4f} {ratio:7.3f}")
            if ratios:
                geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
                print(f"  {len(ratios)} points: geomean {geomean:.3f}, best {min(ratios):.3f}, worst {max(ratios):.3f}")


if __name__ == "__main__":
    main()
