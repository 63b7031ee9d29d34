"""``evaldag metaeval``: which metric can be trusted, over a labelled pool of run folders (METAEVAL.json).

Why from folders: the pool's checkpoints are evaluated by ``evaldag run`` (a sweep, every
intermediate cached, so one more metric costs only its own requests), and the
meta-evaluation (``engine/metaeval.py``) reads their published numbers. The pool is named by
``--knows``/``--not-knows`` (run folders or sweeps' OUT folders, repeatable) or a ``--labels``
file; ``--unlearned`` names the checkpoints whose robustness is scored from their attacked
runs (``OUT/attacks/<attack>/``), with ``--retain`` as relearning's control.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..cache.files import atomic_write
from ..export import ExportError
from ..robustness_views import metaeval_page
from ..metaeval import FILE, MIN_PER_CLASS, metaeval, read_labels, render
from ..robustness import DEFAULT_FORMULA, FORMULAS, MIN_DELTA, FormulaError
from ..robustness_report import write


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    c = sub.add_parser("metaeval", help="faithfulness AUC and robustness of each metric over a labelled pool (METAEVAL.json)")
    c.add_argument("--knows", nargs="+", action="extend", default=[], metavar="DIR", help="runs of checkpoints that know the forget set")
    c.add_argument("--not-knows", nargs="+", action="extend", default=[], metavar="DIR", help="runs of checkpoints that never learned it")
    c.add_argument("--labels", metavar="FILE", help="'knows PATH' / 'does-not-know PATH' lines (instead of, or beside, the lists)")
    c.add_argument("--unlearned", nargs="+", action="extend", default=[], metavar="DIR",
                   help="unlearned checkpoints' runs, each with its attacked runs under DIR/attacks/<attack>/")
    c.add_argument("--retain", metavar="OUT_R", help="the retain model's run (relearning's control), its attacked runs under OUT_R/attacks/ (default: each unlearned run's own OUT/control/)")
    c.add_argument("--formula", default=DEFAULT_FORMULA, help=f"the robustness formula: {', '.join(FORMULAS)} (default {DEFAULT_FORMULA})")
    c.add_argument("--no-threshold-filter", dest="threshold_filter", action="store_false",
                   help="keep unlearned checkpoints whose metric still indicates knowledge (default: drop them, as OpenUnlearning)")
    c.add_argument("--utility-drop", type=float, default=None, metavar="F",
                   help="also drop checkpoints whose model utility fell by more than F of --utility-reference's (OpenUnlearning: 0.2)")
    c.add_argument("--utility-reference", metavar="DIR", help="the run whose model utility --utility-drop is measured from")
    c.add_argument("--min-per-class", type=int, default=MIN_PER_CLASS, metavar="N", help=f"refuse a metric's AUC below N models per class (default {MIN_PER_CLASS})")
    c.add_argument("--min-delta", type=float, default=MIN_DELTA, metavar="X", help=f"R is undefined below this |change| (default {MIN_DELTA:g})")
    c.add_argument("--bootstrap-resamples", "--bootstrap-cycles", "--bootstrap-iters", dest="bootstrap_resamples", type=int,
                   default=1000, metavar="N", help="bootstrap resamples over models (default 1000)")
    c.add_argument("--seed", type=int, default=0, help="the bootstrap's seed (default 0)")
    c.add_argument("--to", default=FILE, metavar="FILE", help=f"where to write (default ./{FILE})")
    return c


def cmd(args: argparse.Namespace) -> int:
    try:
        knows, nots = list(args.knows), list(args.not_knows)
        if args.labels:
            k, n = read_labels(args.labels)
            knows, nots = knows + k, nots + n
        if not knows or not nots:
            raise ExportError("a pool needs both classes: --knows DIR... and --not-knows DIR... (or --labels FILE)")
        data = metaeval(knows, nots, args.unlearned, args.retain, args.formula, args.threshold_filter, args.utility_drop,
                        args.utility_reference, args.min_per_class, args.min_delta, args.bootstrap_resamples, args.seed)
        sys.stdout.write(render(data))
        print(f"wrote {write(Path(args.to), data)}")
        html = Path(args.to).with_suffix(".html")
        atomic_write(html, metaeval_page(data).encode("utf-8"))
        print(f"wrote {html}")
    except (ExportError, FormulaError, OSError) as e:
        print(f"evaldag: error: {e}", file=sys.stderr)
        return 2
    return 0
