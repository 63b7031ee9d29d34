"""``report.html``: one self-contained page comparing one or more finished runs.

Built from the files a run leaves (``run.json`` and ``<BENCH>_EVAL.json`` /
``_SUMMARY.json``), so it works for runs made elsewhere, and for open-unlearning's own
output folders too (no ``run.json``: no graph or statistics, the rest still shows).
Several folders (checkpoints of one unlearning run, target vs retain model) become
columns side by side; each plot is drawn only when its data exists.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, replace
from html import escape
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence, Union

from .clusters import Split, guess_split, split_vocabulary
from .html import chips, graph_section, num_cell, page
from .interval_cells import interval_caption, interval_of, with_interval
from .runjson import read_run_json
from .view import computed_text, fmt_secs, from_run_dir, headline, read_evals, read_json


@dataclass(frozen=True)
class Section:
    """One part of the report page, drawn by whoever knows the data (usually a benchmark).

    Sections are placed by ``order`` (Metrics is 10, Graph 80, Run statistics 90) and
    get ``<h2 id=id>title</h2>`` and a link in the page's navigation; sections sharing
    an ``id`` are drawn under one heading (identical ones once). ``covers`` names the
    SUMMARY keys per benchmark group that the section already shows: the metrics table
    leaves them out and says so with ``covers_note`` (``{n}`` = how many).
    """

    title: str
    html: str
    order: int = 50
    id: str = ""
    covers: dict = field(default_factory=dict)  # group -> set of SUMMARY keys
    covers_note: str = ""

    @property
    def anchor(self) -> str:
        return self.id or re.sub(r"[^a-z0-9]+", "-", self.title.lower()).strip("-")


@dataclass
class RunFolder:
    """What one output folder holds, read once."""

    path: Path  # where its files are read from (the published set, see outfolder.py)
    title: str = ""
    subtitle: str = ""
    run: dict | None = None
    evals: dict[str, dict] = field(default_factory=dict)
    summaries: dict[str, dict] = field(default_factory=dict)
    shown: Path | None = None  # the folder the user named (titles); ``path`` when None
    model: str = ""  # the model's full path or id (on hover; the subtitle has its last part)


def load_run_folder(path: str | os.PathLike, shown: str | os.PathLike | None = None) -> RunFolder:
    """One run's files, read from ``path``; ``shown`` names it in titles and messages.

    The engine (``report.py``) passes the folder of a run's published set, so every file
    comes from one run, and the --out folder the user named as ``shown``."""
    p = Path(path)
    given = Path(shown) if shown is not None else p
    if not p.is_dir():
        raise FileNotFoundError(f"{given}: not a folder (give the --out folder of a run)")
    rf = RunFolder(p, shown=given)
    if (p / "run.json").exists():
        rf.run = read_run_json(p / "run.json")
    rf.evals = read_evals(p)
    for s in sorted(p.glob("*_SUMMARY.json")):
        if not s.exists():
            continue
        data = read_json(s)
        if isinstance(data, dict):
            rf.summaries[s.name[: -len("_SUMMARY.json")]] = data
    if rf.run is None and not rf.evals:
        raise FileNotFoundError(f"{given}: neither run.json nor any <BENCH>_EVAL.json here")
    prov = (rf.run or {}).get("provenance") or {}
    res = (prov.get("resources") or {}).get("model") or {}
    model = res.get("path") or prov.get("model_path") or prov.get("model_name") or prov.get("model")
    fp = res.get("fingerprint") or prov.get("model_fingerprint")
    if isinstance(model, str):
        rf.model = model  # a column header shows the last part only: three runs fit a 1400 px page
        rf.subtitle = short_name(model) + (f" · {fp[:12]}" if isinstance(fp, str) else "")
    elif isinstance(fp, str):
        rf.subtitle = f"model {fp[:12]}"
    return rf


def short_name(model: str) -> str:
    """A model's path or hub id by its last part (``.../models/target`` -> ``target``)."""
    return model.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1] or model


