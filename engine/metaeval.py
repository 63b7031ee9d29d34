"""The meta-evaluation of metrics: which metric can be trusted, over a labelled pool of checkpoints.

Why: OpenUnlearning (Dorna et al., arXiv 2506.12618, Sec. 4) rates unlearning metrics by
*faithfulness* (does the metric separate checkpoints that know the forget set from ones that
never learned it?) and *robustness* (does it stay put when an attack on the model brings the
knowledge back?). Both read only the runs' published numbers, so a pool evaluated by
``evaldag run`` (a sweep over its checkpoints, every intermediate cached) is meta-evaluated
here without a model; adding a metric to the pool's runs costs only that metric's requests.

* Faithfulness: per metric, the ROC AUC of "knows" against "does not know" over models, one
  value per model (its headline number in its declared knowledge form, ``knowledge.py``), so
  the direction is fixed before the data are seen: never ``max(AUC, 1 - AUC)``. Ties count
  one half (the Mann-Whitney form, equal to ``sklearn.metrics.roc_auc_score``). The interval
  is a percentile bootstrap over models, each class resampled on its own
  (``uncertainty.interval``). Below ``MIN_PER_CLASS`` models in a class the metric is refused;
  below ``SMALL_PER_CLASS`` it is flagged.
* Robustness: over the pool's unlearned checkpoints (each a plain run with its attacked runs,
  ``robustness_report.py``), the mean R and mean Q per attack with bootstrap intervals over
  models, and HM(mean R, mean Q) as OpenUnlearning and the unlearning-depth-score project
  aggregate, after OpenUnlearning's filtering step (Sec. 4.2.1), both named parameters:
  ``threshold_filter`` drops a checkpoint whose metric still indicates knowledge before the
  attack (its knowledge value above the threshold that best separates the pool's two classes,
  by accuracy, midpoints between sorted values as that project computes it), and
  ``utility_drop`` (off unless given, 0.2 in the paper) drops a checkpoint whose model utility
  fell below ``(1 - utility_drop)`` times the reference model's.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .export import ExportError, run_folders
from .robustness import DEFAULT_FORMULA, MIN_DELTA, formula, harmonic
from .robustness_report import RunValues, attacked_folders, control_folder, read_run, score_attacks
from .uncertainty import Sample, interval

FILE = "METAEVAL.json"
#: fewer models than this in a class: the metric's faithfulness is refused
MIN_PER_CLASS = 2
#: fewer than this: computed, and flagged as a small pool (wide interval)
SMALL_PER_CLASS = 10
KNOWS, NOT = "knows", "does-not-know"
UTILITY = "model_utility"


def auc_ties_half(pos: Sequence[float], neg: Sequence[float]) -> float:
    """P(a "knows" model scores above a "does not know" one) + P(tie) / 2."""
    p = np.asarray(pos, dtype=np.float64)[:, None]
    n = np.asarray(neg, dtype=np.float64)[None, :]
    return float(((p > n).sum() + 0.5 * (p == n).sum()) / (p.size * n.size))


def best_threshold(pos: Sequence[float], neg: Sequence[float]) -> float | None:
    """The midpoint between sorted pool values whose rule "knows when >= t" is most accurate
    (the first best from below); None when the pool has one distinct value."""
    values = sorted(set(pos) | set(neg))
    best, best_acc = None, -1.0
    for lo, hi in zip(values, values[1:]):
        t = (lo + hi) / 2
        acc = (sum(v >= t for v in pos) + sum(v < t for v in neg)) / (len(pos) + len(neg))
        if acc > best_acc:
            best, best_acc = t, acc
    return best


def _ci(values: Sequence[float], n_resamples: int, seed: int, level: float, stat: Any = None) -> dict[str, Any]:
    arr = np.asarray(values, dtype=np.float64)
    s = Sample(("models",), (tuple(str(i) for i in range(len(arr))),), (arr,), stat or (lambda x: float(np.mean(x))))
    iv = interval(s, n_resamples, seed, level)
    return {"value": iv["value"], "interval": iv["percentile"], "n_models": len(arr), **({"reason": iv["reason"]} if iv.get("reason") else {})}


def _form(run: RunValues, key: tuple[str, str]) -> Any:
    bench = run.benches.get(key[0].upper())
    try:
        return bench.knowledge(key[1]) if bench is not None else None
    except Exception:  # noqa: BLE001 - a plugin's hook that fails declares nothing usable
        return None


def faithfulness(knows: list[RunValues], not_knows: list[RunValues], n_resamples: int = 1000, seed: int = 0,
                 level: float = 0.95, min_per_class: int = MIN_PER_CLASS) -> dict[str, dict[str, Any]]:
    """Per metric (``GROUP/metric``) of the pool's runs: the AUC, its interval, the class sizes,
    the threshold that best separates the classes; or why it is refused."""
    keys = list(dict.fromkeys(k for r in knows + not_knows for k in r.values))
    out: dict[str, dict[str, Any]] = {}
    for key in keys:
        name = f"{key[0]}/{key[1]}"
        form = next((f for f in (_form(r, key) for r in knows + not_knows) if f is not None), None)
        if form is None:
            out[name] = {"auc": None, "refused": f"{key[1]}: declares no knowledge form, so its direction is not fixed in advance"}
            continue
        pos = [v for v in (form(r.values.get(key)) for r in knows) if v is not None]
        neg = [v for v in (form(r.values.get(key)) for r in not_knows) if v is not None]
        row: dict[str, Any] = {"knowledge": form.as_dict(), "n": {KNOWS: len(pos), NOT: len(neg)},
                               "missing": {KNOWS: len(knows) - len(pos), NOT: len(not_knows) - len(neg)}}
        if min(len(pos), len(neg)) < max(1, min_per_class):  # an AUC needs one model of each class at least
            out[name] = {**row, "auc": None,
                         "refused": f"{key[1]}: {len(pos)} knows and {len(neg)} does-not-know models with a value; "
                                    f"faithfulness needs {min_per_class} or more per class"}
            continue
        s = Sample((KNOWS, NOT), (tuple(map(str, range(len(pos)))), tuple(map(str, range(len(neg))))),
                   (np.asarray(pos), np.asarray(neg)), auc_ties_half)
        iv = interval(s, n_resamples, seed, level)
        row.update(auc=iv["value"], interval=iv["percentile"], threshold=best_threshold(pos, neg))
        if iv.get("reason"):
            row["reason"] = iv["reason"]
        if min(len(pos), len(neg)) < SMALL_PER_CLASS:
            row["flag"] = f"small pool: fewer than {SMALL_PER_CLASS} models in a class; read the interval, not the point"
        out[name] = row
    return out


def _kept(unlearned: list[RunValues], key: tuple[str, str], threshold: float | None, utility_min: float | None) -> tuple[list[int], dict[str, list[str]]]:
    """Which unlearned checkpoints the filtering step keeps for metric ``key``, and why the others go."""
    keep, dropped = [], {"still_knows": [], "utility": []}
    for i, run in enumerate(unlearned):
        form = _form(run, key)
        m = form(run.values.get(key)) if form is not None else None
        if utility_min is not None:
            u = run.values.get((key[0], UTILITY))
            if u is None or u < utility_min:
                dropped["utility"].append(str(run.folder))
                continue
        if threshold is not None and m is not None and m > threshold:
            dropped["still_knows"].append(str(run.folder))
            continue
        keep.append(i)
    return keep, dropped


def _hm_interval(attacks: list[dict[str, dict]], keep: list[int], name: str, ra: str, qa: str,
                 n_resamples: int, seed: int, level: float) -> list[float] | None:
    """The bootstrap interval of HM(mean R, mean Q) over the kept models: each resample draws
    models, and R and Q are averaged over the drawn models that have them."""
    def value(i: int, a: str, score: str) -> float:
        cell = (attacks[i].get(a) or {}).get("metrics", {}).get(name) or {}
        v = (cell.get(score) or {}).get("value")
        return math.nan if v is None else float(v)

    rq = np.array([[value(i, ra, "R"), value(i, qa, "Q")] for i in keep], dtype=np.float64)

    def stat(x: np.ndarray) -> float:
        r, q = x[:, 0][~np.isnan(x[:, 0])], x[:, 1][~np.isnan(x[:, 1])]
        if not r.size or not q.size:
            return math.nan
        v = harmonic(float(r.mean()), float(q.mean())).value
        return math.nan if v is None else v

    s = Sample(("models",), (tuple(map(str, range(len(rq)))),), (rq,), stat)
    return interval(s, n_resamples, seed, level)["percentile"]


def pool_robustness(unlearned: list[RunValues], attacks: list[dict[str, dict]], faith: dict[str, dict],
                    threshold_filter: bool = True, utility_drop: float | None = None, utility_reference: RunValues | None = None,
                    n_resamples: int = 1000, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """Mean R and Q per attack over the kept checkpoints, HM of the means per (relearn, quantize)
    pair; ``attacks[i]`` is ``score_attack``'s output per attack name for ``unlearned[i]``."""
    out: dict[str, Any] = {}
    keys = list(dict.fromkeys(k for r in unlearned for k in r.values))
    for key in keys:
        name = f"{key[0]}/{key[1]}"
        threshold = (faith.get(name) or {}).get("threshold") if threshold_filter else None
        utility_min = None
        if utility_drop is not None and utility_reference is not None:
            ref = utility_reference.values.get((key[0], UTILITY))
            utility_min = None if ref is None else (1.0 - utility_drop) * ref
        keep, dropped = _kept(unlearned, key, threshold, utility_min)
        row: dict[str, Any] = {"threshold": threshold, "utility_min": utility_min, "kept": len(keep),
                               "dropped": {k: v for k, v in dropped.items() if v}, "attacks": {}}
        names = list(dict.fromkeys(a for i in keep for a in attacks[i]))
        for a in names:
            cells = [attacks[i][a]["metrics"].get(name) for i in keep if a in attacks[i]]
            score = next((attacks[i][a]["score"] for i in keep if a in attacks[i]), None)
            if score is None:
                continue
            refused = next((c[score]["refused"] for c in cells if c and "refused" in (c.get(score) or {})), None)
            if refused:
                row["attacks"][a] = {"score": score, "refused": refused}
                continue
            vals = [c[score]["value"] for c in cells if c and (c.get(score) or {}).get("value") is not None]
            row["attacks"][a] = {"score": score, "undefined": len(cells) - len(vals),
                                 **(_ci(vals, n_resamples, seed, level) if vals else {"value": None, "n_models": 0})}
        hm = []
        for ra, r in row["attacks"].items():
            for qa, q in row["attacks"].items():
                if r.get("score") == "R" and q.get("score") == "Q":
                    pair = {"relearn": ra, "quantize": qa, **harmonic(r.get("value"), q.get("value")).as_dict()}
                    if pair["value"] is not None:
                        pair["interval"] = _hm_interval(attacks, keep, name, ra, qa, n_resamples, seed, level)
                    hm.append(pair)
        row["hm"] = hm
        out[name] = row
    return out


