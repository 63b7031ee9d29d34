"""Code and task inputs the cache cannot see: a user's metric file and an lm-evaluation-harness task.

One row per case, each run as a user runs it (``evaldag run tofu --add-metric ...``,
``evaldag run lmeval --tasks ... --include-path ...``) with the cases of
``tests/engine/test_added_metric_trust.py`` and ``tests/benchmarks/test_lmeval_inputs.py``:

* an edit the stored value depends on -- a helper of an ``--add-metric`` file (a ``@metric``,
  an open-unlearning handler), a data file a ``data_files`` glob matches, a file of a local
  dataset folder, the ``!function`` module of an included YAML in another folder, the
  included YAML itself: run, edit, rerun on the same cache, compare with a fresh cache
  (recovered when equal; wrong numbers when the stored value comes back);
* input to refuse: a metric named like TOFU's own, ``sys.exit(0)`` while the file is
  imported, a task YAML that does not parse (exit 2, one line naming the culprit).

Measured (``--only added_code``, 10 trials): with the code before these checks, 1 recovered
(the included YAML: its keys were already in the digest), 7 wrong numbers, 2 unclear
("unknown task" for a file that does not parse); with them, 6 recovered, 4 failed clearly.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _tests(rel: str):
    if str(ROOT) not in sys.path:  # the test modules import tests.* helpers
        sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location(f"_fault_{Path(rel).stem}", ROOT / rel)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(campaign) -> None:
    added = _tests("tests/engine/test_added_metric_trust.py")
    data = added.trimmed(campaign.work / "added-code-tofu")
    for label, case in (("--add-metric: a helper of a @metric edited", added.metric_file_case),
                        ("--add-metric: a helper of an open-unlearning handler edited", added.handler_case)):
        d = campaign.trial_dir()
        args, edit, value, _ = case(d)
        first, again, fresh = added.edited_run(d, data, args, edit)
        want = value(d / "fresh") if fresh.returncode == 0 else None
        campaign.classify(label, again, value(d / "after") if again.returncode == 0 else None, want,
                          note="" if first.returncode == 0 else f"the first run failed: {first.stderr[-160:]}")

    d = campaign.trial_dir()
    (d / "clash.py").write_text(added.CLASH)
    proc = added.tofu(data, d / "out", d / "cache", "--add-metric", str(d / "clash.py"))
    campaign._refused("--add-metric: a metric named like TOFU's", proc, d / "out", ["forget_Q_A_Prob", "TOFU", str(d / "clash.py")])

    d = campaign.trial_dir()
    (d / "script.py").write_text("import sys\n\nsys.exit(0)\n")
    proc = added.tofu(data, d / "out", d / "cache", "--add-metric", str(d / "script.py"))
    campaign._refused("--add-metric: sys.exit(0) while imported", proc, d / "out", [str(d / "script.py"), "sys.exit(0)"])

    lm = _tests("tests/benchmarks/test_lmeval_inputs.py")
    for label, case in (("lmeval: a file a data_files glob matches edited", lm.glob_case),
                        ("lmeval: a file of a local dataset folder edited", lm.folder_case),
                        ("lmeval: the !function module of an included YAML edited", lm.function_case),
                        ("lmeval: an included YAML of another folder edited", lm.include_case)):
        d = campaign.trial_dir()
        task, include, edit = case(d)
        (first, again, _), (_, got, want) = lm.edited_run(d, task, include, edit)
        campaign.classify(label, again, got, want,
                          note="" if first.returncode == 0 else f"the first run failed: {first.stderr[-160:]}")

    for broken in sorted(lm.BROKEN):
        d = campaign.trial_dir()
        text, line = lm.BROKEN[broken]
        tasks = lm.broken_case(d, text)
        proc, _ = lm.lmeval("fx_bad", tasks, d / "out", d / "cache")
        campaign._refused("lmeval: a task YAML that does not parse", proc, d / "out",
                          [f"{tasks / 'fx_bad.yaml'}, line {line}"])