def _resources_table(prov: dict, not_loaded: bool = False) -> str:
    """Which checkpoint and which data each resource was: path or source beside its fingerprint
    (``not_loaded``: a warm run, whose models were never loaded)."""
    res = prov.get("resources") or {}
    rows = []
    for name, d in sorted(res.items()):
        if not isinstance(d, dict):
            continue
        where = d.get("path") or d.get("source") or ""
        loaded = " ".join(str(d[k]) for k in ("loaded_dtype", "loaded_device") if d.get(k))
        if not loaded and d.get("kind") == "model" and not_loaded:  # a warm run says why the column is empty
            loaded = "not loaded: every answer cached"
        fp = d.get("fingerprint") or ""
        rows.append(f"<tr><td>{escape(name)}</td><td>{escape(str(d.get('kind', '')))}</td><td>{escape(str(where))}</td>"
                    f"<td><code>{escape(str(fp)[:12])}</code></td><td>{escape(loaded)}</td></tr>")
    if not rows:
        return ""
    table = _table(["resource", "kind", "path or source", "fingerprint", "loaded as"], rows, num_from=99)
    added = prov.get("system_prompt_added")
    for name, text in sorted(added.items()) if isinstance(added, dict) else ():
        table += (f'<p class="ed-muted">{escape(str(name))}: the chat template added its default system prompt '
                  f'to every prompt: <q>{escape(str(text))}</q></p>')
    cmd = prov.get("command")
    if isinstance(cmd, list) and cmd:
        table += f'<p class="ed-muted"><code>{escape(" ".join(str(c) for c in cmd))}</code></p>'
    return table


def _same(text: str) -> str:
    return text


def _titles(runs: list[RunFolder], redact: Callable[[str], str] = _same) -> None:
    """Column titles: the folder name, with parents added until they are all distinct."""
    depth = 1
    while True:
        names = ["/".join((r.shown or r.path).resolve().parts[-depth:]) for r in runs]
        if len(set(names)) == len(names) or depth > 6:
            break
        depth += 1
    for r, name in zip(runs, names):
        r.title = redact(name)  # a token in a folder name is not printed either (the engine passes its redaction)


def _hover(r: RunFolder, redact: Callable[[str], str]) -> str:
    """A column header's tooltip: the run folder and the model in full."""
    return redact(str(r.shown or r.path)) + (f"\nmodel: {redact(r.model)}" if r.model else "")


