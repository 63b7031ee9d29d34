"""Per-metric wall seconds of one run_ou.sh run, from open-unlearning's log: python metric_times.py OUT_DIR

A metric's time runs from the first "Evaluating" line after the previous result to its
"Result for metric" line (its pre-computes included).
"""

import datetime
import pathlib
import re
import sys

out = pathlib.Path(sys.argv[1])
lines = re.sub(r"\x1b\[[0-9;]*m", "", (out / "stdout.log").read_text()).splitlines()
start = first = last = None
for line in lines:
    m = re.match(r"\[(\S+ \S+)\]\[(\w+)\]\[\w+\] - (.*)", line)
    if not m:
        continue
    t, msg = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f"), m.group(3)
    first, last = first or t, t
    if start is None and msg.startswith("Evaluating"):
        start = t
    if msg.startswith("Result for metric") and start is not None:
        print(f"{msg.split()[3].rstrip(':'):24s} {(t - start).total_seconds():8.2f} s")
        start = None
if first and last:
    print(f"{'logged span':24s} {(last - first).total_seconds():8.2f} s (evaluator set up .. last result)")
wall = out / "wall_s.txt"
if wall.exists():
    print(f"{'process wall':24s} {float(wall.read_text()):8.2f} s (imports, hydra, model load included)")
