"""``ROBUSTNESS.json``: every metric before and after each attack on the model, its change item
by item, and its robustness score (``robustness.py``), from run folders alone.

Why from folders: an attacked model's run is a plain run (``OUT/attacks/<attack>/`` holds
what ``evaldag run`` writes for it), so the scores need nothing but the published numbers
and per-item values: no cache, no model. ``quantize...`` attacks get Q, ``relearn...``
attacks get R against the retain model relearned by the same recipe (its own plain and
attacked runs: ``OUT/control/`` and ``OUT/control/attacks/<attack>/`` when the run wrote them,
or another folder named), any other attack its before/after and change only. Each metric is scored in
its declared knowledge form (``knowledge.py``); one without a form (or a signed form where Q
needs a ratio) is refused by name, and its before/after are still written.

Item-level noise: where the metric has items (``Benchmark.item_sample``), the change is tested
with ``uncertainty.paired`` (paired bootstrap interval of after - before, paired permutation
test) on the raw values; R is "undefined" when the unlearned model's own change is inside that
noise, as it is below ``min_delta``.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cache.files import atomic_write
from .outfolder import is_our_link, link_target, set_folder
from .export import ExportError, _read, benchmarks_by_group, folder_rows, run_folders
from .robustness import DEFAULT_FORMULA, MIN_DELTA, Formula, Score, formula, harmonic, refusal
from .uncertainty import Sample, paired

FILE = "ROBUSTNESS.json"
ATTACKS = "attacks"  # OUT/attacks/<attack>/: each attacked model's own run folder
CONTROL = "control"  # OUT/control/: the retain model's own run (its relearned runs under its attacks/), R's control


def control_folder(out: str | Path) -> Path | None:
    """``OUT/control/`` when the run wrote its retain model's own run there, else None."""
    d = Path(out) / CONTROL
    return d if (d / "run.json").is_file() else None


def attack_kind(name: str) -> str | None:
    """``quantize`` (scored by Q), ``relearn`` (by R) or None (before/after only), from the
    attack's name (``quantize:nf4``, ``relearn:split=forget``; a folder may spell ``:`` as ``-``)."""
    head = name.split(":", 1)[0].split("-", 1)[0].split("_", 1)[0].lower()
    return {"quantize": "quantize", "quant": "quantize", "relearn": "relearn"}.get(head)


@dataclass
class RunValues:
    """One run folder's headline values, its EVAL files (read on demand) and its benchmarks."""

    folder: Path
    values: dict[tuple[str, str], float | None]
    benches: dict[str, Any]
    evals: dict[str, Any] = field(default_factory=dict)

    def eval_of(self, group: str) -> Any:
        if group not in self.evals:
            f = self.folder / f"{group}_EVAL.json"
            self.evals[group] = _read(f) if f.is_file() else {}
        return self.evals[group]


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def read_run(path: str | Path) -> RunValues:
    """A run folder (one run: a sweep's OUT is refused, naming its first runs)."""
    runs = run_folders([path])
    if len(runs) != 1:
        raise ExportError(f"{path}: holds {len(runs)} runs (a sweep's folder?); name one of them: "
                          + ", ".join(str(d) for _, d in runs[:3]))
    name, folder = runs[0]
    values = {(r["benchmark"], r["metric"]): _num(r["value"]) for r in folder_rows(name, folder)}
    return RunValues(folder, values, benchmarks_by_group(folder))


def attacked_folders(out: str | Path) -> dict[str, Path]:
    """``OUT/attacks/<attack>/`` run folders, by attack name, in name order."""
    d = Path(out) / ATTACKS
    if not d.is_dir():
        return {}
    return {p.name: p for p in sorted(d.iterdir()) if p.is_dir() and (p / "run.json").exists()}


def scored_indices(run: RunValues) -> list[int] | None:
    """The split's rows a run scored when a model attack scored a subset of it (a disjoint
    relearn: the half it did not train on), as ``run.json`` records them; None: every row.
    Only that split's metrics are scored in part: a metric whose items are the plain run's
    own (another split's) is paired as it is."""
    try:
        meta = json.loads((run.folder / "run.json").read_text())
        got = meta["provenance"]["resources"]["model"]["derived"]["transform"].get("scored_indices")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return [int(i) for i in got] if isinstance(got, list) else None


