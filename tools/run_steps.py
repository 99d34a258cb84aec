"""Run every step script in order and summarise its check against PyTorch.

    python tools/run_steps.py            # all steps
    python tools/run_steps.py 5 7 step09 # some steps

Each step runs as `python steps/stepNN.py` in its own process. A step passes when
it exits with status 0 and prints its closing line
"PyTorch check passed: <what was compared>". The exit status is non-zero if
any step fails.
"""
import os
import pathlib
import re
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from notebooks import step_paths  # noqa: E402

PASSED = re.compile(r"^PyTorch check passed: (.+)$", re.MULTILINE)
TITLE = re.compile(r"^# # Step \d+: (.+)$", re.MULTILINE)


def run(script):
    env = dict(os.environ, MPLBACKEND="Agg", TQDM_DISABLE="1", PYTHONUNBUFFERED="1")
    start = time.perf_counter()
    result = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    checked = PASSED.findall(result.stdout)
    ok = result.returncode == 0 and bool(checked)
    if not ok:
        why = "exit status %d" % result.returncode if result.returncode else "no 'PyTorch check passed:' line"
        checked = [f"FAILED ({why}): " + (result.stderr.strip().splitlines() or ["?"])[-1]]
    return ok, "; ".join(checked), seconds, result


def main():
    scripts = step_paths(sys.argv[1:])
    rows, failures = [], []
    for script in scripts:
        title = TITLE.search(script.read_text())
        ok, checked, seconds, result = run(script)
        rows.append((script.stem[4:], title.group(1) if title else "?", checked, "✓" if ok else "✗", seconds))
        print(f"step {rows[-1][0]}  {rows[-1][3]}  {seconds:5.1f} s  {rows[-1][1]}", flush=True)
        if not ok:
            failures.append((script, result))
    for script, result in failures:
        print(f"\n===== {script.relative_to(ROOT)} failed =====\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    print_table(rows)
    print(f"\n{len(rows) - len(failures)} of {len(rows)} steps checked against PyTorch")
    return 1 if failures else 0


def print_table(rows):
    width = max(len(r[1]) for r in rows)
    width = min(width, 48)
    print(f"\n{'step':4}  {'title':{width}}  ok  {'s':>5}  checked against PyTorch")
    for number, title, checked, mark, seconds in rows:
        title = title if len(title) <= width else title[: width - 1] + "…"
        print(f"{number:>4}  {title:{width}}  {mark}   {seconds:5.1f}  {checked}")


if __name__ == "__main__":
    sys.exit(main())
