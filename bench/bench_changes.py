"""What each speed change in the package saves: the code path it touches, timed before and after.

    python bench/bench_changes.py --before DIR   # DIR: a checkout of the package before the changes
    python bench/bench_changes.py --before DIR --quick

Each row times one small piece of work that a change in "How tinypytorch is made fast" (the book)
makes cheaper. The two versions of the package run in separate processes, one round each in
turn (before, after, before, ...), so that the machine's load falls on both alike; a row's time is
the best of its rounds. Written to bench/results/changes.md (bench/_out/ with --quick). The pieces
and their timing: speed_changes.py.
"""
import argparse
import json
import pathlib

import speed_changes
from writing import ROOT, output_folder, write_results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=pathlib.Path, help="a folder holding the package before the changes")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--round", action="store_true", help=argparse.SUPPRESS)  # one round, as JSON
    args = parser.parse_args(argv)
    if args.round:
        print(json.dumps(speed_changes.measure(args.quick)))
        return
    if args.before is None or not (args.before / "tinypytorch" / "__init__.py").exists():
        parser.error("--before must name a folder with the package before the changes (a tinypytorch/ inside)")
    best, spread = speed_changes.run(args.before, ROOT.parent, args.quick, 2 if args.quick else args.rounds)
    write_results(output_folder(None, args.quick), "changes", speed_changes.report(best, spread, args.quick))


if __name__ == "__main__":
    main()