def _as_rows(sample: Sample, rows: list[int]) -> Sample | None:
    """A subset run's items keyed by their rows in the whole split (its EVAL numbers them 0..n-1);
    None where that cannot be told (more than one stratum, or another count)."""
    if len(sample.names) != 1 or len(sample.keys[0]) != len(rows):
        return None
    return Sample(sample.names, (tuple(str(rows[int(k)]) for k in sample.keys[0]),), sample.values, sample.stat, sample.notes)


def item_change(a: RunValues, b: RunValues, group: str, metric: str, n_resamples: int, seed: int,
                level: float) -> dict[str, Any] | None:
    """The paired test of B - A on the items both runs scored (None: the metric has no items)."""
    bench = a.benches.get(group.upper()) or b.benches.get(group.upper())
    if bench is None or n_resamples <= 0:
        return None
    ea, eb = a.eval_of(group), b.eval_of(group)
    sa = bench.item_sample(metric, ea) if isinstance(ea, dict) else None
    sb = bench.item_sample(metric, eb) if isinstance(eb, dict) else None
    if sa is None or sb is None:
        return None
    rows = scored_indices(b)
    if rows is not None and (sb.names, sb.keys) != (sa.names, sa.keys):  # the same items: another split, scored whole
        sb = _as_rows(sb, rows)
        if sb is None:
            return {"verdict": NOT_PAIRED}
    try:
        return paired(sa, sb, n_resamples, seed, level)
    except ValueError as e:
        return {"verdict": f"no test ({e})"}


NOT_PAIRED = ("not comparable: the attacked run scored a subset of one split (a disjoint relearn) and this metric "
              "has no single stratum of items to pair by row")


def _noise(change: dict[str, Any] | None) -> str | None:
    """Why a change is inside the item-level noise (the paired test's words), or None."""
    if not change or change.get("verdict") != "inside the noise":
        return None
    ci = change.get("percentile")
    span = f"[{ci[0]:+.4g}, {ci[1]:+.4g}]" if ci else "-"
    return (f"paired {100 * change.get('confidence_level', 0.95):.0f}% interval {span} over "
            f"{sum((change.get('n_items') or {}).values())} items, permutation p = {change.get('p_value'):.3g}")


def _knowledge(bench: Any, metric: str) -> Any:
    try:
        return bench.knowledge(metric) if bench is not None else None
    except Exception:  # noqa: BLE001 - a plugin's hook that fails declares nothing usable
        return None


