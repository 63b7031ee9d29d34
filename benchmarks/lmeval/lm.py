"""lm-evaluation-harness's model interface (``lm_eval.api.model.LM``), served by evaldag.

:class:`EvaldagLM` is lm-evaluation-harness's own ``HFLM`` with the weights taken out:
every tokenization decision -- BOS (``add_bos_token``), the prefix token of an empty
context, the context/continuation split of ``TemplateLM``, the rolling windows of
``loglikelihood_rolling``, stop sequences and ``max_gen_toks`` -- is the *installed*
version's code (inherited, not copied), because versions differ (0.4.13 adds the BOS
that 0.4.8 did not). Only the three points where HFLM would run its model are replaced:
each becomes evaldag requests (``TokenStats`` for log-likelihoods, ``Generate`` for
generation) handed to ``serve``, which the executor answers from its request cache or
from the model, batched, deduplicated with every other benchmark's requests.

Two ways to use it:

* ``evaldag run lmeval`` builds it inside a scorer whose ``serve`` yields the requests to
  the run's executor (``scorer.py``);
* an lm-evaluation-harness user builds it directly and passes it to
  ``lm_eval.simple_evaluate(model=EvaldagLM("DIR", cache_dir=...), tasks=[...])``; its
  ``serve`` is then an evaldag executor over the cache folder (docs/lmeval.md).
"""

from __future__ import annotations

import inspect
from importlib.metadata import version as _version
from typing import Any, Callable, Sequence

import numpy as np
from lm_eval.api.model import TemplateLM
from lm_eval.models import utils as lm_utils
from lm_eval.models.huggingface import HFLM

from ...engine import GenerationSettings, Generate, TokenStats

Serve = Callable[[list], list]


class _ConfigOnly:
    """Stands where HFLM keeps its model: HFLM's ``max_length`` reads only ``.config``."""

    def __init__(self, config: Any) -> None:
        self.config = config


def executor_serve(model: Any, cache_dir: str | None = None, batch_tokens: int | None = None) -> Serve:
    """``serve`` through an evaldag executor over ``cache_dir``'s request store (None: no cache)."""
    from ...engine import Cache
    from ...engine.executor import Executor

    cache = None
    if cache_dir:
        cache = Cache(cache_dir)
        cache.claim()  # as a run does: an unmarked non-empty folder is refused, never written into
    ex = Executor(cache=cache.requests if cache else None, batch_tokens=batch_tokens)

    def serve(reqs: list) -> list:
        return ex.serve([(model, r) for r in reqs])

    serve.executor = ex  # type: ignore[attr-defined]  (its stats: what was forwarded, what came from the cache)
    return serve


