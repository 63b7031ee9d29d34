"""A sequence classifier as a model resource: what serves ``classify_text`` requests.

open-unlearning's ``classification_prob`` loads ``AutoModelForSequenceClassification`` and
its tokenizer (``classifier_model_args``) and, per batch of texts, calls the tokenizer with
``padding=True, truncation=True, max_length=...`` and takes the softmax of the logits.
:class:`HFClassifier` is that checkpoint as an evaluation resource: an :class:`HFModel`
for everything the engine asks before loading (its fingerprint hashes the folder's files;
its identity keys the request cache), whose ``load`` builds the classification head
instead of a causal LM. It serves one kind, so a run never routes language-model work to
it, and the executor batches and caches its requests like any other model's.

The classifier runs in float32, as open-unlearning loads it (``from_pretrained`` without
a dtype), whatever ``--dtype`` says about the evaluated model.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Sequence

from ...engine.adapters.hf import HFModel
from ...engine.backend import Capabilities, ModelAdapter, OutOfMemory
from .classify_request import ClassifyText, ClassProbs

CAPABILITIES = Capabilities({ClassifyText.kind})


class HFClassifier(HFModel):
    """``--classifier-model DIR|ID``: a Hugging Face sequence classifier, loaded on the first miss."""

    kind = "classifier"

    def __init__(self, path_or_id: str, device: str = "auto"):
        super().__init__(path_or_id, dtype="fp32", device=device, attention_mask="padding")

    def _compute_fingerprint(self) -> str:
        # the same files loaded as a causal LM are another model: a tag of its own
        return hashlib.sha256(("hf-seqcls-1\0" + super()._compute_fingerprint()).encode()).hexdigest()

    def mask_mode_matters(self) -> bool:
        return False  # the tokenizer's own attention mask, always (open-unlearning's call)

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def describe(self) -> dict:
        return {**super().describe(), "head": "sequence-classification"}

    def encoder(self) -> Any:
        """The classifier's tokenizer, as saved (no pad token is made up: one is required)."""
        if self._encoder is None:
            from transformers import AutoTokenizer

            self._encoder = AutoTokenizer.from_pretrained(str(Path(self.path).expanduser()) if self.is_dir else self.path)
        return self._encoder

    def load(self) -> "ClassifierAdapter":
        if self._adapter is None:
            from transformers import AutoModelForSequenceClassification

            from ...engine.adapters.hf import _resolve_device

            if self.is_dir:
                self.fingerprint()
                self.verify_unchanged()
            src = str(Path(self.path).expanduser()) if self.is_dir else self.path
            model = AutoModelForSequenceClassification.from_pretrained(src).to(_resolve_device(self.device)).eval()
            if self._snapshot is not None:
                from ...engine.adapters.integrity import model_names

                self._snapshot.check_content(model_names(self._snapshot.root))
            self._adapter = ClassifierAdapter(model, self.encoder())  # type: ignore[assignment]
        return self._adapter  # type: ignore[return-value]


class ClassifierAdapter(ModelAdapter):
    """Runs one batch of texts through the classifier: open-unlearning's tokenizer call and softmax."""

    def __init__(self, model: Any, tokenizer: Any):
        self.model, self.tokenizer = model, tokenizer
        self.device = str(model.device.type)
        self.dtype = str(model.dtype).replace("torch.", "")
        self._tokens: tuple[int, int] | None = None
        if getattr(model.config, "pad_token_id", None) is None and tokenizer.pad_token_id is not None:
            # decoder classifiers (Llama, GPT-2) find each row's last token through the config's pad id
            model.config.pad_token_id = tokenizer.pad_token_id

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def tokens_used(self) -> tuple[int, int] | None:
        return self._tokens

    def run_batch(self, requests: Sequence[ClassifyText]) -> list[ClassProbs]:
        import torch

        out: list[ClassProbs | None] = [None] * len(requests)
        real = padded = 0
        for max_length in sorted({r.max_length for r in requests}):  # one tokenizer call per cut
            idx = [i for i, r in enumerate(requests) if r.max_length == max_length]
            enc = self.tokenizer([requests[i].text for i in idx], return_tensors="pt", padding=True, truncation=True,
                                 max_length=max_length, return_attention_mask=True)
            enc = {k: v.to(self.model.device) for k, v in enc.items()}
            try:
                with torch.no_grad():
                    logits = self.model(**enc).logits
            except RuntimeError as e:  # torch's OutOfMemoryError is one: the executor halves the batch and retries
                if "out of memory" not in str(e).lower():
                    raise
                raise OutOfMemory(f"{len(idx)} classify_text request(s) did not fit on {self.device}: {e}") from None
            probs = torch.softmax(logits, dim=-1).float().cpu().numpy()
            real += int(enc["attention_mask"].sum())
            padded += int(enc["attention_mask"].numel())
            for row, i in enumerate(idx):
                out[i] = ClassProbs(probs[row].copy())
        self._tokens = (real, padded)
        return out  # type: ignore[return-value]