# ---------------------------------------------------------------------- sections
def metrics_section(runs: list[RunFolder], sections: Sequence[Section] = (), splits: Sequence[Split] = (),
                    redact: Callable[[str], str] = _same) -> str:
    """One table per benchmark: rows are metrics, columns are runs; headline rows first.

    SUMMARY keys a section already shows (its ``covers``) are left out, with its note.
    """
    out = []
    for bench in sorted({b for r in runs for b in list(r.evals) + list(r.summaries)}):
        covering = [s for s in sections if s.covers.get(bench)]
        shown = {k for s in covering for k in s.covers[bench]}
        head = sorted({k for r in runs for k in r.summaries.get(bench, {})} - shown)
        rest = sorted({k for r in runs for k, v in r.evals.get(bench, {}).items() if headline(v) is not None} - set(head))
        if shown:
            notes = "".join(s.covers_note.format(n=len(s.covers[bench])) for s in covering)
            out.append(f'<h3>{escape(bench)}</h3><p class="ed-muted">{notes}</p>')
            if not head + rest:
                continue
        rows = []
        for name in head + rest:
            cells, vals = [], []
            for r in runs:
                val = r.summaries.get(bench, {}).get(name) if name in head else None
                if val is None:
                    val = headline(r.evals.get(bench, {}).get(name))
                vals.append(val if isinstance(val, (int, float)) and not isinstance(val, bool) else None)
                cell = with_interval(num_cell(vals[-1]), vals[-1], interval_of(r.evals, bench, name))
                cells.append(_served(cell, r.evals.get(bench, {}).get(name)))
            cells += [_delta_cell(vals[0], v) for v in vals[1:]]  # side by side: each later run minus the first
            cls = "ed-headline" if name in head else ""
            split = guess_split(name, splits)
            rows.append(f'<tr class="{cls}"><td>{escape(name)}</td><td>{escape(split or "")}</td>{"".join(cells)}</tr>')
        cols = "".join(f'<th class="ed-num" title="{escape(_hover(r, redact))}">{escape(r.title)}'
                       f'{"<br><small>" + escape(r.subtitle) + "</small>" if r.subtitle else ""}</th>' for r in runs)
        cols += "".join(f'<th class="ed-num ed-delta" title="{escape(r.title)} minus {escape(runs[0].title)}">'
                        f'Δ {escape(r.title)}</th>' for r in runs[1:])
        out.append(("" if shown else f"<h3>{escape(bench)}</h3>")
                   + f'<table class="ed-table ed-sortable ed-metrics" data-bench="{escape(bench)}">{interval_caption([r.evals for r in runs], bench)}'
                   "<thead><tr><th>metric</th>"
                   f"<th>split</th>{cols}</tr></thead><tbody>{''.join(rows)}</tbody></table>")
    if not out:
        return '<p class="ed-muted">No metric values found.</p>'
    return '<p class="ed-muted">Headline numbers (the SUMMARY files) in bold, then every other metric\'s agg_value. ' \
           "Click a column to sort.</p>" + "".join(out)


def _served(cell: str, entry: Any) -> str:
    """A value's cell with the backend that served it under the number, where its EVAL entry says
    (``served_by``: a run with a ``--fallback``; the engine redacted it)."""
    by = entry.get("served_by") if isinstance(entry, dict) else None
    if not isinstance(by, dict) or not by or not cell.endswith("</td>"):
        return cell
    text = ", ".join(str(b) for b in by.values()) if len(by) == 1 else "; ".join(f"{k}: {b}" for k, b in sorted(by.items()))
    return cell[: -len("</td>")] + f'<br><small class="ed-muted">served by {escape(text)}</small></td>'


def _delta_cell(first: float | None, other: float | None) -> str:
    """``other - first`` with its sign (``evaldag compare`` prints the same difference)."""
    if first is None or other is None or not math.isfinite(first) or not math.isfinite(other):
        return num_cell(None)
    d = other - first
    return num_cell(d, f"{d:+.4g}")


def graphs_section(runs: list[RunFolder], splits: Sequence[Split] = ()) -> str:
    out = []
    for i, r in enumerate(runs):
        if r.run is None:
            out.append(f'<p class="ed-muted">{escape(r.title)}: no run.json (not an evaldag run), no graph.</p>')
            continue
        body = graph_section(from_run_dir(r.path, title=f"{r.title}: run graph", splits=splits), id_prefix=f"ed{i}")
        if i == 0 or len(runs) == 1:
            out.append(f"<h3>{escape(r.title)}</h3>{body}")
        else:
            out.append(f'<details class="ed-more"><summary>{escape(r.title)}: graph and nodes</summary>{body}</details>')
    return "".join(out)


def _pct(x: Any) -> str | None:
    return f"{x * 100:.1f}%" if isinstance(x, (int, float)) else None


def _secs(x: Any) -> str | None:
    return fmt_secs(x) if isinstance(x, (int, float)) else None