def score_attack(name: str, before: RunValues, after: RunValues, f: Formula, retain_before: RunValues | None = None,
                 retain_after: RunValues | None = None, min_delta: float = MIN_DELTA, n_resamples: int = 1000,
                 seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """One attack: per metric of the run before it, the values, the change and the score."""
    kind = attack_kind(name)
    score = {"quantize": "Q", "relearn": "R"}.get(kind or "")
    out: dict[str, Any] = {"kind": kind, "score": score, "folder": str(after.folder), "metrics": {}}
    control = retain_before is not None and retain_after is not None
    if kind == "relearn":
        out["retain_folders"] = [str(retain_before.folder), str(retain_after.folder)] if control else None
    subset = scored_indices(after) is not None  # the attacked run scored part of a split (a disjoint relearn)
    for (group, metric), x in before.values.items():
        bench = before.benches.get(group.upper())
        form = _knowledge(bench, metric)
        y = after.values.get((group, metric))
        change = item_change(before, after, group, metric, n_resamples, seed, level)
        row: dict[str, Any] = {"benchmark": group, "metric": metric, "before": x, "after": y,
                               "knowledge": form.as_dict() if form is not None else None}
        if subset and (change is None or change.get("verdict") == NOT_PAIRED):  # no items to pair by row
            change = {"verdict": NOT_PAIRED}
            row.update(before=None, after=None, before_all_items=x, after_all_items=y)
            x = y = None
        elif change and change.get("unpaired_items") and change.get("a") is not None:
            # the attacked run scored other items (a disjoint relearn scores the half it did not train on):
            # before and after are both taken on the items both scored, the plain run's own value kept beside
            row.update(before=change["a"], after=change["b"], before_all_items=x, after_all_items=y)
            x, y = change["a"], change["b"]
        if form is not None:
            row["m_before"], row["m_after"] = form(x), form(y)
        row["change"] = change
        if score:
            why = refusal(metric, form, f, score)
            if why is None and kind == "relearn" and not control:
                why = f"{metric}: R needs the retain model relearned by the same recipe as the control (its runs before and after)"
            if why is None and change and change.get("verdict") == NOT_PAIRED:
                why = f"{metric}: {NOT_PAIRED}"
            if why is not None:
                row[score] = {"value": None, "refused": why}
            elif kind == "quantize":
                row["Q"] = f.quant(row["m_before"], row["m_after"]).as_dict()
            else:
                rb, ra = retain_before.values.get((group, metric)), retain_after.values.get((group, metric))
                rc = item_change(retain_before, retain_after, group, metric, n_resamples, seed, level)
                if rc and rc.get("unpaired_items") and rc.get("a") is not None:  # the same rows before and after
                    rb, ra = rc["a"], rc["b"]
                row["retain_before"], row["retain_after"] = rb, ra
                row["m_ret_before"], row["m_ret_after"] = form(rb), form(ra)
                row["retain_change"] = rc
                row["R"] = f.relearn(row["m_before"], row["m_after"], row["m_ret_before"], row["m_ret_after"],
                                     min_delta=min_delta, noise=_noise(row["change"])).as_dict()
        out["metrics"][f"{group}/{metric}"] = row
    return out


def _hm(attacks: dict[str, dict]) -> list[dict[str, Any]]:
    """HM(R, Q) per metric for each pair of a relearning and a quantization attack."""
    rel = [(n, a) for n, a in attacks.items() if a["kind"] == "relearn"]
    qua = [(n, a) for n, a in attacks.items() if a["kind"] == "quantize"]
    out = []
    for rn, ra in rel:
        for qn, qa in qua:
            for key, row in ra["metrics"].items():
                r = row.get("R") or {}
                q = (qa["metrics"].get(key) or {}).get("Q") or {}
                if "refused" in r or "refused" in q:
                    hm = {"value": None, "refused": r.get("refused") or q.get("refused")}
                else:
                    hm = harmonic(Score(r.get("value"), reason=r.get("reason")), Score(q.get("value"), reason=q.get("reason"))).as_dict()
                out.append({"metric": key, "relearn": rn, "quantize": qn, "R": r.get("value"), "Q": q.get("value"), "HM": hm})
    return out


def score_attacks(b: RunValues, attacks: dict[str, str | Path], rb: RunValues | None, retain_attacks: dict[str, str | Path],
                  f: Formula, min_delta: float = MIN_DELTA, n_resamples: int = 1000, seed: int = 0,
                  level: float = 0.95) -> dict[str, dict]:
    """``score_attack`` for each attacked run of ``b`` (name -> folder), the control ``rb`` and its
    attacked runs under the same names; every folder first checked against what its run.json records."""
    if rb is not None:
        _same_model(rb, _models(b).get("retain_model"), f"{b.folder}'s retain model", "--retain OUT_R")
    scored = {}
    for name, folder in attacks.items():
        after = read_run(folder)
        _check_derived(after, b, None)
        ra = read_run(retain_attacks[name]) if name in retain_attacks and rb is not None else None
        if ra is not None:
            _check_derived(ra, rb, after)
        scored[name] = score_attack(name, b, after, f, rb, ra, min_delta, n_resamples, seed, level)
    return scored


def robustness(before: str | Path, attacks: dict[str, str | Path], retain_before: str | Path | None = None,
               retain_attacks: dict[str, str | Path] | None = None, formula_name: str = DEFAULT_FORMULA,
               min_delta: float = MIN_DELTA, n_resamples: int = 1000, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """ROBUSTNESS.json's content: the plain run ``before``, each attacked run in ``attacks``
    (name -> folder) and, for relearning, the retain model's plain run and its attacked runs
    under the same attack names."""
    f = formula(formula_name)
    if not attacks:
        raise ExportError(f"{before}: no attacked runs (OUT/{ATTACKS}/<attack>/ or --attacked NAME=DIR)")
    b = read_run(before)
    rb = read_run(retain_before) if retain_before is not None else None
    scored = score_attacks(b, attacks, rb, retain_attacks or {}, f, min_delta, n_resamples, seed, level)
    return {
        "formula": f.as_dict(),
        "min_delta": min_delta,
        "noise_rule": "R is undefined when |D_unl| < min_delta or the unlearned model's paired change (raw values, "
                      "paired bootstrap interval and permutation test) is inside the item-level noise",
        "paired": {"n_resamples": n_resamples, "seed": seed, "confidence_level": level},
        "before": str(b.folder),
        "retain_before": str(rb.folder) if rb is not None else None,
        "attacks": scored,
        "hm": _hm(scored),
    }


def _provenance_model(run: RunValues) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run's model fingerprints by role and its model resource as run.json records them ({} where absent)."""
    try:
        prov = json.loads((run.folder / "run.json").read_text()).get("provenance") or {}
    except (OSError, ValueError):
        return {}, {}
    model = (prov.get("resources") or {}).get("model")
    return prov.get("models") or {}, model if isinstance(model, dict) else {}


def _models(run: RunValues) -> dict[str, Any]:
    return _provenance_model(run)[0]


def _same_model(run: RunValues, want: str | None, what: str, option: str) -> None:
    """``run`` was made with the model fingerprinted ``want`` (nothing to check where either is unrecorded)."""
    got = _models(run).get("model")
    if want and got and got != want:
        raise ExportError(f"{run.folder}: its model ({got[:12]}) is not {what} ({want[:12]}): a folder from another "
                          f"run? name the right one ({option}) or rerun")


def _check_derived(after: RunValues, before: RunValues, twin: RunValues | None) -> None:
    """An attacked run was derived from ``before``'s model -- a stale ``attacks/`` folder left by an
    earlier run on another model is refused, not scored -- and, for the retain model's relearned run,
    by the same recipe and data as the unlearned model's (``twin``): R's control must be relearned alike."""
    derived = _provenance_model(after)[1].get("derived")
    if not isinstance(derived, dict):
        return  # a folder of weights named by hand (--attacked NAME=DIR): nothing recorded to check
    parent = _models(before).get("model")
    if parent and derived.get("parent") and derived["parent"] != parent:
        raise ExportError(f"{after.folder}: derived from model {derived['parent'][:12]}, not from {before.folder}'s "
                          f"model ({parent[:12]}): a folder left by an earlier run? rerun the attack or remove it")
    other = _provenance_model(twin)[1].get("derived") if twin is not None else None
    if isinstance(other, dict):
        mine = (derived.get("spec"), (derived.get("transform") or {}).get("data"))
        theirs = (other.get("spec"), (other.get("transform") or {}).get("data"))
        if mine != theirs:
            raise ExportError(f"{after.folder}: the retain model was attacked by {mine[0]!r} on data {mine[1]}, the "
                              f"unlearned model ({twin.folder}) by {theirs[0]!r} on data {theirs[1]}: R's control must "
                              f"be relearned by the same recipe on the same rows")


def write(path: str | Path, data: dict[str, Any]) -> Path:
    """The file, strict JSON, written atomically."""
    path = Path(path)
    atomic_write(path, (json.dumps(data, indent=2, allow_nan=False) + "\n").encode("utf-8"))
    return path


def write_into_run(out: str | Path, data: dict[str, Any], name: str = FILE) -> Path:
    """``OUT/<name>`` as part of OUT's published set (``outfolder.py``): the file in the set's
    folder and OUT's stable name a link to it, so a later run's new set, which lacks it, shows
    none rather than a stale one. A folder without sets gets a plain file; a name in OUT that
    evaldag did not write is never replaced."""
    out = Path(out)
    folder = set_folder(out)
    if folder == out:
        return write(out / name, data)
    link = out / name
    if os.path.lexists(link) and not is_our_link(link):
        raise ExportError(f"{link}: not a file evaldag wrote; refusing to replace it (write elsewhere with --to)")
    write(folder / name, data)
    if not os.path.lexists(link):
        os.symlink(link_target(name), link)
    return link


def _fmt(v: Any) -> str:
    return "-" if v is None else f"{v:.4g}"


def render(data: dict[str, Any]) -> str:
    """The terminal table: per attack, per metric before, after, its score and the change's verdict."""
    lines = [f"robustness ({data['formula']['name']}: {data['formula']['source']})"]
    for name, a in data["attacks"].items():
        s = a["score"]
        lines += ["", f"attack {name}" + (f" (scored by {s})" if s else " (before/after only)")]
        w = max([len(k) for k in a["metrics"]] + [6])
        lines.append(f"{'metric':<{w}}  {'before':>10}  {'after':>10}  {s or '':>6}  change")
        for key, row in a["metrics"].items():
            sc = row.get(s) if s else None
            cell = "-" if not sc else ("refused" if "refused" in sc else ("undef." if sc.get("value") is None else _fmt(sc["value"])))
            verdict = (row.get("change") or {}).get("verdict", "")
            lines.append(f"{key:<{w}}  {_fmt(row['before']):>10}  {_fmt(row['after']):>10}  {cell:>6}  {verdict}")
    if data["hm"]:
        lines += ["", "HM(R, Q):"]
        for h in data["hm"]:
            lines.append(f"  {h['metric']}  {h['relearn']} x {h['quantize']}: {_fmt(h['HM'].get('value'))}")
    return "\n".join(lines) + "\n"
