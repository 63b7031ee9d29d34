"""Server I/O faults: ``evaldag run tofu --model openai:URL`` against a server that misbehaves
(tests/bad_server.py, on 127.0.0.1), credentials in the server's URL, and a LoRA adapter over a
base of another hidden size.

A row per case. Failed clearly: exit 1 or 2, no traceback, every error line one line naming
the server (and what the case must name); a hang or a rate limit must also be said on stderr
while it lasts. Recovered: a URL with credentials works (exit 0). Crashed: a traceback, an
error line that does not say where, or no answer within the watchdog (a run silent for
minutes). Wrong numbers: exit 0 where the server failed, or a secret printed or recorded
anywhere (stdout, stderr, --out, the cache), as the campaign counts harm.

Where the evaldag under test has ``--model-arg``, short deadlines and caps go through it; an
evaldag without it runs with its own defaults under the same watchdog, as a user would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests"))
from bad_server import BadServer  # noqa: E402

FIX = ROOT / "tests" / "fixtures"
EVALDAG = str(Path(sys.executable).with_name("evaldag"))
WATCHDOG = 120.0  # seconds: a run still silent then is a crash (a server hanging, said by nobody)
RSS_MB = 1000  # a refused runaway body must leave the process about an ordinary run's size (330 MB)
MEASURE = ("import resource, sys\nfrom evaldag.engine.cli import main\nrc = main(sys.argv[1:])\n"
           "print('maxrss_mb', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, file=sys.stderr)\n"
           "raise SystemExit(rc)")


def _has_model_arg() -> bool:
    r = subprocess.run([EVALDAG, "run", "tofu", "--help"], capture_output=True, text=True, timeout=300)
    return "--model-arg" in r.stdout


def _run(model: str, d: Path, settings: list[str]) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", MEASURE, "run", "tofu", "--model", model, "--tokenizer", str(FIX / "tiny-llama" / "target"),
           "--data", str(FIX / "tofu_tiny"), "--metrics", "forget_Q_A_Prob", "--out", str(d / "out"),
           "--cache-dir", str(d / "cache"), *settings]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=WATCHDOG, env=env)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, -999, "", f"silent for {WATCHDOG:.0f} s: killed")


def _every_byte(*roots: Path) -> str:
    return "".join(p.read_bytes().decode("latin-1") for r in roots if r.exists() for p in sorted(r.rglob("*"))
                   if p.is_file())


def _judge(c, kind: str, proc: subprocess.CompletedProcess, d: Path, server: str, *, works: bool = False,
           must: tuple[str, ...] = (), said: str = "", secrets: tuple[str, ...] = ()) -> None:
    row = c.rows[kind]
    row[0] += 1
    shown = proc.stdout + proc.stderr
    stderr = "\n".join(x for x in proc.stderr.splitlines() if not x.startswith("maxrss_mb"))
    leaked = [s for s in secrets if s in shown + _every_byte(d / "out", d / "cache")]
    errors = [x for x in proc.stdout.splitlines() if x.startswith("FAILED ")]
    errors += [x for x in stderr.splitlines() if x.startswith("evaldag: error:")]
    rss = int(proc.stderr.rsplit("maxrss_mb", 1)[1].split()[0]) if "maxrss_mb" in proc.stderr else 0
    traced = "Traceback" in shown or any(x.startswith("    ") for x in proc.stdout.splitlines())
    clear = (proc.returncode in (1, 2) and not traced and errors and rss < RSS_MB
             and all(server in e and all(m in e for m in must) for e in errors) and (not said or said in stderr))
    note = ""
    if leaked:
        row[4] += 1
        note = f"printed or recorded a secret ({', '.join(leaked)})"
    elif works and proc.returncode == 0:
        row[1] += 1
    elif not works and proc.returncode == 0:
        row[4] += 1
        note = "exit 0 from a failing server"
    elif clear:
        row[2] += 1
    else:
        row[3] += 1
        note = (f"{rss} MB resident" if rss >= RSS_MB else "not said while it lasted" if said and said not in stderr
                else (errors or stderr.strip().splitlines() or [""])[-1][:160])
    if note:
        c.notes.append(f"{kind} (trial {c.n}, exit {proc.returncode}): {note}")


def _adapter_of_another_base(c) -> None:
    """A LoRA adapter trained on a hidden-size-32 base, pointed at the fixture base (64)."""
    kind = "adapter over a base of another hidden size"
    d = c.trial_dir()
    build = ("import json, sys, torch\nfrom peft import LoraConfig, get_peft_model\n"
             "from transformers import LlamaConfig, LlamaForCausalLM\ntorch.manual_seed(0)\n"
             "m = LlamaForCausalLM(LlamaConfig(vocab_size=1024, hidden_size=32, intermediate_size=64, num_hidden_layers=2,"
             " num_attention_heads=2, num_key_value_heads=2, head_dim=16))\n"
             "get_peft_model(m, LoraConfig(r=4, target_modules=['q_proj', 'v_proj', 'down_proj'], init_lora_weights=False))"
             ".save_pretrained(sys.argv[1])\n")
    adapter = d / "adapter"
    made = subprocess.run([sys.executable, "-c", build, str(adapter)], capture_output=True, text=True, timeout=600)
    if made.returncode != 0:
        c.notes.append(f"{kind}: skipped, the adapter could not be made (peft installed?): "
                       f"{(made.stderr.strip().splitlines() or [''])[-1][:120]}")
        return
    conf = json.loads((adapter / "adapter_config.json").read_text())
    base = FIX / "tiny-llama" / "target"
    (adapter / "adapter_config.json").write_text(json.dumps({**conf, "base_model_name_or_path": str(base)}))
    cmd = [sys.executable, "-c", MEASURE, "run", "tofu", "--model", str(adapter), "--data", str(FIX / "tofu_tiny"),
           "--metrics", "forget_Q_A_Prob", "--out", str(d / "out"), "--cache-dir", str(d / "cache")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
    _judge(c, kind, proc, d, str(adapter), must=("hidden_size",))


def run(c) -> None:
    new = _has_model_arg()
    fast = ["--model-arg", "retries=1", "--model-arg", "backoff=0.05"] if new else []
    cases = [  # (row, server mode, --model-arg settings, what each error line must name, what stderr must say)
        ("server hangs", "hang", ["--model-arg", "timeout=1", "--model-arg", "deadline=4"], ("deadline",), "retrying"),
        ("server rate-limits (429, Retry-After)", "429", ["--model-arg", "deadline=4"], ("429",), "throttled"),
        ("server answers 500 after retries", "500", fast, ("500",), ""),
        ("server answer not JSON", "notjson", fast, ("not JSON",), ""),
        ("server answer nested 100,000 deep", "nested", fast, ("nested",), ""),
        ("server answer with a wrong choice count", "choices", fast, ("choices",), ""),
        ("server answer of 300 MB", "huge", [], ("max_body_mb",), ""),
        ("server fails after its checks", "probe500", fast, ("500",), ""),
    ]
    for kind, mode, settings, must, said in cases:
        d = c.trial_dir()
        with BadServer(mode, huge_mb=300) as s:
            t = time.monotonic()
            proc = _run(f"openai:{s.url}/v1", d, settings if new else [])
            if time.monotonic() - t > WATCHDOG / 2:
                c.notes.append(f"{kind} (trial {c.n}): took {time.monotonic() - t:.0f} s")
        _judge(c, kind, proc, d, f"openai:{s.url}/v1", must=must, said=said)
    secret, qsecret = "PASS-5e6f7a", "QKEY-8b9c0d"
    for kind, auth, query, mode in (("URL with user:password@ (basic auth)", f"user:{secret}", None, "ok"),
                                    ("URL with ?api_key= on every route", None, f"api_key={qsecret}", "ok"),
                                    ("URL credentials, server failing", f"user:{secret}", f"api_key={qsecret}", "500")):
        d = c.trial_dir()
        with BadServer(mode, auth=auth, query=query) as s:
            url = s.url.replace("http://", f"http://{auth}@") if auth else s.url
            proc = _run(f"openai:{url}/v1" + (f"?{query}" if query else ""), d, fast if mode != "ok" else [])
        _judge(c, kind, proc, d, f"127.0.0.1:{s.port}", works=mode == "ok", secrets=(secret, qsecret))
    _adapter_of_another_base(c)