# (row label, value from (run.json, its executor block))
_STATS = [
    ("wall time", lambda run, ex: _secs(run.get("wall_seconds"))),
    ("model loaded", lambda run, ex: {True: "yes", False: "no"}.get(ex.get("model_loaded"))),
    ("requests asked", lambda run, ex: ex.get("requests")),
    ("unique requests", lambda run, ex: ex.get("unique")),
    ("served from request cache", lambda run, ex: ex.get("cached")),
    ("sequences forwarded", lambda run, ex: ex.get("sequences_forwarded")),
    ("generations", lambda run, ex: ex.get("generations")),
    ("batches", lambda run, ex: ex.get("batches")),
    ("OOM retries", lambda run, ex: ex.get("oom_retries")),
    ("tokens (real)", lambda run, ex: ex.get("tokens_real")),
    ("tokens (padded)", lambda run, ex: ex.get("tokens_padded")),
    ("padding", lambda run, ex: _pct(ex.get("padding_fraction"))),
    ("model time", lambda run, ex: "none: every answer cached" if _all_cached(ex) else _secs(ex.get("seconds"))),
]


def _all_cached(ex: dict) -> bool:
    """A warm run: the model was asked nothing it had not answered before (or not loaded at all)."""
    return ex.get("model_loaded") is False or (ex.get("requests", 0) or 0) == (ex.get("cached", 0) or 0)
_KIND_COLS = ("requests", "unique", "cached", "sequences_forwarded", "batches", "padding_fraction", "seconds")


def _table(head: list[str], rows: list[str], cls: str = "ed-table", num_from: int = 1) -> str:
    ths = "".join(f'<th class="ed-num">{escape(h)}</th>' if i >= num_from else f"<th>{escape(h)}</th>" for i, h in enumerate(head))
    return f'<table class="{cls}"><thead><tr>{ths}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _run_details(r: RunFolder) -> str:
    """Per-run extras: requests by kind, the slowest computed nodes, provenance."""
    parts = [f"<h3>{escape(r.title)}</h3>"]
    kinds = (r.run.get("executor") or {}).get("by_kind") or {}
    if kinds:
        rows = []
        for kind, st in sorted(kinds.items()):
            cells = "".join(num_cell(st.get(c) if isinstance(st.get(c), (int, float)) else None) for c in _KIND_COLS)
            rows.append(f"<tr><td>{escape(kind)}</td>{cells}</tr>")
        parts.append(_table(["request kind"] + [c.replace("_", " ") for c in _KIND_COLS], rows, "ed-table ed-sortable"))
    nodes = r.run.get("nodes") or {}
    slow = sorted((kv for kv in nodes.items() if _took(kv[1]) is not None),
                  key=lambda kv: (-(_took(kv[1]) or 0.0), kv[0]))[:8]
    if slow:  # a warm run's nodes are cached: the time each took when it was computed, and when
        rows = [f"<tr><td>{escape(name)}</td><td>{escape(_how(n))}</td>"
                f"{num_cell(_took(n), _secs(_took(n)))}</tr>" for name, n in slow]
        parts.append(_table(["slowest nodes", "reason", "seconds"], rows, num_from=2))
    prov = r.run.get("provenance") or {}
    parts.append(_resources_table(prov, _all_cached(r.run.get("executor") or {})))
    facts = [(k, v if not isinstance(v, str) or len(v) < 20 else v[:16] + "…") for k, v in sorted(prov.items())
             if isinstance(v, (str, int, float))]
    if facts:
        parts.append(chips(facts))
    return "<div>" + "".join(parts) + "</div>"


def _took(n: dict) -> float | None:
    """The seconds a node took: this run's, or (cached) the computing run's."""
    if n.get("status") == "computed":
        return n.get("seconds")
    then = (n.get("computed") or {}).get("seconds") if n.get("status") == "cached" else None
    return then if isinstance(then, (int, float)) else None


def _how(n: dict) -> str:
    if n.get("status") == "cached":
        return "cached: " + computed_text(n.get("computed") or {})
    return n.get("reason", "")