def _runs(paths: Sequence[str]) -> list[RunValues]:
    return [read_run(folder) for p in paths for _, folder in run_folders([p])]


def read_labels(path: str) -> tuple[list[str], list[str]]:
    """A labels file: one ``LABEL PATH`` per line (``knows`` or ``does-not-know``; ``#`` comments)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ExportError(f"{path}: cannot be read ({type(e).__name__}: {e})") from None
    knows, nots = [], []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        label, _, folder = line.partition(" ")
        if label not in (KNOWS, NOT) or not folder.strip():
            raise ExportError(f"{path}:{n}: expected 'knows PATH' or 'does-not-know PATH', got {line!r}")
        (knows if label == KNOWS else nots).append(folder.strip())
    return knows, nots


def metaeval(knows: Sequence[str], not_knows: Sequence[str], unlearned: Sequence[str] = (), retain: str | None = None,
             formula_name: str = DEFAULT_FORMULA, threshold_filter: bool = True, utility_drop: float | None = None,
             utility_reference: str | None = None, min_per_class: int = MIN_PER_CLASS, min_delta: float = MIN_DELTA,
             n_resamples: int = 1000, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """METAEVAL.json's content from run folders (each path a run folder or a sweep's OUT)."""
    f = formula(formula_name)
    if utility_drop is not None and utility_reference is None:
        raise ExportError("--utility-drop needs --utility-reference DIR (the run whose model utility the drop is measured from)")
    pos, neg = _runs(knows), _runs(not_knows)
    both = sorted({r.folder.resolve() for r in pos} & {r.folder.resolve() for r in neg})
    if both:  # a model cannot be in both classes; a sweep's OUT given to one side may hold the other's run
        raise ExportError(f"{both[0]} is in both classes (--knows and --not-knows)"
                          + (f", and {len(both) - 1} more" if len(both) > 1 else ""))
    faith = faithfulness(pos, neg, n_resamples, seed, level, min_per_class)
    out: dict[str, Any] = {
        "pool": {KNOWS: [str(r.folder) for r in pos], NOT: [str(r.folder) for r in neg]},
        "faithfulness_formula": "AUC of knows vs does-not-know over models, in each metric's declared knowledge form "
                                "(never max(AUC, 1 - AUC)), ties 1/2; percentile bootstrap over models, each class "
                                "resampled on its own; OpenUnlearning, arXiv 2506.12618, Sec. 4",
        "min_per_class": min_per_class, "small_per_class": SMALL_PER_CLASS,
        "bootstrap": {"n_resamples": n_resamples, "seed": seed, "confidence_level": level},
        "faithfulness": faith,
    }
    if unlearned:
        runs = [read_run(p) for p in unlearned]
        scored, controls = [], []
        for p, run in zip(unlearned, runs):
            ctl = retain or control_folder(p)  # one named control for the pool, else each run's own OUT/control/
            controls.append(str(ctl) if ctl else None)
            rb = read_run(ctl) if ctl else None
            scored.append(score_attacks(run, attacked_folders(p), rb, attacked_folders(ctl) if ctl else {}, f, min_delta,
                                        n_resamples, seed, level))
        ref = read_run(utility_reference) if utility_reference else None
        out["robustness_formula"] = f.as_dict()
        out["filtering"] = {"threshold_filter": threshold_filter, "utility_drop": utility_drop,
                            "utility_reference": str(ref.folder) if ref else None,
                            "rule": "OpenUnlearning Sec. 4.2.1: drop a checkpoint whose knowledge value before the attack is above "
                                    "the threshold that best separates the pool (accuracy); optionally one whose model utility "
                                    "is below (1 - utility_drop) x the reference's"}
        out["unlearned"] = [str(r.folder) for r in runs]
        out["controls"] = controls
        out["robustness"] = pool_robustness(runs, scored, faith, threshold_filter, utility_drop, ref, n_resamples, seed, level)
    return out


def _fmt(v: Any) -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.3f}"


def table_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per metric: faithfulness AUC and interval, and per attack its mean score."""
    rows = []
    for name, f in data["faithfulness"].items():
        ci = f.get("interval") or [None, None]
        row = {"metric": name, "auc": f.get("auc"), "lo": ci[0], "hi": ci[1], "note": f.get("refused") or f.get("flag") or ""}
        rob = (data.get("robustness") or {}).get(name) or {}
        row["robustness"] = {a: v.get("value") for a, v in rob.get("attacks", {}).items()}
        row["robustness_interval"] = {a: v.get("interval") for a, v in rob.get("attacks", {}).items()}
        row["hm"] = [h.get("value") for h in rob.get("hm", [])]
        row["hm_interval"] = [h.get("interval") for h in rob.get("hm", [])]
        rows.append(row)
    return rows


