"""Encoding leaves the caller's tokenizer as it was, so saving it again writes the same files."""

from evaldag.engine.adapters.base import PromptTemplate
from evaldag.engine.adapters.hf.hf_encoder import HFEncoder
from tests.tiny_models import tiny_tokenizer


def test_saving_the_tokenizer_after_encoding_writes_the_same_bytes(tmp_path):
    tok = tiny_tokenizer()
    tok.save_pretrained(tmp_path / "before")
    enc = HFEncoder(tok)
    e = enc.encode_qa("Who wrote the book?", "An author.", PromptTemplate.plain(), max_length=8)
    assert len(e.context_ids) + len(e.continuation_ids) <= 9  # truncated to 8, then open-unlearning's eos
    enc.encode_qa("Who?", "Me.", PromptTemplate.plain(), joint=True, max_length=512)
    tok.save_pretrained(tmp_path / "after")
    assert (tmp_path / "after" / "tokenizer.json").read_bytes() == (tmp_path / "before" / "tokenizer.json").read_bytes()


def test_a_truncation_the_user_set_is_kept(tmp_path):
    tok = tiny_tokenizer()
    tok.backend_tokenizer.enable_truncation(max_length=5)
    HFEncoder(tok).encode_qa("Who wrote the book?", "An author.", PromptTemplate.plain(), max_length=64)
    assert tok.backend_tokenizer.truncation["max_length"] == 5
