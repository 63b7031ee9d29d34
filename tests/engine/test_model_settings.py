"""A model's settings: ``--model-arg [ROLE:]KEY=VALUE``, read and checked by the backend the
model's scheme names (``hf`` too), the old one-flag spellings kept as hidden, deprecated aliases."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import shutil
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from evaldag.benchmarks import common
from evaldag.engine import backend
from evaldag.engine.adapters import spec
from evaldag.engine.adapters.hf_tokenizer import HFModelTokenizer
from evaldag.engine.adapters.model_args import NOTES, settings
from evaldag.engine.backend import ModelResource
from evaldag.engine.options import read
from evaldag.engine.registry import BENCHMARKS

cli_main = importlib.import_module("evaldag.engine.cli.main")  # the module, not the function evaldag.engine.cli exports
FIX = Path(__file__).parents[1] / "fixtures"
TARGET, RETAIN = FIX / "tiny-llama" / "target", FIX / "tiny-llama" / "retain"


def parse(*argv: str, benches: tuple[str, ...] = ("tofu",)) -> argparse.Namespace:
    return cli_main.parser(list(benches), command="run").parse_args(["run", *benches, *argv])


def config(*argv: str) -> tuple[argparse.Namespace, object]:
    args = parse("--model", str(TARGET), "--data", str(FIX / "tofu_tiny"), *argv)
    return args, read(args, [BENCHMARKS.get("tofu")]).configs[0]


@pytest.fixture
def bare_retain(tmp_path: Path) -> Path:
    """The retain checkpoint without its tokenizer files: it needs ``retain:tokenizer=DIR``."""
    out = tmp_path / "retain"
    out.mkdir()
    for f in RETAIN.iterdir():
        if f.is_file() and not f.name.startswith(("tokenizer", "special_tokens", "vocab", "merges")):
            shutil.copy(f, out / f.name)
    return out


def test_a_role_prefix_gives_that_model_its_setting(bare_retain):
    _, cfg = config("--retain-model", str(bare_retain), "--model-arg", f"retain:tokenizer={TARGET}")
    assert cfg.backend_options == {"retain_model": {"tokenizer": str(TARGET)}}
    res = common.model_resources(cfg)
    assert type(res["retain_model"]) is HFModelTokenizer and res["retain_model"].tokenizer_source == str(TARGET)
    assert type(res["model"]).__name__ == "HFModel"  # the unprefixed pairs are --model's: none here


def test_the_old_spelling_is_the_same_pair_and_says_it_is_deprecated(bare_retain):
    new, cfg_new = config("--retain-model", str(bare_retain), "--model-arg", f"retain:tokenizer={TARGET}")
    old, cfg_old = config("--retain-model", str(bare_retain), "--retain-tokenizer", str(TARGET))
    assert cfg_old == cfg_new
    assert getattr(old, NOTES) == ["evaldag: warning: --retain-tokenizer is deprecated and goes in the next release; "
                                   "write --model-arg retain:tokenizer=VALUE"]
    assert not getattr(new, NOTES, None)
    eager = parse("--enforce-eager", "--max-model-len", "64", "--max-model-len", "128")  # the last one stands, as before
    assert eager.model_arg == ["enforce_eager=true", "max_model_len=128"]


def test_help_hides_the_old_spellings_and_names_them_deprecated():
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        parse("--help")
    text = " ".join(out.getvalue().split())
    for old in ("--tokenizer ", "--retain-tokenizer", "--reference-fallback", "--served-model ", "--max-model-len "):
        assert f"  {old}" not in out.getvalue()
    assert "--model-arg [ROLE:]KEY=VALUE" in text
    assert "Deprecated, for this release only: --tokenizer, --adapter-base, --served-model, --api-key-env, --fallback" in text


@pytest.mark.parametrize("argv,says", [
    (["--model-arg", "retian:tokenizer=x"], "--model-arg retian:tokenizer=x: no model 'retian' in this run; did you "
                                            "mean retain? (ROLE: is one of model, base, classifier, reference, retain; none means model)"),
    (["--model-arg", "deadline=3"], "--model-arg deadline=3: hf: models take no setting 'deadline' (they take: "
                                    "adapter_base, attention_mask, device, device_map, dtype, max_memory, tokenizer)"),
    (["--model-arg", "retain:tokenizr=x"], "--model-arg retain:tokenizr=x: hf: models take no setting 'tokenizr'; did "
                                           "you mean tokenizer? (they take: adapter_base, attention_mask, device, "
                                           "device_map, dtype, max_memory, tokenizer)"),
    (["--model-arg", "retain:tokenizer=a", "--model-arg", "retain:tokenizer=b"],
     "--model-arg retain:tokenizer=b: tokenizer is given twice (tokenizer=a before)"),
])
def test_a_bad_pair_is_one_line_naming_it(argv, says):
    with pytest.raises(ValueError) as e:
        _, cfg = config("--retain-model", str(RETAIN), *argv)
        common.model_resources(cfg)
    assert str(e.value) == says


def test_a_roles_pairs_on_a_benchmark_without_that_model_are_refused():
    args = parse("--model", str(TARGET), "--model-arg", "retain:tokenizer=x", benches=("lmeval",))
    with pytest.raises(ValueError, match=r"^--model-arg retain:tokenizer=x: no model 'retain' in this run"):
        read(args, [BENCHMARKS.get("lmeval")])


class KnobSettings(BaseModel):
    knob: int = Field(1, ge=0)


class Knobbed(ModelResource):
    def __init__(self, target: str, settings: KnobSettings, dtype: str):
        self.target, self.settings, self.dtype = target, settings, dtype


def knobbed(target: str, dtype: str = "auto", model_args: dict | None = None) -> Knobbed:
    """A plugin backend's factory: ``dtype`` from the run, ``knob`` through its settings class."""
    return Knobbed(target, settings(KnobSettings, model_args, "knob"), dtype)


