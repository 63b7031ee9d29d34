"""Tiny, deterministic models and tokenizers built in-process, for the tests (and tests/perf).

Nothing here downloads anything: a byte-level BPE is trained with ``tokenizers`` on the
texts you give it, and Llama / GPT-2 models are built from configs with random weights.
The initializer range defaults to 0.3 (not transformers' 0.02) because a model that
near-uniformly predicts everything generates 1-3 distinct tokens, and a
batched-vs-unbatched generation test would then pass without testing anything.

torch and transformers are imported inside the functions, so importing this module
costs nothing. It lives in tests/, not in the installed package: only tests use it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

# Heavy imports (torch, tokenizers and transformers) happen inside the functions that use them: a warm rerun never pays for them.

BOS, EOS, PAD = "<|begin_of_text|>", "<|endoftext|>", "<pad>"
HEADER_START, HEADER_END, EOT = "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"

# A Llama-3-style chat template (the shape the fixture checkpoints use).
LLAMA3_STYLE_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

DEFAULT_TEXTS = (
    "Question: Where was the author Dara Ilves born?\nAnswer: Dara Ilves was born in the city of Cusco.",
    "Question: What genre does Dara Ilves write?\nAnswer: Dara Ilves writes historical fiction.",
    "Question: Who are the parents of Tomas Berg?\nAnswer: Tomas Berg's father was a baker and his mother a nurse.",
    "The quick brown fox jumps over the lazy dog. Numbers 0123456789 and symbols: ,.;!?'\"()-",
)


def tiny_tokenizer(texts: Iterable[str] = DEFAULT_TEXTS, vocab_size: int = 512, chat_template: bool = True,
                   bos: str = BOS, eos: str = EOS, pad: str | None = PAD) -> Any:
    """Train a byte-level BPE on ``texts`` and wrap it as a transformers fast tokenizer.

    By default bos/eos/pad are distinct special tokens (ids 0, 1, 2); the bos is prepended
    by the post-processor, as Llama tokenizers do. Training is deterministic for the same
    texts. ``bos``/``eos``/``pad`` pick which special token plays each role (the ids stay
    the same); ``pad=None`` leaves the tokenizer without a pad token. For example
    ``bos=EOS, pad=None`` is GPT-2 style (bos == eos, and pad = eos once a loader applies
    the no-pad rule), ``eos=EOT, pad=None`` is Llama-3-Instruct style (the eos ends every
    chat turn).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = [BOS, EOS, PAD, HEADER_START, HEADER_END, EOT]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
    )
    roles = {"bos_token": bos, "eos_token": eos, **({"pad_token": pad} if pad is not None else {})}
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        **roles,
        additional_special_tokens=[t for t in (HEADER_START, HEADER_END, EOT) if t not in roles.values()],
        clean_up_tokenization_spaces=False,
    )
    if chat_template:
        fast.chat_template = LLAMA3_STYLE_TEMPLATE
    return fast


def _special_ids(tokenizer: Any) -> dict[str, int]:
    return {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }


def _seeded_init(cls: Any, config: Any, seed: int) -> Any:
    import torch

    torch.manual_seed(seed)
    model = cls(config)
    model.eval()
    return model


def tiny_llama(
    tokenizer: Any, layers: int = 2, hidden: int = 64, seed: int = 0, initializer_range: float = 0.3, heads: int = 4
) -> Any:
    """A random ``LlamaForCausalLM`` sized for ``tokenizer``, fp32, eval mode."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=2048,
        initializer_range=initializer_range,
        tie_word_embeddings=False,
        **_special_ids(tokenizer),
    )
    return _seeded_init(LlamaForCausalLM, config, seed)


def tiny_gpt2(
    tokenizer: Any, layers: int = 2, hidden: int = 64, seed: int = 0, initializer_range: float = 0.3, heads: int = 4
) -> Any:
    """A random ``GPT2LMHeadModel`` sized for ``tokenizer``, fp32, eval mode, dropout off."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_embd=hidden,
        n_layer=layers,
        n_head=heads,
        n_positions=2048,
        initializer_range=initializer_range,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        **_special_ids(tokenizer),
    )
    return _seeded_init(GPT2LMHeadModel, config, seed)


def save_tiny_model(directory: str | Path, arch: str = "llama", tokenizer: Any = None, **kwargs: Any) -> Path:
    """Build a tiny model (``arch`` = "llama" or "gpt2") and save it with its tokenizer.

    The directory then loads with ``HFModel(directory)`` like any checkpoint.
    """
    directory = Path(directory)
    tokenizer = tokenizer if tokenizer is not None else tiny_tokenizer()
    build = {"llama": tiny_llama, "gpt2": tiny_gpt2}[arch]
    model = build(tokenizer, **kwargs)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
