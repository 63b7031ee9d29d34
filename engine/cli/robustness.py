"""``evaldag robustness OUT``: ROBUSTNESS.json from a plain run's folder and its attacked runs.

Why a command of its own: the scores need only the published numbers of the runs before and
after each attack (``engine/robustness_report.py``), so they can be recomputed with another
formula or noise rule without touching a model. ``OUT/attacks/<attack>/`` are found by
themselves; ``--attacked NAME=DIR`` names others. A relearning attack is scored against the
retain model relearned by the same recipe: ``--retain OUT_R`` (its plain run, with its own
``attacks/<attack>/`` under the same names) or ``--retain-attacked NAME=DIR``; without them,
``OUT/control/`` (the retain model's runs that ``evaldag run --retain-model ... --attack relearn``
writes) when it is there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..export import ExportError
from ..outfolder import is_our_link
from ..report import write_report_html
from ..robustness import DEFAULT_FORMULA, FORMULAS, MIN_DELTA, FormulaError
from ..robustness_report import FILE, attacked_folders, control_folder, render, robustness, write, write_into_run


def _pairs(values: list[str] | None, flag: str) -> dict[str, str]:
    """NAME=DIR pairs; an attack's folder name holds ``=`` itself (``relearn_lr=1e-3``), so the split is at
    the first ``=`` after which an existing folder is named (else the first ``=``)."""
    out = {}
    for v in values or []:
        cuts = [i for i, c in enumerate(v) if c == "="]
        at = next((i for i in cuts if Path(v[i + 1:]).is_dir()), cuts[0] if cuts else -1)
        name, sep, folder = (v[:at], "=", v[at + 1:]) if at >= 0 else (v, "", "")
        if not sep or not name or not folder:
            raise ExportError(f"{flag} {v!r}: expected NAME=DIR (an attack's name and its run folder)")
        out[name] = folder
    return out


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    c = sub.add_parser("robustness", help="each metric before and after each attack on the model: R, Q, HM (ROBUSTNESS.json)")
    c.add_argument("out", metavar="OUT", help="the plain run's folder (its attacked runs under OUT/attacks/<attack>/)")
    c.add_argument("--attacked", action="append", metavar="NAME=DIR", help="an attacked run's folder (repeatable)")
    c.add_argument("--retain", metavar="OUT_R", help="the retain model's plain run (relearning's control), its attacked runs under OUT_R/attacks/ "
                        "(default: OUT/control/ when the run wrote it)")
    c.add_argument("--retain-attacked", action="append", metavar="NAME=DIR", help="the retain model's run after attack NAME (repeatable)")
    c.add_argument("--formula", default=DEFAULT_FORMULA, help=f"the robustness formula: {', '.join(FORMULAS)} (default {DEFAULT_FORMULA})")
    c.add_argument("--min-delta", type=float, default=MIN_DELTA, metavar="X",
                   help=f"R is undefined below this |change| of the unlearned model (default {MIN_DELTA:g}; item-level noise too)")
    c.add_argument("--bootstrap-resamples", "--bootstrap-cycles", "--bootstrap-iters", dest="bootstrap_resamples", type=int,
                   default=1000, metavar="N", help="paired bootstrap resamples of each change (default 1000; 0: no item-level test)")
    c.add_argument("--seed", type=int, default=0, help="the paired bootstrap's seed (default 0)")
    c.add_argument("--to", default=None, metavar="FILE", help=f"where to write (default OUT/{FILE})")
    return c


def cmd(args: argparse.Namespace) -> int:
    try:
        attacks = {**attacked_folders(args.out), **_pairs(args.attacked, "--attacked")}
        retain_dir = args.retain or control_folder(args.out)  # the run's own control unless another is named
        retain = {**(attacked_folders(retain_dir) if retain_dir else {}), **_pairs(args.retain_attacked, "--retain-attacked")}
        data = robustness(args.out, attacks, retain_dir, retain, args.formula, args.min_delta, args.bootstrap_resamples, args.seed)
        sys.stdout.write(render(data))
        path = write(Path(args.to), data) if args.to else write_into_run(args.out, data)
        print(f"wrote {path}")
        page = Path(args.out) / "report.html"
        if not args.to and is_our_link(page):  # the run's own report gets its robustness section
            write_report_html([args.out], page)
            print(f"wrote {page} (its robustness section)")
    except (ExportError, FormulaError, OSError) as e:
        print(f"evaldag: error: {e}", file=sys.stderr)
        return 2
    return 0