knobbed.settings = KnobSettings


@pytest.fixture
def knob_backend():
    backend.register_backend("knob", knobbed)
    yield
    backend._FACTORIES.pop("knob", None)


def test_a_plugin_backend_declares_its_own_settings(knob_backend):
    _, cfg = config("--dtype", "bf16", "--retain-model", "knob:B", "--model-arg", "retain:knob=7")
    res = common.model_resources(cfg)["retain_model"]
    assert (res.target, res.settings.knob, res.dtype) == ("B", 7, "bf16")
    with pytest.raises(ValueError, match=r"^--model-arg knob=-1: must be greater than or equal to 0$"):
        spec.resolve("knob:B", knob=-1)
    with pytest.raises(ValueError, match=r"^--model-arg knb=1: knob: models take no setting 'knb'; did you mean knob\?"):
        spec.resolve("knob:B", knb=1)


def test_every_scheme_hf_included_comes_from_the_backend_registry(monkeypatch):
    seen = []

    def hf(target: str, **kw):
        seen.append((target, kw))
        return "a resource"

    monkeypatch.setitem(backend._FACTORIES, "hf", hf)
    opts = common.ModelOptions(model=str(TARGET), dtype="fp32")
    assert common.hf_model(f"hf:{TARGET}", opts) == "a resource"
    assert seen == [(str(TARGET), {})]  # a factory that names no run flag gets none


def test_vllm_settings_are_typed_by_the_backend():
    with pytest.raises(ValueError, match=r"^--model-arg max_model_len=long: a whole number is needed$"):
        spec.resolve("vllm:/nowhere", max_model_len="long")
    with pytest.raises(ValueError, match=r"^--model-arg gpu_memory_utilization=2: "):
        spec.resolve("vllm:/nowhere", gpu_memory_utilization="2")


class _Bench:
    """The part of a benchmark the parser sees: its name and its options."""

    def __init__(self, name: str, declare):
        self.name, self.declare = name, declare

    def add_arguments(self, p):
        self.declare(p)


def test_two_benchmarks_share_one_declaration_or_fail_naming_both():
    from evaldag.engine.option_owners import OptionClash, add_shared, declare

    same = lambda p: add_shared(p, "--width", type=int, default=None, help="in its own words")  # noqa: E731
    p = argparse.ArgumentParser()
    declare(p, [_Bench("a", same), _Bench("b", lambda p: add_shared(p, "--width", type=int, default=None, help="mine"))])
    assert p.parse_args(["--width", "3"]).width == 3
    for other in (lambda p: add_shared(p, "--width", type=int, default=7),  # another default: another meaning
                  lambda p: p.add_argument("--width", type=int)):  # a plain declaration of the same option
        with pytest.raises(OptionClash) as e:
            declare(argparse.ArgumentParser(), [_Bench("a", same), _Bench("b", other)])
        assert str(e.value) == ("--width is declared by a and by b with different meanings; run them apart (one "
                                "evaldag run each), or give --width one shared declaration")
    with pytest.raises(OptionClash, match=r"^--out is declared by evaldag run and by b "):
        run_parser = argparse.ArgumentParser()
        run_parser.add_argument("--out")
        declare(run_parser, [_Bench("b", lambda p: p.add_argument("--out", default="x"))])


