#!/usr/bin/env python3
"""Compares the JSON files of gpu-check's ab stage: for each part (PARTS below: gpu-check's
ab_parts that write JSON) and each variant, every point next to the same point of the base
variant.

    scripts/ab_compare.py DIR [DIR ...] [--base base]

Each DIR holds ab-NAME-PART.json files (several runs' folders may be given: a variant measured
in one run is compared with the base measured in another). Attention points compare median ms, end-to-end points
step ms (lower is better); the ratio column is variant / base, so below 1 is a gain.
"""
import argparse
import collections
import glob
import json
import os
import re
import sys

# How each part's points are keyed and timed (gpu-check's ab_parts that write JSON).
ATTENTION = (("heads", "kv_heads", "batch", "prefix", "suffix", "mode"), "median_ms")
END_TO_END = (("preset", "batch", "prefix", "mode"), "step_ms")
PARTS = {part: ATTENTION for part in ("mha", "gqa", "q64", "qsweep", "targets", "mha2", "t81", "twolevel", "shared",
                                       "decode", "sweep81", "sweep328", "sweep4040")}
PARTS.update({part: END_TO_END for part in ("e2e", "e2e8b", "e2e8b2", "e2e13b")})
PARTS["docqa"] = (("preset", "batch", "mode"), "step_ms")


def load(directories):
    """{part: {variant: {key: seconds}}} from the ab-VARIANT-PART.json files of the folders."""
    found = collections.defaultdict(dict)
    paths = [p for d in directories for p in sorted(glob.glob(os.path.join(d, "ab-*-*.json")))]
    for path in paths:
        match = re.fullmatch(r"ab-(.+)-([a-z0-9]+)\.json", os.path.basename(path))
        if not match or match.group(2) not in PARTS:
            continue
        variant, part = match.groups()
        keys, time_field = PARTS[part]
        with open(path) as f:
            rows = json.load(f).get("rows", [])
        found[part][variant] = {
            tuple(row.get(k) for k in keys): row[time_field]
            for row in rows
            if not row.get("skipped") and row.get(time_field) is not None
        }
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directories", nargs="+", metavar="DIR")
    parser.add_argument("--base", default="base", help="the variant the others are compared with")
    args = parser.parse_args()
    found = load(args.directories)
    if not found:
        sys.exit(f"ab_compare: no ab-*-PART.json files in {' '.join(args.directories)}")
    for part, variants in found.items():
        base = variants.get(args.base)
        if base is None:
            print(f"== {part}: no '{args.base}' variant, skipped")
            continue
        keys, time_field = PARTS[part]
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
                print(f"  {len(ratios)} points: best {min(ratios):.3f}, worst {max(ratios):.3f}")


if __name__ == "__main__":
    main()
