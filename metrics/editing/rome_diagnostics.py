"""lm-debugger's ROME diagnostics: ``DenominatorOfROMEUpdate`` and ``OutOfDistributionKeys``.

For an edit (prompt, subject) at layer L (``flask_server/interaction_items/metrics/``,
over EasyEdit's ``rome/compute_u.py``), with C the key covariance (``rome_keys.py``), k-bar
the subject's key averaged over the context templates and k the bare prompt's:

* u = C^-1 k-bar / |C^-1 k-bar|  (``compute_u``);
* ``rome_denominator`` = |k . u|, the scalar ROME divides its value shift by
  (``compute_v``: ``right_vector = (v* - W k) / dot(k, u)``): lm-debugger warns that
  values below 1 make the weight delta excessively large;
* ``rome_key_ood`` = u^T C^-1 u, how far the key lies from the corpus's keys.

C^-1 is the exact float64 inverse, as lm-debugger takes it (EasyEdit casts it to float32,
which alone moved these values by up to 3.6e-6 / 2.9e-5 relative on the trace model), or with
``ridge`` the inverse of C + ridge * I, what ``make_edit --method rome`` solves with: then
the denominator is the one that edit divided by (its ``(C^-1 k)^T k`` over ``|C^-1 k|``).

Outputs: ``value_by_index["EDIT/LAYER"] = {"layer", "subject", "value"}``; ``agg_value`` is
the worst edit: the smallest denominator, the largest key norm.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from ...engine import Params, Result, metric
from .rome_keys import rome_key_covariance, rome_keys

WARNING = "< 1: exceptionally small values make the weight delta matrix excessively large (lm-debugger)"


class DiagParams(Params):
    layers: tuple[int, ...]
    ridge: float = 0.0
    templates: Literal["rome", "none"] = "rome"


def _parents(p: DiagParams) -> dict:
    out: dict = {}
    for layer in p.layers:
        out[f"cov_{layer}"] = rome_key_covariance(layer=layer, ridge=p.ridge)
        out[f"keys_{layer}"] = rome_keys(layer=layer, templates=p.templates)
    return out


def _u(inverse: np.ndarray, kbar: np.ndarray) -> np.ndarray:
    """compute_u: C^-1 k-bar, normalised."""
    v = inverse @ kbar
    return v / np.linalg.norm(v)


def denominator(inverse: np.ndarray, k: np.ndarray, kbar: np.ndarray) -> float:
    return float(abs(k @ _u(inverse, kbar)))


def key_ood(inverse: np.ndarray, kbar: np.ndarray) -> float:
    u = _u(inverse, kbar)
    return float(u @ inverse @ u)


def _block(edits: list[dict], params: DiagParams, parents: dict, value: Any, worst: Any) -> Result:
    vbi = {}
    for layer in params.layers:
        cov, keys = parents[f"cov_{layer}"], parents[f"keys_{layer}"]
        for i, row in enumerate(edits):
            vbi[f"{i}/{layer}"] = {"layer": layer, "subject": row["subject"],
                                   "value": value(cov["inverse"], keys["k"][i], keys["kbar"][i])}
    if not vbi:
        return Result.nan("no edits or no layers to diagnose")
    extra = {"covariance": f"inverse of C + {params.ridge:g} I (--cov-ridge)" if params.ridge else "exact inverse of C",
             "context_templates": params.templates, "layers": list(params.layers),
             "templates": parents[f"keys_{params.layers[0]}"]["prefixes"] if params.layers else [],
             "corpus_tokens": {str(layer): parents[f"cov_{layer}"]["tokens"] for layer in params.layers}}
    return Result(agg_value=float(worst(v["value"] for v in vbi.values())), value_by_index=vbi, extra=extra)


@metric("rome_denominator", version="1", params=DiagParams, parents=_parents, needs=("edits",))
def rome_denominator(edits: list[dict], params: DiagParams, **parents: Any) -> Result:
    """|k . u| per edit and layer (lm-debugger's DenominatorOfROMEUpdate); agg: the smallest."""
    return _block(edits, params, parents, lambda inv, k, kbar: denominator(inv, k, kbar), min)


@metric("rome_key_ood", version="1", params=DiagParams, parents=_parents, needs=("edits",))
def rome_key_ood(edits: list[dict], params: DiagParams, **parents: Any) -> Result:
    """u^T C^-1 u per edit and layer (lm-debugger's OutOfDistributionKeys); agg: the largest."""
    return _block(edits, params, parents, lambda inv, k, kbar: key_ood(inv, kbar), max)
