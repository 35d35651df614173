#!/usr/bin/env python3
"""Reference fixtures from independent implementations (transformers, tokenizers,
sentencepiece), for the CPU tests to assert against. Runs on the GPU machine, which has those
libraries; CI only reads the committed results.

  python3 scripts/make-reference.py --out DIR [--only model|tokenizer|demo] [--variant NAME ...]

DIR/model/<variant>/      see scripts/reference/model.py  -> tests/fixtures/model/
DIR/tokenizer/<kind>/     see scripts/reference/tokenizer.py -> tests/fixtures/tokenizer/
DIR/demo/check.json       see scripts/reference/demo_model.py: models/demo and its committed
                          fixtures checked against transformers and tokenizers (nothing to copy)
A part whose script or libraries are missing is skipped with a message. Exits 1 when a
check finds a difference.
"""
import argparse
import json
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "reference"))


def run_part(name, out, variants=None):
    try:
        if name == "model":
            from model import make_model_fixtures
            return make_model_fixtures(out, variants)
        if name == "demo":
            from demo_model import check_demo
            return check_demo(out)
        from tokenizer import make_tokenizer_fixtures
        return make_tokenizer_fixtures(out)
    except ImportError as error:
        print(f"skipping {name}: {error}", file=sys.stderr)
        return {"skipped": str(error)}
    except Exception as error:
        traceback.print_exc()
        return {"error": repr(error)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--only", choices=["model", "tokenizer", "demo"], help="make one part only")
    parser.add_argument("--variant", action="append", help="model variant to make (repeatable; default all)")
    args = parser.parse_args()
    parts = [args.only] if args.only else ["model", "tokenizer", "demo"]
    summary = {part: run_part(part, Path(args.out) / part, args.variant) for part in parts}
    print(json.dumps(summary, indent=2, default=str))
    if any(isinstance(result, dict) and result.get("ok") is False for result in summary.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
