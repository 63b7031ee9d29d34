"""``--answer-only`` and the chat template's quirks, on tiny tokenizers (the real model: test_realmodel.py).

open-unlearning scores everything after the prompt: a ChatML template's ``<|im_end|>`` and newline
after the answer, and the eos it appends. ``answer_only=True`` scores the answer's own tokens; the
template's facts (its default system prompt, what it writes after an answer and how many tokens
that is) are read from the files alone for run.json and the one warning line.
"""

from __future__ import annotations

import pytest

from evaldag.benchmarks import common
from evaldag.engine.adapters.base import PromptTemplate
from evaldag.engine.adapters.chat_quirks import folder_facts, quirk_text, vocab_counter
from evaldag.engine.adapters.hf import HFModel

from ..tiny_models import DEFAULT_TEXTS, EOT, tiny_llama, tiny_tokenizer

# ChatML's shape (SmolLM2's template) spelt with the tiny tokenizer's special tokens: a default
# system turn, and each turn ended by the eos and a newline
IM_END = EOT
CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|start_header_id|>system\nYou are a tiny helper<|eot_id|>\n' }}{% endif %}"
          "{{'<|start_header_id|>' + message['role'] + '\n' + message['content'] + '<|eot_id|>' + '\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant\n' }}{% endif %}")
Q, A = "Where was the author Dara Ilves born?", "Dara Ilves was born in the city of Cusco."


@pytest.fixture(scope="module")
def chatml(tmp_path_factory):
    """A checkpoint folder whose tokenizer is ChatML-shaped with a default system prompt, pad = eos = the turn's end."""
    tok = tiny_tokenizer(DEFAULT_TEXTS, eos=IM_END, pad=None)
    tok.chat_template = CHATML
    folder = tmp_path_factory.mktemp("chatml")
    tiny_llama(tok, initializer_range=0.3).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_answer_only_scores_exactly_the_answers_tokens(chatml):
    enc = HFModel(chatml).encoder()
    tok = enc.tokenizer
    full = enc.encode_qa(Q, A, PromptTemplate.chat())
    mine = enc.encode_qa(Q, A, PromptTemplate.chat(), answer_only=True)
    assert tok.decode(list(mine.continuation_ids)) == A
    assert [tok.decode([i]) for i in full.continuation_ids[-3:]] == [IM_END, "\n", IM_END]
    assert full.continuation_ids[: len(mine.continuation_ids)] == mine.continuation_ids
    assert len(full.continuation_ids) == len(mine.continuation_ids) + 3 and full.context_ids == mine.context_ids
    # plain template: the joint split (the boundary token is the answer's), no appended eos
    plain = enc.encode_qa(Q, A, PromptTemplate.plain(), answer_only=True)
    joint = enc.encode_qa(Q, A, PromptTemplate.plain(), joint=True)
    assert plain.continuation_ids == joint.continuation_ids[:-1] and joint.continuation_ids[-1] == tok.eos_token_id
    assert tok.decode(list(plain.continuation_ids)).strip() == A


def test_the_templates_facts_come_from_the_files_alone(chatml, tmp_path):
    f = folder_facts(chatml)
    assert (f.default_system_prompt, f.tail, f.tail_tokens, f.eos_appended) == ("You are a tiny helper", "<|eot_id|>\n",
                                                                                  3, True)
    assert quirk_text(f) == ("the chat template writes '<|eot_id|>\\n' after each answer and open-unlearning appends "
                             "the eos: 3 template tokens scored with every answer (--answer-only scores the answer's "
                             "own tokens only)")
    # Llama-3 style: the turn's end is the eos, no default system turn, nothing appended
    llama = tiny_tokenizer(DEFAULT_TEXTS, eos=EOT, pad=None)
    llama.save_pretrained(tmp_path)
    f = folder_facts(tmp_path)
    assert (f.default_system_prompt, f.tail, f.tail_tokens, f.eos_appended) == (None, EOT, 1, False)
    # a GGUF's vocabulary: control tokens whole, the rest by GPT-2's byte-level spelling
    count = vocab_counter([IM_END, "\u010a", "a", "ab"], [3, 1, 1, 1], byte_level=True)
    assert count("<|eot_id|>\n") == [IM_END, "\n"] and count("ab\n") == ["ab", "\n"]


def test_one_warning_line_names_both_quirks_and_answer_only_silences_the_tails(chatml, capsys):
    tail = ("the chat template writes '<|eot_id|>\\n' after each answer and open-unlearning appends the eos: 3 "
            "template tokens scored with every answer (--answer-only scores the answer's own tokens only)")
    mask = ("the pad token <|eot_id|> (pad = eos) is also written by the chat template at each turn's end, so the "
            "default masking hides every <|eot_id|> of the prompt from attention and changes scores; "
            "--attention-mask padding masks only padding")
    chat = PromptTemplate.chat()
    for opts, said in ((dict(), f"{tail}; and {mask}"), (dict(attention_mask="padding"), tail),
                       (dict(answer_only=True), mask), (dict(answer_only=True, attention_mask="padding"), None)):
        common.check_model(str(chatml), common.ModelOptions(template=chat, **opts))
        err = capsys.readouterr().err
        assert err == (f"evaldag: warning: --model {chatml}: {said} (docs/gotchas.md)\n" if said else "")
    common.check_model(str(chatml), common.ModelOptions(template=PromptTemplate.plain()))
    assert capsys.readouterr().err == ""


def test_the_option_reaches_every_scorer_that_scores_answers_and_only_them():
    from evaldag.benchmarks.tofu.benchmark import TofuBenchmark
    from evaldag.benchmarks.tofu.config import TofuConfig
    from evaldag.engine.graph import Graph

    def scorers(**kw):
        cfg = TofuConfig(model="m", metrics=("forget_Q_A_Prob", "forget_Q_A_ROUGE", "mia_gradnorm"), **kw)
        graph = Graph(TofuBenchmark().plan(cfg))
        return {v.node.metric.name: v.node.params.model_dump() for v in graph.order() if v.node.metric.name in
                ("qa_stats", "grad_norms", "qa_generations")}

    on, off = scorers(answer_only=True), scorers()
    assert on["qa_stats"]["answer_only"] and on["grad_norms"]["answer_only"]
    assert not off["qa_stats"]["answer_only"] and not off["grad_norms"]["answer_only"]
    assert "answer_only" not in on["qa_generations"]  # a generation's prompt has no answer to score


def test_run_json_names_the_system_prompt_only_where_the_template_added_it():
    from evaldag.engine.results import system_prompts_added

    resources = {"model": {"kind": "model", "chat_default_system_prompt": "You are a tiny helper"},
                 "retain_model": {"kind": "model"}, "tofu_forget": {"kind": "rows"}}
    chat = PromptTemplate.chat().model_dump()
    assert system_prompts_added(resources, [chat]) == {"model": "You are a tiny helper"}
    assert system_prompts_added(resources, [PromptTemplate.chat(system_prompt="Be brief.").model_dump()]) == {}
    assert system_prompts_added(resources, [PromptTemplate.plain().model_dump()]) == {}


def test_a_runs_model_binding_carries_the_chat_facts_into_run_json(chatml):
    """Nodes see a model through its binding; run.json's record of it still names the system prompt."""
    from evaldag.engine.resources import ResourceSet
    from evaldag.engine.results import describe_resource

    bound = ResourceSet({"model": HFModel(chatml)}).get("model")
    assert describe_resource(bound)["chat_default_system_prompt"] == "You are a tiny helper"
