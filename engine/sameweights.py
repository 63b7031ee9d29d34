"""A ``--fallback`` proven to hold its primary's weights before it serves a single number.

Why: ``--fallback hf:DIR`` serves what a server cannot (token statistics of a text-only
server, Min-K%++'s full-vocabulary statistics); with other weights there (the retain model
given by mistake) every such number is the other model's, reported as the server's. So the
run refuses a fallback it cannot prove to be the same model:

* both backends read weight files (``hf:``, ``vllm:`` folders): their weight digests
  (:meth:`~evaldag.engine.backend.ModelResource.weights_fingerprint`) must be equal;
* else a probe on the run's own rows: the first :data:`PROBE_ROWS` requests of every
  scorer the fallback serves (so the rows of each split being evaluated: a target and its
  retain model agree on retain rows and differ on forget rows), scored by both backends
  through the executor (cached like any request). With log-probs on both sides, each row's
  mean token log-prob must agree within :data:`LOGPROB_TOLERANCE`; else each row's greedy
  continuation of :data:`PROBE_TOKENS` tokens, and at most :data:`GREEDY_DISAGREE` of the
  rows may differ. The numbers these were set from are in docs/servers.md.

A fallback that fails, or that no probe can reach, is one :class:`FallbackMismatch` line
naming both models, raised before any node is computed or stored.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from .backend import ModelResource, Routed
from .graph import Graph, Vertex
from .planner import Plan, PlanError, fallback_arg, model_resources
from .requests import Generate, GenerationSettings, Request, TokenStats

PROBE_ROWS = 8  # requests per scorer the fallback serves
PROBE_TOKENS = 16  # greedy tokens per row when the primary only generates
LOGPROB_TOLERANCE = 0.05  # nats: largest |difference| of a row's mean token log-prob between the two
GREEDY_DISAGREE = 0.25  # largest share of probe rows whose greedy continuations may differ


class FallbackMismatch(PlanError):
    """A ``--fallback`` that is not (or cannot be shown to be) the primary's model."""


def _rows(graph: Graph, plan: Plan, run_name: str, inputs: Callable[[Vertex], dict]) -> list[tuple[Vertex, list[Request]]]:
    """(scorer, its first requests to ``run_name``) for each scorer the fallback serves: the
    scorer's first round, asked for and dropped (nothing is run or stored)."""
    out = []
    for v in graph.order():
        if (v.key, run_name) not in plan.by_fallback or v.parent_keys:
            continue
        local = {v.bind.get(r, r): r for r in v.metric.needs}.get(run_name, run_name)
        gen = v.metric.fn(**inputs(v))
        try:
            first = next(gen)
        except StopIteration:
            continue
        finally:
            gen.close()
        reqs = [x[1] if isinstance(x, tuple) else x for x in first
                if (x[0] if isinstance(x, tuple) else "model") == local]
        if reqs:
            out.append((v, reqs[:PROBE_ROWS]))
    return out


def _prompt(r: Request) -> tuple[int, ...] | None:
    if isinstance(r, TokenStats):
        return tuple(r.context_ids)
    if isinstance(r, Generate):
        return tuple(r.prompt_ids)
    return None


def _gap_logprob(serve: Callable, primary: ModelResource, fallback: ModelResource, reqs: list[TokenStats]) -> float:
    """The largest |difference| of one row's mean token log-prob between the two backends."""
    a = serve([(primary, r) for r in reqs])
    b = serve([(fallback, r) for r in reqs])
    gaps = [abs(float(np.mean(x.logprob)) - float(np.mean(y.logprob))) for x, y in zip(a, b) if len(x.logprob)]
    return max(gaps) if gaps and all(map(math.isfinite, gaps)) else math.inf


def _gap_greedy(serve: Callable, primary: ModelResource, fallback: ModelResource, prompts: list[tuple[int, ...]]) -> float:
    """The share of rows whose greedy continuations differ between the two backends."""
    reqs = [Generate(p, GenerationSettings(max_new_tokens=PROBE_TOKENS)) for p in prompts]
    a = serve([(primary, r) for r in reqs])
    b = serve([(fallback, r) for r in reqs])
    return sum(x.text.strip() != y.text.strip() for x, y in zip(a, b)) / len(reqs)


def prove(graph: Graph, plan: Plan, resources: Any, serve: Callable[[list], list],
          inputs: Callable[[Vertex], dict]) -> dict[str, dict]:
    """Check every routed model whose fallback serves a vertex; return routed run resource -> how
    it was proven (run.json's provenance; ``"by": "unused"`` where the primary serves everything).
    ``serve`` is the executor's; ``inputs`` gives a scorer's arguments."""
    proofs: dict[str, dict] = {}
    used = {r for _, r in plan.by_fallback}
    for run_name, model in sorted(model_resources(resources).items()):
        if not isinstance(model, Routed):
            continue
        p, f = model.primary, model.fallback
        if run_name not in used:
            proofs[run_name] = {"fallback": f.label(), "by": "unused"}
            continue
        both = f"{fallback_arg(run_name, f.label())} is not the model {p.label()}"
        wp, wf = p.weights_fingerprint(), f.weights_fingerprint()
        if wp is not None and wf is not None:
            if wp != wf:
                raise FallbackMismatch(f"{both}: their weight files differ (sha256 {wf[:12]} vs {wp[:12]}); "
                                       "give the fallback a copy of the same weights")
            proofs[run_name] = {"fallback": f.label(), "by": "weights", "weights": wp}
            continue
        probes = _rows(graph, plan, run_name, inputs)
        caps_p, caps_f = p.capabilities(), f.capabilities()
        logprobs = all(c.missing("token_stats", ("logprob",)) is None for c in (caps_p, caps_f))
        greedy = all(c.missing("generate") is None for c in (caps_p, caps_f))
        gaps, how, rows = {}, set(), 0  # each scorer (one split's rows) on its own: a mismatch confined to
        for v, reqs in probes:  # the forget rows must not be averaged away by the splits where both agree
            stats = [r for r in reqs if isinstance(r, TokenStats)]
            prompts = [q for q in map(_prompt, reqs) if q]
            if stats and logprobs:
                gaps[v.key], rows = (_gap_logprob(serve, p, f, stats) / LOGPROB_TOLERANCE, "log-probs"), rows + len(stats)
            elif prompts and greedy:
                gaps[v.key], rows = (_gap_greedy(serve, p, f, prompts) / GREEDY_DISAGREE, "greedy"), rows + len(prompts)
        if not gaps:
            raise FallbackMismatch(f"{both}, or cannot be shown to be: {p.label()} serves neither log-probs nor generation "
                                   "for a probe of the rows the fallback would score; drop the fallback")
        key, (ratio, how) = max(gaps.items(), key=lambda kv: kv[1][0])
        if not ratio <= 1.0:
            names = ", ".join(graph._metrics_of([graph.vertices[key].label]))
            said = (f"the mean token log-prob of a row differs by up to {ratio * LOGPROB_TOLERANCE:.3g} "
                    f"(tolerance {LOGPROB_TOLERANCE})" if how == "log-probs" else
                    f"the greedy answers differ on {ratio * GREEDY_DISAGREE:.0%} of them (tolerance {GREEDY_DISAGREE:.0%})")
            raise FallbackMismatch(f"{both}: on the first rows of {names} {said}; give the fallback "
                                   "the same weights, or drop it")
        tol = LOGPROB_TOLERANCE if how == "log-probs" else GREEDY_DISAGREE
        proofs[run_name] = {"fallback": f.label(), "by": how, "rows": rows, "gap": round(ratio * tol, 6), "tolerance": tol}
    return proofs
