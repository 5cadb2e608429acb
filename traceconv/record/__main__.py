"""``python -m traceconv.record merge SHARDS... -o OUT``: merge the shards of a recording."""

from __future__ import annotations

import argparse
import sys

from ..errors import TraceconvError, count


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m traceconv.record")
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("merge", help="merge recorded shards (files or folders) into one timeline")
    m.add_argument("inputs", nargs="+")
    m.add_argument("-o", "--output", required=True)
    args = ap.parse_args(argv)
    try:
        from .merge import merge
        t = merge(args.inputs, args.output)
    except TraceconvError as e:
        print(f"traceconv: error: {e}", file=sys.stderr)
        return 2
    files = t.meta.extra["record.merge"]["files"]
    print(f"{args.output}: {count(len(files), 'shard')}, {count(len(t.slices), 'slice')}, "
          f"{count(len(t.flows), 'flow')}")
    for w in t.diagnostics.warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