def _with_interval(v: Any, ci: Sequence[float] | None) -> str:
    return _fmt(v) + (f" [{_fmt(ci[0])}, {_fmt(ci[1])}]" if v is not None and ci else "")


def render(data: dict[str, Any]) -> str:
    """The terminal table (and the report's): faithfulness with its interval, per attack the mean
    robustness score over the kept models with its interval, and HM of the means with its own."""
    pool = data["pool"]
    lines = [f"meta-evaluation: {len(pool[KNOWS])} knows, {len(pool[NOT])} does-not-know models"]
    rows = table_rows(data)
    w = max([len(r["metric"]) for r in rows] + [6])
    attacks = list(dict.fromkeys(a for r in rows for a in r["robustness"]))
    width = {a: max([len(a), 21]) for a in attacks}  # "0.123 [0.045, 0.678]": the mean over models and its interval
    lines.append(f"{'metric':<{w}}  {'AUC':>6}  {'interval':>15}  " + "  ".join(f"{a:>{width[a]}}" for a in attacks)
                 + ("  HM" if attacks else "") + "  note")
    for r in rows:
        span = f"[{_fmt(r['lo'])}, {_fmt(r['hi'])}]" if r["lo"] is not None else "-"
        cells = "  ".join(f"{_with_interval(r['robustness'].get(a), r['robustness_interval'].get(a)):>{width[a]}}" for a in attacks)
        hm = ("  " + ", ".join(_with_interval(h, ci) for h, ci in zip(r["hm"], r["hm_interval"]))) if attacks else ""
        lines.append(f"{r['metric']:<{w}}  {_fmt(r['auc']):>6}  {span:>15}  {cells}{hm}  {r['note']}")
    return "\n".join(lines) + "\n"
