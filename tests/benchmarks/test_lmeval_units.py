"""lmeval's small parts: the thread bridge, and the task digest that makes an edited task recompute."""

from __future__ import annotations

import threading

import pytest

from tests.benchmarks.lmeval_tasks import need_lm_eval, write_tasks


def test_bridge_turns_calls_into_yields_and_returns_the_value():
    from evaldag.benchmarks.lmeval.bridge import bridged

    def fn(serve):
        a = serve([1, 2])
        assert serve([]) == []  # nothing asked, nothing yielded
        b = serve([3])
        return a + b

    gen = bridged(fn)
    assert next(gen) == [1, 2]
    assert gen.send([10, 20]) == [3]
    with pytest.raises(StopIteration) as stop:
        gen.send([30])
    assert stop.value.value == [10, 20, 30]


def test_bridge_raises_the_workers_error_and_stops_an_abandoned_worker():
    from evaldag.benchmarks.lmeval.bridge import bridged

    def bad(serve):
        serve(["x"])
        raise KeyError("from lm-evaluation-harness")

    gen = bridged(bad)
    next(gen)
    with pytest.raises(KeyError, match="from lm-evaluation-harness"):
        gen.send(["answer"])
    done = threading.Event()

    def waits(serve):
        try:
            serve(["y"])
        finally:
            done.set()

    gen = bridged(waits)
    next(gen)
    gen.close()  # the run dropped the scorer: the worker is released, not left blocked
    assert done.wait(5)


def test_task_digest_follows_the_data_and_the_yaml(tmp_path):
    need_lm_eval()
    from evaldag.benchmarks.lmeval.tasks import plan

    root = write_tasks(tmp_path / "tasks")
    first = plan(("fx_mc",), str(root)).digest
    assert plan(("fx_mc",), str(root)).digest == first
    data = root / "rows.jsonl"
    data.write_text(data.read_text().replace("Cusco", "Lima"))
    second = plan(("fx_mc",), str(root)).digest
    assert second != first
    (root / "fx_mc.yaml").write_text((root / "fx_mc.yaml").read_text().replace("num_fewshot: 1", "num_fewshot: 2"))
    assert plan(("fx_mc",), str(root)).digest not in (first, second)


def test_add_bos_token_and_prefix_token_follow_hflms_settings():
    """No weights load: the tokenizer alone decides the ids, as HFLM's settings say (0.4.13 adds the BOS by default)."""
    need_lm_eval()
    from evaldag.benchmarks.lmeval.lm import EvaldagLM
    from tests.benchmarks.lmeval_tasks import MODEL

    default, off = EvaldagLM(str(MODEL)), EvaldagLM(str(MODEL), add_bos_token=False, prefix_token_id=1)
    bos = default.tokenizer.bos_token_id
    assert default.tok_encode("Hello world")[0] == bos and off.tok_encode("Hello world")[0] != bos
    assert default.tok_encode("Hello world")[1:] == off.tok_encode("Hello world")
    assert (default.prefix_token_id, off.prefix_token_id) == (bos, 1)
    assert default.identity()["adds_bos"] is True and off.identity()["adds_bos"] is False
    assert default.identity()["max_length"] == 1024  # the checkpoint's max_position_embeddings, read from config.json