def stats_section(runs: list[RunFolder]) -> str:
    """Node counts and executor statistics side by side, then per-run details."""
    have = [r for r in runs if r.run is not None]
    if not have:
        return '<p class="ed-muted">No run.json: no run statistics.</p>'
    rows = []
    for status in ("computed", "cached", "failed", "skipped"):
        counts = [sum(1 for n in (r.run.get("nodes") or {}).values() if n.get("status") == status) for r in have]
        rows.append(f"<tr><td>nodes {status}</td>" + "".join(f'<td class="ed-num">{c}</td>' for c in counts) + "</tr>")
    for label, get in _STATS:
        vals = [get(r.run, r.run.get("executor") or {}) for r in have]
        if any(v is not None for v in vals):
            cells = "".join(f'<td class="ed-num">{escape("" if v is None else str(v))}</td>' for v in vals)
            rows.append(f"<tr><td>{escape(label)}</td>{cells}</tr>")
    table = _table(["run statistics"] + [r.title for r in have], rows, "ed-table ed-stats")
    return table + '<div class="ed-grid2">' + "".join(_run_details(r) for r in have) + "</div>"


# ---------------------------------------------------------------------- the page
class ReportPlugin(Protocol):
    """What draws part of the page: a benchmark (``evaldag.engine.benchmark.Benchmark``) is one."""

    splits: Sequence[Split]

    def report_sections(self, runs: list[RunFolder]) -> list[Section]: ...


Plugins = Union[Sequence[ReportPlugin], Callable[[list[RunFolder]], Sequence[ReportPlugin]], None]


def _merge(sections: list[Section]) -> list[Section]:
    """Sections sharing an anchor under one heading (identical ones once), in ``order``."""
    merged: dict[str, Section] = {}
    for s in sorted(sections, key=lambda s: s.order):
        have = merged.get(s.anchor)
        if have is None:
            merged[s.anchor] = s
        elif s.html not in have.html:
            merged[s.anchor] = replace(have, html=have.html + s.html, covers={**have.covers, **s.covers})
    return sorted(merged.values(), key=lambda s: s.order)


def build_report_html(out_dirs: Sequence[Union[str, os.PathLike, RunFolder]], title: str = "evaldag report", *,
                      plugins: Plugins = None, shown: Sequence[str | os.PathLike] | None = None,
                      redact: Callable[[str], str] = _same) -> str:
    """The page for ``out_dirs``: Metrics, the ``plugins``' sections, Graph, Run statistics.

    ``plugins`` (or a function of the loaded runs that returns them) supply their own
    sections and data-split names; ``evaldag.engine.report.build_report_html`` passes
    the benchmarks the runs ran, the folders of their published sets already loaded, and its
    ``redact`` for folder names. ``shown`` names the folders in titles (default: themselves).
    """
    runs = [p if isinstance(p, RunFolder) else load_run_folder(p, s)
            for p, s in zip(out_dirs, shown or [None] * len(out_dirs))]
    if not runs:
        raise ValueError("give at least one output folder")
    _titles(runs, redact)
    found = list((plugins(runs) if callable(plugins) else plugins) or [])
    splits = split_vocabulary(p.splits for p in found)
    extra = _merge([s for p in found for s in p.report_sections(runs)])
    benches = sorted({b for r in runs for b in r.evals})
    sections = _merge([Section("Metrics", metrics_section(runs, extra, splits, redact), order=10, id="metrics"), *extra,
                       Section("Graph", graphs_section(runs, splits), order=80, id="graph"),
                       Section("Run statistics", stats_section(runs), order=90, id="stats")])
    nav = '<nav class="ed-nav">' + "".join(f'<a href="#{s.anchor}">{escape(s.title)}</a>' for s in sections) + "</nav>"
    body = [nav, chips([("runs", len(runs)), ("benchmarks", ", ".join(benches) or "none")])]
    for s in sections:
        body += [f'<h2 id="{s.anchor}">{escape(s.title)}</h2>', s.html]
    subtitle = " · ".join(r.title + (f" ({r.subtitle})" if r.subtitle else "") for r in runs)
    return page(title, "\n".join(body), subtitle=subtitle)