class EvaldagLM(HFLM):
    """``HFLM`` whose forward passes are evaldag requests (see the module docstring).

    ``pretrained``: a local checkpoint folder (or hub id) -- or ``model``, an evaldag model
    resource (``HFModel``); ``serve``: how requests are answered (default: an executor
    over ``cache_dir``). ``add_bos_token``, ``prefix_token_id``, ``max_length`` and
    ``truncation`` mean what they mean to HFLM.
    """

    def __init__(self, pretrained: str | None = None, *, model: Any = None, serve: Serve | None = None,
                 cache_dir: str | None = None, dtype: str = "auto", device: str = "auto",
                 add_bos_token: bool | None = None, prefix_token_id: int | None = None,
                 max_length: int | None = None, truncation: bool = False, seed: int = 1234,
                 batch_tokens: int | None = None) -> None:
        TemplateLM.__init__(self)  # rank 0 of 1, the cache hook; HFLM.__init__ would load weights
        if model is None:
            if pretrained is None:
                raise ValueError("EvaldagLM: give pretrained (a checkpoint folder) or model (an evaldag model resource)")
            from ...engine import HFModel

            model = HFModel(pretrained, dtype=dtype, device=device, attention_mask="padding")
        self.resource = model
        self.pretrained = path = str(getattr(model, "path", pretrained))
        tok_path = str(getattr(model, "tokenizer_source", None) or path)  # --tokenizer, when the folder has none
        import transformers

        gguf = getattr(model, "file", None)  # a GGUF (engine/adapters/hf/hf_gguf.py): config, tokenizer from the file
        folder, gguf_kw = (str(gguf.parent), {"gguf_file": gguf.name}) if gguf is not None else (path, {})
        self._config = transformers.AutoConfig.from_pretrained(folder, **gguf_kw)
        self._model = _ConfigOnly(self._config)
        self.backend = "causal"
        kw = {"revision": "main", "trust_remote_code": False, "use_fast_tokenizer": True}
        if gguf is not None and not getattr(model, "tokenizer_source", None):
            tok_path, kw = folder, {**kw, **gguf_kw}
        if "add_bos_token" in inspect.signature(HFLM._create_tokenizer).parameters:
            kw["add_bos_token"] = add_bos_token
        self._create_tokenizer(tok_path, None, **kw)
        self.tokenizer = lm_utils.configure_pad_token(self.tokenizer, model_config=self._config)
        self.add_bos_token = add_bos_token
        self.custom_prefix_token_id = prefix_token_id
        self._max_length = max_length
        self.truncation = truncation
        self.logits_cache = False
        self.vocab_size = self.tokenizer.vocab_size
        self.think_end_token = None
        self.enable_thinking = None
        self.chat_template_args = {}
        self.batch_size_per_gpu = 1 << 30  # loglikelihood_rolling: every window in one call, batched by the executor
        self.batch_schedule, self.max_batch_size, self.batch_sizes = 1, 1 << 30, {}
        self.mixed_precision_dtype = None
        self.delta = self.peft = self.revision = None
        import torch

        self._device = torch.device("cpu")
        self.seed = seed
        self.serve = serve or executor_serve(model, cache_dir, batch_tokens)

    # -- identity: what decides the ids of every request (run.json, the scorer's params)
    def identity(self) -> dict[str, Any]:
        probe = self.tok_encode("a")
        return {"lm_eval_version": _version("lm_eval"), "add_bos_token": self.add_bos_token,
                "adds_bos": bool(probe) and probe[0] == self.tokenizer.bos_token_id,
                "prefix_token_id": self.prefix_token_id, "max_length": self.max_length}

    def get_model_info(self) -> dict:
        return {"model_name": self.pretrained, "evaldag_model": getattr(self.resource, "name", self.pretrained),
                **self.identity()}

    # -- the forward passes, as requests
    def _loglikelihood_tokens(self, requests: Sequence, disable_tqdm: bool = False, override_bs: int | None = None,
                              **kw: Any) -> list[tuple[float, bool]]:
        """(log-prob sum, greedy) of each continuation: HFLM's truncation to max_length + 1
        tokens, one ``TokenStats`` each."""
        reqs = []
        for _, context_enc, continuation_enc in requests:
            whole = (list(context_enc) + list(continuation_enc))[-(self.max_length + 1):]
            n = min(len(continuation_enc), len(whole) - 1)
            reqs.append(TokenStats(tuple(whole[: len(whole) - n]), tuple(whole[len(whole) - n:])))
        results = self.serve(reqs) if reqs else []
        out = []
        for (key, _, _), req, res in zip(requests, reqs, results):
            lp = np.asarray(res.logprob, dtype=np.float32)
            greedy = bool(np.array_equal(np.asarray(res.argmax, dtype=np.int64), np.asarray(req.continuation_ids, dtype=np.int64)))
            answer = (float(lp.sum(dtype=np.float64)), greedy)
            out.append(answer)
            if key is not None:
                self.cache_hook.add_partial("loglikelihood", key, answer)
        return out

    def generate_until(self, requests: list, disable_tqdm: bool = False) -> list[str]:
        """HFLM's stop sequences (``until`` plus the eos text), ``max_gen_toks`` and left
        truncation; one ``Generate`` each; the text decoded and cut as HFLM cuts it."""
        eos = self.tok_decode(self.eot_token_id, skip_special_tokens=False)
        reqs, untils = [], []
        for context, gen_kwargs in (r.args for r in requests):
            kwargs = _normalized(dict(gen_kwargs), self.max_gen_toks)
            until = lm_utils.handle_stop_sequences(kwargs.pop("until", None), eos=eos)
            max_gen_toks = int(kwargs.pop("max_gen_toks"))
            ids, _ = self.tok_batch_encode([context], left_truncate_len=self.max_length - max_gen_toks,
                                           truncation=self.truncation)
            sample = bool(kwargs.get("do_sample")) and float(kwargs.get("temperature", 1.0) or 0.0) > 0
            settings = GenerationSettings(max_new_tokens=max_gen_toks, stop_strings=tuple(until), do_sample=sample,
                                          temperature=float(kwargs.get("temperature", 1.0)) if sample else 1.0,
                                          top_p=float(kwargs.get("top_p", 1.0)) if sample else 1.0,
                                          seed=self.seed if sample else None)
            reqs.append(Generate(tuple(int(t) for t in ids[0].tolist()), settings))
            untils.append(until)
        results = self.serve(reqs) if reqs else []
        out = []
        for r, until, res in zip(requests, untils, results):
            s = _cut(self.tok_decode(list(res.token_ids)), until)
            out.append(s)
            self.cache_hook.add_partial("generate_until", r.args, s)
        return out


def _normalized(gen_kwargs: dict, default_max: int) -> dict:
    """lm-evaluation-harness's own normalisation where it has one (0.4.9+), else its older rule."""
    if hasattr(lm_utils, "normalize_gen_kwargs"):
        return dict(lm_utils.normalize_gen_kwargs(gen_kwargs, default_max))
    gen_kwargs.setdefault("max_gen_toks", default_max)
    return gen_kwargs


def _cut(text: str, until: list[str]) -> str:
    if hasattr(lm_utils, "postprocess_generated_text"):
        return lm_utils.postprocess_generated_text(generation=text, stop=until, think_end_token=None)
    for term in until:
        if term:
            text = text.split(term)[0]
    return text
