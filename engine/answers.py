"""Every model answer checked where the executor takes it from a backend (hf, vllm, a server,
replay, a plugin's), before it can be stored in the request store or handed to a scorer.

Why here and not in each adapter: a number that cannot be a model's answer (a log-prob of
``NaN`` or ``3.0``, a probability above 1) must never be cached under a model's identity,
whichever backend produced it, and a backend written tomorrow must not have to remember
the rule. The executor applies :meth:`Backend.admit` to every batch a backend hands back and to
every answer it reads from the request store (an answer stored by an older evaldag, before
this check, is then asked again instead of served).

The rules, per result type (:func:`problem`):

* token statistics: one value per continuation token (lengths equal to what was asked);
  log-probs finite and at most :data:`SLACK` above 0; the greedy token an integer >= -1
  (-1: a server's token the local tokenizer has no id for); the full-vocabulary mean at most
  :data:`SLACK` above 0 and the variance at least :data:`SLACK` below 0. A position whose
  full-vocabulary statistics are themselves non-finite is the model's own non-finite logits
  (a NaN weight): it is admitted as it is and every value computed from it carries the
  "non-finite logits" note (``requests.nonfinite_output``). A backend that cannot give the
  full-vocabulary statistics (its ``Capabilities`` lack ``mu``/``var``) hands back ``None``
  there, "not available", never a NaN standing in for it.
* generations: token ids integers >= 0, at most ``max_new_tokens`` of them; the text a string.
* hidden states: ``[len(layers), len(ids), hidden]``.
* every kind, a plugin's too: an answer at all (not ``None``); a result type that defines
  ``check(request) -> str | None`` has it called too.

:func:`number` and :func:`rank` turn one value of a server's JSON into a float or an int
for the adapters that parse one: ``null`` or a string there is one line too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .adapters.integrity import ModelRefused
from .requests import Generate, GenerateResult, HiddenStates, HiddenStatesResult, TokenStats, TokenStatsResult

#: how far above 0 a log-prob (or the full-vocabulary mean of log p) may be and still be
#: admitted: float32 rounding of a log-softmax computed in half precision on a server's side
#: stays far below it; a probability of exp(1e-4) = 1.0001 is rounding, 1.01 is not
SLACK = 1e-4


class BadAnswer(ModelRefused):
    """A backend's answer that cannot be a model's (one ``evaldag: error:`` line): the run stops,
    nothing from the batch that held it is stored."""


def number(x: Any, what: str) -> float:
    """A JSON number of a server's answer as a float; ``null``, a string or a bool is a BadAnswer
    (NaN and infinities pass here, as Python's json reads them: :func:`admit` judges them)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise BadAnswer(f"{what} is {'null' if x is None else repr(x)[:40]}, not a number")
    return float(x)


def rank(x: Any, what: str) -> int:
    """A token's rank in a server's answer: an integer >= 1 (1: the greedy token)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 1 or int(x) != x:
        raise BadAnswer(f"{what} has rank {'null' if x is None else repr(x)[:40]}; a rank is an integer >= 1")
    return int(x)


def not_available(kind: str, result: Any, fields: frozenset[str] | None) -> Any:
    """Token statistics of a backend that does not give ``mu``/``var``: those fields ``None``
    (not available), whatever stood in for them (NaN placeholders of an older evaldag's store)."""
    if kind == "token_stats" and fields is not None and isinstance(result, TokenStatsResult):
        if "mu" not in fields and result.mu is not None:
            result.mu = None
        if "var" not in fields and result.var is not None:
            result.var = None
    return result


def _array(a: Any, name: str, n: int | None, kind: str) -> tuple[np.ndarray | None, str | None]:
    if not isinstance(a, np.ndarray):
        return None, f"{name} is {'null' if a is None else type(a).__name__}, not an array"
    if a.dtype.kind not in kind:
        return None, f"{name} has dtype {a.dtype}"
    if n is not None and a.shape != (n,):
        return None, f"{name} has shape {a.shape} for {n} tokens asked"
    return a, None


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _token_stats(req: TokenStats, r: TokenStatsResult) -> str | None:
    n = len(req.continuation_ids)
    lp, why = _array(r.logprob, "log-prob", n, "f")
    if why:
        return why
    am, why = _array(r.argmax, "greedy token", n, "iu")
    if why:
        return why
    dist_bad = np.zeros(n, dtype=bool)  # positions whose full-vocabulary statistics are non-finite
    for name, a in (("mean of log p", r.mu), ("variance of log p", r.var)):
        if a is None:
            continue
        a, why = _array(a, name, n, "f")
        if why:
            return why
        dist_bad |= ~np.isfinite(a)
    if r.mu is not None and (np.isfinite(r.mu) & (r.mu > SLACK)).any():
        i = _first(np.isfinite(r.mu) & (r.mu > SLACK))
        return f"mean of log p {float(r.mu[i])!r} at token {i}, above 0"
    if r.var is not None and (np.isfinite(r.var) & (r.var < -SLACK)).any():
        i = _first(np.isfinite(r.var) & (r.var < -SLACK))
        return f"variance of log p {float(r.var[i])!r} at token {i}, below 0"
    bad = ~np.isfinite(lp) & ~dist_bad  # non-finite beside a finite (or absent) distribution
    if bad.any():
        i = _first(bad)
        return f"log-prob {_show(lp[i])} at token {i}, where a log-prob is finite"
    high = np.isfinite(lp) & (lp > SLACK)
    if high.any():
        i = _first(high)
        return f"log-prob {float(lp[i])!r} at token {i}, above 0: a probability above 1"
    if (am < -1).any():
        i = _first(am < -1)
        return f"greedy token {int(am[i])} at token {i}"
    return None


def _show(x: float) -> str:
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


def _generate(req: Any, r: GenerateResult) -> str | None:
    if not isinstance(r.text, str):
        return f"text is {'null' if r.text is None else type(r.text).__name__}, not a string"
    ids, why = _array(r.token_ids, "token ids", None, "iu")
    if why:
        return why
    if ids.ndim != 1:
        return f"token ids have shape {ids.shape}"
    if (ids < 0).any():
        return f"token id {int(ids[_first(ids < 0)])} < 0"
    if isinstance(req, Generate) and len(ids) > req.settings.max_new_tokens:
        return f"{len(ids)} new tokens for at most {req.settings.max_new_tokens} asked"
    return None


def _hidden(req: HiddenStates, r: HiddenStatesResult) -> str | None:
    s = r.states
    if not isinstance(s, np.ndarray) or s.dtype.kind != "f":
        return f"hidden states are {'null' if s is None else type(s).__name__ + ' ' + str(getattr(s, 'dtype', ''))}"
    if s.ndim != 3 or s.shape[:2] != (len(req.layers), len(req.ids)):
        return f"hidden states have shape {s.shape} for {len(req.layers)} layers of {len(req.ids)} tokens"
    return None


def problem(req: Any, result: Any) -> str | None:
    """What makes ``result`` impossible as the answer to ``req``, in words; None when it is admitted."""
    if result is None:
        return "no answer (null)"
    if isinstance(req, TokenStats):
        return _token_stats(req, result) if isinstance(result, TokenStatsResult) else _wrong(result, TokenStatsResult)
    if req.kind in ("generate", "generate_text"):
        return _generate(req, result) if isinstance(result, GenerateResult) else _wrong(result, GenerateResult)
    if isinstance(req, HiddenStates):
        return _hidden(req, result) if isinstance(result, HiddenStatesResult) else _wrong(result, HiddenStatesResult)
    own = getattr(result, "check", None)
    return own(req) if callable(own) else None


def _wrong(result: Any, want: type) -> str:
    return f"a {type(result).__name__} where a {want.__name__} belongs"


@dataclass
class Backend:
    """How the executor judges one backend's answers: the resource (named in a refusal by its
    ``label()``) and the token-statistic fields it declares (None: taken as given)."""

    model: Any
    fields: frozenset[str] | None

    @classmethod
    def of(cls, model: Any) -> "Backend":
        try:
            fields: frozenset[str] | None = frozenset(model.capabilities().token_fields)
        except (NotImplementedError, AttributeError):
            fields = None
        return cls(model, fields)

    def label(self) -> str:
        label = getattr(self.model, "label", None)
        return str(label() if callable(label) else getattr(self.model, "name", None) or self.model.fingerprint()[:12])

    def admit(self, kind: str, requests: Sequence[Any], results: Sequence[Any]) -> list:
        """The batch's results, each checked against its request (token-statistic fields the backend
        does not declare become ``None``). One impossible answer raises :class:`BadAnswer` naming the
        backend, the kind and what was wrong: nothing of the batch is kept."""
        out = []
        for i, (req, res) in enumerate(zip(requests, results)):
            res = not_available(kind, res, self.fields)
            why = problem(req, res)
            if why is not None:
                raise BadAnswer(f"{self.label()} gave an impossible {kind} answer: {why} (answer {i + 1} of "
                                f"{len(results)}); nothing from its batch was stored")
            out.append(res)
        return out

    def stored_ok(self, kind: str, req: Any, result: Any) -> Any:
        """A stored answer as the executor may serve it (``None``: impossible, so asked again)."""
        result = not_available(kind, result, self.fields)
        return None if problem(req, result) is not None else result