def test_tofu_and_probes_share_max_new_tokens_each_with_its_default():
    args = parse("--model", str(TARGET), "--data", str(FIX / "tofu_tiny"), benches=("tofu", "probes"))
    tofu, probes = read(args, [BENCHMARKS.get("tofu"), BENCHMARKS.get("probes")]).configs
    assert (tofu.max_new_tokens, probes.max_new_tokens) == (200, 300)
    args = parse("--model", str(TARGET), "--max-new-tokens", "64", benches=("tofu", "probes"))
    tofu, probes = read(args, [BENCHMARKS.get("tofu"), BENCHMARKS.get("probes")]).configs
    assert (tofu.max_new_tokens, probes.max_new_tokens) == (64, 64)


def test_a_clash_at_start_up_is_one_line(capsys):
    from evaldag.engine.benchmark import Benchmark

    class A(Benchmark):
        name = "clash_a"

        def add_arguments(self, p):
            p.add_argument("--knob", type=int)

    class B(Benchmark):
        name = "clash_b"

        def add_arguments(self, p):
            p.add_argument("--knob", type=float)

    BENCHMARKS.add(A)
    BENCHMARKS.add(B)
    try:
        assert cli_main.main(["run", "clash_a", "clash_b", "--knob", "1"]) == 2
    finally:
        BENCHMARKS.remove("clash_a")
        BENCHMARKS.remove("clash_b")
    assert capsys.readouterr().err == ("evaldag: error: --knob is declared by clash_a and by clash_b with different "
                                       "meanings; run them apart (one evaldag run each), or give --knob one shared "
                                       "declaration\n")


def test_run_tofu_help_lists_at_most_50_options():
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        parse("--help")
    options = [line for line in out.getvalue().splitlines() if line.startswith("  -")]
    assert len(options) <= 50, len(options)


def test_template_takes_a_file_and_the_run_wide_placement_flags_are_deprecated(tmp_path):
    f = tmp_path / "phi.yaml"
    f.write_text('template_args:\n  apply_chat_template: False\n  user_start_tag: "Q: "\n  user_end_tag: "\\n"\n'
                 '  asst_start_tag: "A: "\n  asst_end_tag: "\\n\\n"\n')
    _, new = config("--template", str(f))
    old_args, old = config("--template-args", str(f), "--device-map", "auto")
    assert new.template == old.template and new.template.user_start_tag == "Q: "
    assert old.device_map == "auto" and new.device_map is None
    assert getattr(old_args, NOTES) == [
        "evaldag: warning: --template-args is deprecated and goes in the next release; write --template FILE",
        "evaldag: warning: --device-map is deprecated and goes in the next release; write --model-arg "
        "device_map=VALUE (and retain:device_map=VALUE ... for the other models)"]
    with pytest.raises(ValueError, match=r"^--template nowhere\.yaml: give plain, chat or an open-unlearning "):
        config("--template", "nowhere.yaml")
    _, cfg = config("--model-arg", "device_map=auto")
    assert cfg.backend_options == {"model": {"device_map": "auto"}}
    assert common.model_resources(cfg)["model"].device_map == "auto"


def test_the_classifier_settings_are_model_args_of_its_role():
    _, new = config("--model-arg", "classifier:max_length=8", "--model-arg", "classifier:class_id=1")
    old_args, old = config("--classifier-max-length", "8", "--classifier-class-id", "1")
    assert (new.classifier_max_length, new.classifier_class_id) == (old.classifier_max_length, old.classifier_class_id) == (8, 1)
    assert len(getattr(old_args, NOTES)) == 2
    with pytest.raises(ValueError, match=r"^--model-arg classifier:width=3: the classifier takes no setting 'width' "
                                         r"\(it takes: max_length, class_id\)$"):
        config("--model-arg", "classifier:width=3")
    with pytest.raises(ValueError, match=r"^--model-arg classifier:max_length=0: wants a whole number > 0"):
        config("--model-arg", "classifier:max_length=0")
