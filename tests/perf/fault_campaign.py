"""Fault campaign: break a real cache of ``evaldag run tofu`` every way we know, rerun, compare.

    python tests/perf/fault_campaign.py [--kills N] [--corruptions M] [--seed S] [--work DIR]

On the fixture checkpoints (tests/fixtures/tiny-llama) and data (tests/fixtures/tofu_tiny)
it makes an uninterrupted baseline, then for every trial copies the baseline cache,
injects one fault, reruns ``evaldag run tofu`` in a subprocess and compares
TOFU_EVAL/TOFU_SUMMARY with the baseline. Faults:

* SIGKILL of a cold run at a random moment (then a rerun);
* corruption of a random cache file of each kind (node entry, history, file-hash memo,
  request database, its WAL) in each mode (truncate, bit flip, zero page, delete); node
  entries are removed alongside request-database faults, so the rerun has to read it;
* a full disk: the cache, then --out, on a small tmpfs when run as root (else a patched
  writer); then space is freed and the run resumes;
* hostile entries: a header claiming 2^60 bytes, JSON nested 100,000 deep, a 100 MB
  string, a history file of the wrong type;
* a checkpoint swapped under its old mtime, a misplaced entry, a forged entry
  (caught by ``cache verify --deep``, not by a run: the cache is not authenticated),
  prune with a link to outside, an orphan temp file, eight writers of one --out.

It prints one row per fault kind: trials, recovered with identical results, failed
clearly (a one-line error, no traceback), crashed, wrong numbers. The goal: 0 crashed
and 0 wrong numbers in every row. A small deterministic subset runs in the default test
run (tests/engine/test_faults.py, tests/engine/test_cache_trust.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
EVALDAG = str(Path(sys.executable).with_name("evaldag"))
METRICS = "forget_Q_A_Prob,forget_truth_ratio,forget_quality,forget_Q_A_ROUGE,model_utility,privleak,extraction_strength"
DRIFT = 2e-5  # the largest batch-shape drift measured (docs/cache.md): beyond it a difference is a wrong number
COLUMNS = ("trials", "recovered", "failed clearly", "crashed", "wrong numbers")


def argv(model: Path, out: Path, cache: Path) -> list[str]:
    return [EVALDAG, "run", "tofu", "--model", str(model), "--data", str(FIX / "tofu_tiny"), "--metrics", METRICS,
            "--retain-model", str(FIX / "tiny-llama" / "retain"), "--device", "cpu", "--dtype", "fp32",
            "--quiet", "--out", str(out), "--cache-dir", str(cache)]


def evaldag(cmd: list[str], timeout: float = 900, prelude: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    if prelude:  # run through python so a fault can be patched in first
        code = prelude + "\nfrom evaldag.engine.cli import main\nraise SystemExit(main(sys.argv[1:]))"
        cmd = [sys.executable, "-c", "import sys\n" + code, *cmd[1:]]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(cmd, -999, "", f"timeout: {e}")


def drift(a, b) -> float:
    """Largest relative difference between two JSON values of the same shape (inf if shapes differ)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return max((drift(a[k], b[k]) for k in a), default=0.0) if a.keys() == b.keys() else float("inf")
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return max((drift(x, y) for x, y in zip(a, b)), default=0.0) if len(a) == len(b) else float("inf")
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        if a == b or (a != a and b != b):
            return 0.0
        return abs(a - b) / max(abs(a), abs(b))
    return 0.0 if a == b else float("inf")


def outputs(out: Path) -> tuple | None:
    try:
        return tuple(json.loads((out / f"TOFU_{k}.json").read_text()) for k in ("EVAL", "SUMMARY"))
    except (OSError, ValueError):
        return None


class Campaign:
    def __init__(self, work: Path, seed: int):
        self.work, self.rng = work, random.Random(seed)
        self.rows: dict[str, list[int]] = defaultdict(lambda: [0] * len(COLUMNS))
        self.notes: list[str] = []
        self.n = 0
        self.target = FIX / "tiny-llama" / "target"

    # ------------------------------------------------------------------ bookkeeping
    def trial_dir(self) -> Path:
        self.n += 1
        d = self.work / f"t{self.n:03d}"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        return d

    def classify(self, kind: str, proc: subprocess.CompletedProcess, got: tuple | None, want: tuple | None, note: str = "") -> None:
        row = self.rows[kind]
        row[0] += 1
        crashed = proc.returncode not in (0, 1, 2) or "Traceback" in proc.stderr
        if crashed:
            row[3] += 1
        elif proc.returncode == 0 and got == want:
            row[1] += 1
        elif proc.returncode == 0:
            row[4] += 1
        else:
            row[2] += 1
        if crashed or (proc.returncode == 0 and got != want) or note:
            tail = (proc.stderr.strip().splitlines() or [""])[-1][:200]
            self.notes.append(f"{kind} (trial {self.n}, exit {proc.returncode}): {note or tail}")

    def warm_copy(self, d: Path, keep_objects: bool = True) -> Path:
        cache = d / "cache"
        shutil.copytree(self.cache0, cache, symlinks=True)
        if not keep_objects:
            shutil.rmtree(cache / "objects", ignore_errors=True)
        return cache

    # ------------------------------------------------------------------ baseline
    def baseline(self) -> None:
        self.cache0, self.out0 = self.work / "cache0", self.work / "out0"
        t = time.time()
        proc = evaldag(argv(self.target, self.out0, self.cache0))
        if proc.returncode != 0:
            raise SystemExit(f"baseline failed:\n{proc.stderr}")
        self.want = outputs(self.out0)
        self.cold_seconds = time.time() - t
        retain_out = self.work / "out-retain"
        evaldag(argv(FIX / "tiny-llama" / "retain", retain_out, self.work / "cache-retain"))
        self.want_retain = outputs(retain_out)

    # ------------------------------------------------------------------ faults
    def kills(self, n: int) -> None:
        for _ in range(n):
            d = self.trial_dir()
            cmd = argv(self.target, d / "out", d / "cache")
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
            time.sleep(self.rng.uniform(0.5, max(1.0, self.cold_seconds)))
            p.send_signal(signal.SIGKILL)
            p.wait()
            proc = evaldag(cmd)
            self.classify("SIGKILL at a random point", proc, outputs(d / "out"), self.want)

    def corruptions(self, m: int) -> None:
        modes = {"truncate": self._truncate, "bit flip": self._flip, "zero page": self._zero, "delete": os.unlink}
        kinds = {
            "node entry": lambda c: sorted((c / "objects").glob("*/*.safetensors")),
            "history": lambda c: sorted((c / "history").glob("*.json")),
            "file-hash memo": lambda c: sorted((c / "filehash").glob("*.json")),
            "request batch file": lambda c: sorted((c / "requests").glob("*/*.batch")),
            "request index": lambda c: sorted((c / "index").glob("requests-*.sqlite")),
        }
        for kind, files in kinds.items():
            for mode, damage in modes.items():
                for _ in range(m):
                    d = self.trial_dir()
                    cache = self.warm_copy(d)
                    targets = [p for p in files(cache) if p.exists()]
                    if not targets:
                        continue
                    damage(self.rng.choice(targets))
                    if kind.startswith("request"):  # make the rerun read the request store
                        shutil.rmtree(cache / "objects", ignore_errors=True)
                    proc = evaldag(argv(self.target, d / "out", cache))
                    self.classify(f"{kind}: {mode}", proc, outputs(d / "out"), self.want)

    def _truncate(self, p: Path) -> None:
        os.truncate(p, int(p.stat().st_size * self.rng.uniform(0.05, 0.95)))

    def _flip(self, p: Path) -> None:
        data = bytearray(p.read_bytes())
        if data:
            i = self.rng.randrange(len(data))
            data[i] ^= 1 << self.rng.randrange(8)
            p.write_bytes(bytes(data))

    def _zero(self, p: Path) -> None:
        size = p.stat().st_size
        off = self.rng.randrange(0, max(1, size), 4096) if size > 4096 else 0
        with open(p, "r+b") as f:
            f.seek(off)
            f.write(b"\0" * min(4096, size - off))

    def full_disks(self) -> None:
        root = os.geteuid() == 0 and shutil.which("mount") is not None
        for where in ("cache", "out"):
            d = self.trial_dir()
            mnt = d / "tmpfs"
            mnt.mkdir()
            cache, out = (mnt / "cache", d / "out") if where == "cache" else (d / "cache", mnt / "out")
            size = 64 << 10 if where == "cache" else _bytes(self.out0) + (16 << 10)  # the old set fits, a new one not
            mounted = root and subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)]).returncode == 0
            if where == "out":
                shutil.copytree(self.cache0, cache)
                if mounted:
                    shutil.copytree(self.out0, out)  # an old set that must survive
            prelude = "" if mounted else _patched_disk(where)
            old = outputs(out)
            first = evaldag(argv(self.target, out, cache), prelude=prelude)
            left = [p for p in mnt.rglob(".evaldag-tmp-*")]
            clear = first.returncode == 2 and len(first.stderr.strip().splitlines()) == 1 and "cannot write" in first.stderr
            if mounted:
                subprocess.run(["mount", "-o", "remount,size=512m", str(mnt)])
            intact = outputs(out) == old
            proc = evaldag(argv(self.target, out, cache))
            note = "" if clear and not left and intact else f"first run: exit {first.returncode}, {first.stderr.strip()[:200]!r}, temporaries {len(left)}, old set intact {intact}"
            self.classify(f"full disk ({where}{', tmpfs' if mounted else ', patched'})", proc if not note else first, outputs(out), self.want, note)
            if mounted:
                subprocess.run(["umount", str(mnt)])

    def hostile(self) -> None:
        from evaldag.engine.cache.codec import FORMAT

        def st(header: bytes) -> bytes:
            return len(header).to_bytes(8, "little") + header

        meta = lambda skeleton: st(json.dumps({"__metadata__": {"format": FORMAT, "skeleton": skeleton, "meta": "{}", "sha256": "x"}}).encode())  # noqa: E731
        entries = {
            "header claims 2^60 bytes": lambda: (1 << 60).to_bytes(8, "little") + b"{}",
            "JSON nested 100,000 deep": lambda: meta("[" * 100000 + "]" * 100000),
            "a 100 MB string": lambda: meta("x" * (100 << 20)),
        }
        for name, make in entries.items():
            d = self.trial_dir()
            cache = self.warm_copy(d)
            for p in self.rng.sample(sorted((cache / "objects").glob("*/*.safetensors")), 1 if "MB" in name else 3):
                p.write_bytes(make())
            proc = evaldag(argv(self.target, d / "out", cache))
            self.classify(f"hostile entry: {name}", proc, outputs(d / "out"), self.want)
        d = self.trial_dir()
        cache = self.warm_copy(d, keep_objects=False)
        for i, p in enumerate(sorted((cache / "history").glob("*.json"))):
            p.write_text(["[1, 2]", '"text"', "[" * 100000, "null"][i % 4])
        proc = evaldag(argv(self.target, d / "out", cache))
        self.classify("hostile history file", proc, outputs(d / "out"), self.want)

    def trust(self) -> None:
        # 17.1: a checkpoint swapped for the retain model's weights, mtime set back
        d = self.trial_dir()
        model = d / "model"
        shutil.copytree(self.target, model)
        cache = d / "cache"
        evaldag(argv(model, d / "out1", cache))
        w = model / "model.safetensors"
        st = os.stat(w)
        shutil.copyfile(FIX / "tiny-llama" / "retain" / "model.safetensors", w)
        os.utime(w, ns=(st.st_atime_ns, st.st_mtime_ns))
        proc = evaldag(argv(model, d / "out", cache))
        # the retain model's numbers; its nodes were first computed beside the target's requests in the
        # first run, so values may differ from the retain-only baseline by batch-shape drift (docs/cache.md)
        got, worst = outputs(d / "out"), drift(outputs(d / "out"), self.want_retain)
        self.classify("swapped checkpoint, mtime set back", proc, self.want_retain if worst <= DRIFT else got, self.want_retain,
                      f"retain's numbers up to batch drift, max relative difference {worst:.1e}" if 0 < worst <= DRIFT else "")
        # 17.2: an entry copied to another node's path
        d = self.trial_dir()
        cache = self.warm_copy(d)
        a, b = self.rng.sample(sorted((cache / "objects").glob("*/*.safetensors")), 2)
        shutil.copyfile(a, b)
        proc = evaldag(argv(self.target, d / "out", cache))
        self.classify("misplaced entry", proc, outputs(d / "out"), self.want)
        # 17.2: a forged aggregator value with a recomputed checksum: verify --deep must say so
        d = self.trial_dir()
        cache = self.warm_copy(d)
        forged = _forge_one(cache)
        proc = evaldag([EVALDAG, "cache", "verify", "--deep", "--sample", "1000", "--cache-dir", str(cache)])
        caught = proc.returncode == 1 and f"differs: {forged}" in proc.stdout
        self.classify("forged entry (verify --deep)", subprocess.CompletedProcess([], 1 if caught else 0, "", ""),
                      ("forged",), None, "" if caught else f"not caught: {proc.stdout[-300:]!r}")
        # 17.3: prune with a link to outside; 17.4: an orphan temp file
        d = self.trial_dir()
        cache = self.warm_copy(d)
        outside = d / "outside"
        outside.mkdir()
        (outside / "model.safetensors").write_bytes(b"precious")
        os.utime(outside / "model.safetensors", (0, 0))
        (cache / "objects" / "zz").symlink_to(outside, target_is_directory=True)
        orphan = next((cache / "objects").glob("*/")) / ".evaldag-tmp-orphan.safetensors"
        orphan.write_bytes(b"\x10\0\0\0trunc")
        os.utime(orphan, (time.time() - 7200,) * 2)
        prune = evaldag([EVALDAG, "cache", "prune", "--older-than", "3650d", "--cache-dir", str(cache)])
        verify = evaldag([EVALDAG, "cache", "verify", "--cache-dir", str(cache)])
        proc = evaldag(argv(self.target, d / "out", cache))
        ok = (outside / "model.safetensors").read_bytes() == b"precious" and not orphan.exists() and verify.returncode == 0
        self.classify("link out of the cache + orphan temp", proc if prune.returncode == 0 else prune,
                      outputs(d / "out"), self.want, "" if ok else "outside file touched, orphan kept or verify failed")
        # 17.5: eight writers of one --out
        d = self.trial_dir()
        cache = self.warm_copy(d)
        procs = [subprocess.Popen(argv(self.target, d / "out", cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(8)]
        for p in procs:
            out, err = p.communicate(timeout=900)
            self.classify("8 writers of one --out", subprocess.CompletedProcess([], p.returncode, out, err), outputs(d / "out"), self.want)

    # ---- data and reference-log reading
    def hostile_data(self) -> None:
        """Broken data and retain logs: each must be one `evaldag: error:` line naming the file (and
        row/field/key), exit 2, no --out folder. Exit 0 is a wrong number (bad data scored)."""
        good = self.work / "tofu_good"
        if not good.exists():
            shutil.copytree(FIX / "tofu_tiny", good)
        forget = good / "forget10_perturbed.json"
        rows = [json.loads(line) for line in forget.read_text().splitlines() if line.strip()]
        logs0 = json.loads((FIX / "open_unlearning" / "retain_TOFU_EVAL.json").read_text())

        def data_case(kind: str, edit, must: list[str], metrics: str = "forget_truth_ratio") -> None:
            d = self.trial_dir()
            data = d / "data"
            shutil.copytree(good, data)
            edit(data)
            cmd = [EVALDAG, "run", "tofu", "--model", str(self.target), "--data", str(data), "--metrics", metrics,
                   "--device", "cpu", "--quiet", "--out", str(d / "out"), "--cache-dir", str(d / "cache")]
            self._refused(kind, evaldag(cmd), d / "out", [m.replace("DATA", str(data)) for m in must])

        def rows_with(i: int, **change):
            return lambda data: (data / forget.name).write_text(
                "".join(json.dumps({**r, **change} if n == i else r) + "\n" for n, r in enumerate(rows)))

        def latin1(name: str, line: int, word: bytes):
            def edit(data: Path) -> None:  # one Latin-1 e-acute in the word's second character
                lines = (data / name).read_bytes().split(b"\n")
                lines[line - 1] = lines[line - 1].replace(word, word[:1] + b"\xe9" + word[2:], 1)
                (data / name).write_bytes(b"\n".join(lines))
            return edit

        data_case("non-UTF-8 data file", latin1(forget.name, 2, b"Dara"), [f"DATA/{forget.name}: line 2 (row 1, 0-based)", "0xe9"])
        data_case("non-UTF-8 data file", latin1("holdout10.json", 5, b"Nessa"), ["DATA/holdout10.json: line 5 (row 4, 0-based)", "0xe9"],
                  "mia_min_k")
        d = self.trial_dir()
        (d / "model.yaml").write_bytes(b"template_args:\n  question_start_tag: 'Qu\xe9stion: '\n")
        cmd = [EVALDAG, "run", "tofu", "--model", str(self.target), "--data", str(good), "--metrics", "forget_Q_A_Prob",
               "--template-args", str(d / "model.yaml"), "--quiet", "--out", str(d / "out"), "--cache-dir", str(d / "cache")]
        self._refused("non-UTF-8 data file", evaldag(cmd), d / "out", [f"{d / 'model.yaml'}: line 2", "0xe9"])
        d = self.trial_dir()  # probe data (read while the graph is built)
        shutil.copytree(FIX / "probe_data", d / "pd")
        (d / "pd" / "isear" / "isear_samples.txt").write_bytes(b"I was happy\nI was caf\xe9\n")
        cmd = [EVALDAG, "run", "probes", "--probes", "isear", "--probe-data", str(d / "pd"), "--generator", f"hf:{self.target}",
               "--max-new-tokens", "2", "--sample-k", "2", "--no-cis", "--quiet", "--out", str(d / "out"), "--cache-dir", str(d / "cache")]
        self._refused("non-UTF-8 data file", evaldag(cmd), d / "out", [f"{d / 'pd' / 'isear' / 'isear_samples.txt'}: line 2", "0xe9"])
        d = self.trial_dir()  # WEAT embeddings text: parsed inside the run (a warm rerun never parses it)
        (d / "v.txt").write_bytes(b"2 2\ncat 0.1 0.2\ncaf\xe9 0.3 0.4\n")
        cmd = [EVALDAG, "run", "weat", "--embeddings", str(d / "v.txt"), "--quiet", "--out", str(d / "out"), "--cache-dir", str(d / "cache")]
        self._refused("non-UTF-8 embeddings (WEAT)", evaldag(cmd), d / "out", [f"{d / 'v.txt'}:3", "0xe9"])
        for i, change in enumerate([{"paraphrased_answer": ""}, {"paraphrased_answer": "  "},
                                    {"perturbed_answer": ["", *rows[3]["perturbed_answer"][1:]]},
                                    {"perturbed_answer": [*rows[3]["perturbed_answer"][:4], "\t"]}]):
            field = "paraphrased_answer" if "paraphrased_answer" in change else f"perturbed_answer.{0 if i == 2 else 4}"
            data_case("empty paraphrased/perturbed answer", rows_with(3, **change),
                      [f"DATA/{forget.name}: row 3 (0-based), field '{field}'", "empty"])

        def logs_case(kind: str, edit, must: list[str], metrics: str) -> None:
            d = self.trial_dir()
            logs = json.loads(json.dumps(logs0))
            edit(logs)
            (d / "TOFU_EVAL.json").write_text(json.dumps(logs))
            cmd = [EVALDAG, "run", "tofu", "--model", str(self.target), "--data", str(good), "--metrics", metrics,
                   "--retain-logs", str(d / "TOFU_EVAL.json"), "--device", "cpu", "--quiet",
                   "--out", str(d / "out"), "--cache-dir", str(d / "cache")]
            self._refused(kind, evaldag(cmd), d / "out", [f"{d / 'TOFU_EVAL.json'}: " + m for m in must])

        vbi = logs0["forget_truth_ratio"]["value_by_index"]
        logs_case("retain logs value_by_index list", lambda x: x["forget_truth_ratio"].update(value_by_index=list(vbi.values())),
                  ["forget_truth_ratio.value_by_index is a list"], "forget_truth_ratio,forget_quality")
        for auc in (float("inf"), 7.5):
            logs_case("retain logs AUC Infinity / 7.5", lambda x, auc=auc: x["mia_min_k"].update(agg_value=auc),
                      [f"mia_min_k.agg_value is {auc!r}"], "mia_min_k,privleak")

    def _refused(self, kind: str, proc: subprocess.CompletedProcess, out: Path, must: list[str]) -> None:
        """Failed clearly: exit 2, one stderr line naming every `must`, no --out folder; exit 0: wrong numbers."""
        row = self.rows[kind]
        row[0] += 1
        lines = proc.stderr.strip().splitlines()
        clear = (proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("evaldag: error: ")
                 and all(m in lines[0] for m in must) and not out.exists())
        if proc.returncode == 0:
            row[4] += 1
        elif clear:
            row[2] += 1
        else:  # a traceback, or an error that does not say where
            row[3] += 1
        if not clear:
            self.notes.append(f"{kind} (trial {self.n}, exit {proc.returncode}): {(lines or [''])[-1][:160]}")

    # ---- cache (a folder that is not a cache, a newer evaldag's entry, another user's, a stopped lock holder)
    def _toy(self, out: Path, cache: str, *extra: str, cwd: Path | None = None, env: dict | None = None,
             user: str | None = None) -> subprocess.CompletedProcess:
        cmd = [EVALDAG, "run", "toy", "--quiet", "--out", str(out), "--cache-dir", cache, *extra]
        return self._sh(cmd, cwd=cwd, env=env, user=user)

    @staticmethod
    def _sh(cmd: list[str], cwd: Path | None = None, env: dict | None = None, user: str | None = None,
            umask: int | None = None) -> subprocess.CompletedProcess:
        if user is not None:
            cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **(env or {})}
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd, env=env,
                                  preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)
        except subprocess.TimeoutExpired as e:
            return subprocess.CompletedProcess(cmd, -999, "", f"timeout: {e}")

    @staticmethod
    def _snap(root: Path) -> dict:
        return {str(p): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}

    @staticmethod
    def _toy_out(out: Path) -> tuple | None:
        try:
            return tuple(json.loads((out / f"TOY_{k}.json").read_text()) for k in ("EVAL", "SUMMARY"))
        except (OSError, ValueError):
            return None

    def _judge(self, kind: str, proc: subprocess.CompletedProcess, harm: str = "") -> None:
        """A refusal: one line and exit 2 with nothing harmed is 'failed clearly'; a traceback is a
        crash; anything harmed without one (a file of the user's deleted) counts as a wrong number."""
        one_line = proc.stderr.count("\n") == 1 and proc.stderr.startswith("evaldag: error: ")
        if "Traceback" in proc.stderr or proc.returncode not in (0, 1, 2):
            self.classify(kind, proc, None, None, harm)
        elif harm:
            self.classify(kind, subprocess.CompletedProcess([], 0, "", proc.stderr), ("harmed",), None, harm)
        else:
            note = "" if proc.returncode == 2 and one_line else f"exit {proc.returncode}: {proc.stderr.strip()[-150:]!r}"
            self.classify(kind, subprocess.CompletedProcess([], 2, "", proc.stderr), None, None, note)

    def hostile_cache(self) -> None:
        base = self.work / "toy-base"
        toy0 = self._toy(base / "out", str(base / "cache"))
        if toy0.returncode != 0:
            raise SystemExit(f"toy baseline failed:\n{toy0.stderr}")
        want = self._toy_out(base / "out")
        old = time.time() - 3 * 3600
        # 5: --cache-dir "" (an unset variable) from a working directory holding the user's files
        d = self.trial_dir()
        (d / "work").mkdir()
        (d / "work" / "notes.txt").write_text("mine")
        before = self._snap(d / "work")
        proc = self._toy(d / "out", "", cwd=d / "work")
        harm = "" if self._snap(d / "work") == before else "the working directory became a cache"
        self._judge("--cache-dir empty", proc, harm)
        # 5: --cache-dir ~ : a non-empty folder without the marker, then --init-cache
        d = self.trial_dir()
        home = d / "home"
        home.mkdir()
        swap = home / ".tmp-editor-swap"
        swap.write_text("unsaved")
        os.utime(swap, (old, old))
        (home / "thesis.tex").write_text("years of work")
        before = self._snap(home)
        proc = self._toy(d / "out", "~", env={"HOME": str(home)})
        harm = "" if self._snap(home) == before else "the home folder became a cache" + ("" if swap.exists() else ", ~/.tmp-editor-swap deleted")
        self._judge("--cache-dir ~ (non-empty unmarked)", proc, harm)
        # 5: a foreign .tmp-* file in a marked cache survives a run's sweep and `cache clear`
        d = self.trial_dir()
        cache = d / "cache"
        shutil.copytree(base / "cache", cache)
        foreign = [cache / ".tmp-editor-swap", cache / "history" / ".tmp-notes"]
        for f in foreign:
            f.write_text("not evaldag's")
            os.utime(f, (old, old))
        proc = self._toy(d / "out", str(cache))
        clear = self._sh([EVALDAG, "cache", "clear", "--yes", "--cache-dir", str(cache)])
        gone = [str(f.relative_to(cache)) for f in foreign if not f.exists()]
        if gone or clear.returncode:
            self._judge("foreign .tmp file survives sweep/clear", clear, f"deleted {', '.join(gone)}" if gone else "")
        else:
            self.classify("foreign .tmp file survives sweep/clear", proc, self._toy_out(d / "out"), want)
        # 6: cache ls on a valid entry in a newer format, then a run beside it
        from evaldag.engine.cache import codec

        d = self.trial_dir()
        cache = d / "cache"
        shutil.copytree(base / "cache", cache)
        entry = sorted((cache / "objects").glob("*/*.safetensors"))[0]
        value, meta = codec.unpack(entry.read_bytes())
        real, codec.FORMAT = codec.FORMAT, "evaldag-node-2"
        try:
            entry.write_bytes(codec.pack(value, meta))
        finally:
            codec.FORMAT = real
        data = entry.read_bytes()
        ls = self._sh([EVALDAG, "cache", "ls", "--cache-dir", str(cache)])
        proc = self._toy(d / "out", str(cache)) if ls.returncode == 0 else ls
        harm = "" if entry.exists() and entry.read_bytes() == data else "the newer entry was deleted or overwritten"
        if harm or ls.returncode:
            self._judge("cache ls on newer-format entry", ls, harm)
        else:
            self.classify("cache ls on newer-format entry", proc, self._toy_out(d / "out"), want)
        # 6: cache ls / info / verify on a folder that is not a cache (copied weights under objects/ab)
        d = self.trial_dir()
        for action in ("ls", "info", "verify"):
            folder = d / f"copied-{action}"
            (folder / "objects" / "ab").mkdir(parents=True)
            (folder / "objects" / "ab" / ("ab" * 32 + ".safetensors")).write_bytes(b"\x08\0\0\0\0\0\0\0{}   weights")
            before = self._snap(folder)
            proc = self._sh([EVALDAG, "cache", action, "--cache-dir", str(folder)])
            harm = "" if self._snap(folder) == before else f"{action}: the copied weights were deleted"
            self._judge("cache ls/info/verify on a non-cache folder", proc, harm)
        # 7: another user's cache, written under umask 077, read by `nobody`
        if os.geteuid() == 0 and shutil.which("setpriv"):
            d = self.trial_dir()
            for p in (self.work, d):
                p.chmod(0o777)
            cache = d / "cache"
            self._sh([EVALDAG, "run", "toy", "--quiet", "--out", str(d / "first"), "--cache-dir", str(cache)], umask=0o077)
            for p in [cache, *cache.rglob("*")]:
                if p.is_dir():
                    p.chmod(0o777)
            before = self._snap(cache)
            for action in ("ls", "verify"):
                proc = self._sh([EVALDAG, "cache", action, "--cache-dir", str(cache)], user="65534", env={"HOME": str(d)})
                if action == "verify" and " 0 corrupt" not in proc.stdout and "Traceback" not in proc.stderr:
                    self._judge("unreadable entries (umask 077)", proc, "verify: " + proc.stdout.strip().splitlines()[-1])
                else:
                    self.classify("unreadable entries (umask 077)", proc, None if proc.returncode else want, want)
            proc = self._toy(d / "out", str(cache), user="65534", env={"HOME": str(d)})
            harm = "" if all(v == before[k] for k, v in self._snap(cache).items() if k in before) and \
                len([k for k in before if k not in self._snap(cache)]) == 0 else "root's entries changed or deleted"
            self.classify("unreadable entries (umask 077)", proc if not harm else subprocess.CompletedProcess([], 0, "", ""),
                          self._toy_out(d / "out") if not harm else ("harmed",), want if not harm else None, harm)
        # 13: a node lock held by a stopped process: the wait says so; --lock-timeout ends it in one line
        d = self.trial_dir()
        cache = d / "cache"
        shutil.copytree(base / "cache", cache)
        entry = sorted((cache / "objects").glob("*/*.safetensors"))[-1]
        entry.unlink()
        code = ("import os, signal\nfrom filelock import FileLock\n"
                f"p = {str(cache / 'locks' / entry.stem[:2] / (entry.stem + '.lock'))!r}\n"
                "os.makedirs(os.path.dirname(p), exist_ok=True)\n"
                "try:\n    from evaldag.engine.cache.nodes import NodeStore\n"
                f"    lk = NodeStore({str(cache)!r}).lock({entry.stem!r}).acquire()\n"
                "except Exception:\n    lk = FileLock(p)\n    lk.acquire()\n"
                "print('held', flush=True)\nos.kill(os.getpid(), signal.SIGSTOP)")
        holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        try:
            holder.stdout.readline()
            err = d / "waiter.err"
            with open(err, "w") as f:
                waiter = subprocess.Popen([EVALDAG, "run", "toy", "--quiet", "--out", str(d / "w"), "--cache-dir", str(cache)],
                                          stdout=subprocess.DEVNULL, stderr=f)
                time.sleep(12)
                waiter.kill()
                waiter.wait()
            said = err.read_text()
            ok = f"pid {holder.pid}" in said and "waiting for node" in said
            self.classify("stopped lock holder (12 s, no flag)", subprocess.CompletedProcess([], 2 if ok else -1, "", said), None, None,
                          "" if ok else "waited 12 s in silence")
            t = time.time()
            proc = self._toy(d / "out", str(cache), "--lock-timeout", "3")
            one = proc.returncode == 2 and proc.stderr.count("\n") == 1 and f"pid {holder.pid}" in proc.stderr
            self.classify("stopped lock holder + --lock-timeout", proc, None, None,
                          "" if one else f"exit {proc.returncode} after {time.time() - t:.0f} s: {proc.stderr.strip()[-150:]!r}")
        finally:
            holder.kill()
            holder.wait()

    # ---- render (hostile run.json, deep graphs)
    def render(self) -> None:
        """A run folder with a hostile string in every field, drawn in every format; a 10,000-node chain.

        Hostile: 'recovered' = drawn, and (in headless Chromium when installed) no element or
        script of the payload in the DOM; an injection counts as a wrong result.
        """
        import importlib.util

        spec = importlib.util.spec_from_file_location("_hostile", ROOT / "tests" / "engine" / "test_render_untrusted.py")
        hr = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(hr)
        d = self.trial_dir()
        folder = hr.make_hostile_folder(d)
        kind = "hostile run.json rendered (svg/html/mermaid/dot)"
        for fmt in ("report", "svg", "html", "mermaid", "dot", "json"):
            page = d / f"page-{fmt}.{ {'report': 'html', 'mermaid': 'mmd'}.get(fmt, fmt)}"
            cmd = [EVALDAG, "report", str(folder), "--out", str(page)] if fmt == "report" else \
                [EVALDAG, "graph", "--run", str(folder), "--format", fmt, "--out", str(page)]
            proc = evaldag(cmd, timeout=300)
            bad = ""
            if proc.returncode == 0:
                text = page.read_text()
                if fmt in ("report", "svg", "html"):
                    dom = hr.chromium_dom(d, page) if hr.CHROMIUM else text
                    hits = hr.injected(dom) + (["script ran"] if 'data-pwned="1"' in dom else [])
                    bad = f"{fmt}: {len(hits)} injected ({hits[0][:80] if hits else ''})" if hits else ""
                elif fmt == "mermaid":
                    odd = [ln for ln in text.splitlines() if not any(__import__("re").fullmatch(p, ln) for p in hr._MM_LINES)]
                    bad = f"mermaid: {len(odd)} lines not the renderer's own ({odd[0][:60]!r})" if odd else ""
                elif fmt == "dot" and "<script" in __import__("re").sub(r'"(?:[^"\\\n]|\\.)*"', '""', text):
                    bad = "dot: text outside quoted strings"
            self.classify(kind, proc, "injected" if bad else "clean", "clean", note=bad)
        d = self.trial_dir()
        code = ("import sys, time\nsys.path.insert(0, %r)\nimport test_deep_graphs as t\n"
                "from evaldag.engine import Graph, run\nfrom evaldag.engine.render.svg import to_svg\n"
                "from evaldag.engine.render.view import from_run_result\n"
                "t0 = time.time()\nres = run(Graph([t.chain()]), {'data': [1, 2, 3]}, cache=%r)\n"
                "v = res.value('step9999').agg_value\nsvg = to_svg(from_run_result(res))\n"
                "print(v, svg.count('class=\"ed-edge\"'), round(time.time() - t0, 1))\n"
                % (str(ROOT / "tests" / "engine"), str(Path("/dev/shm") / f"evaldag-campaign-{os.getpid()}")))
        t = time.time()
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1800,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
        shutil.rmtree(Path("/dev/shm") / f"evaldag-campaign-{os.getpid()}", ignore_errors=True)
        got = proc.stdout.split()[:2]
        self.classify("10,000-node chain", proc, got, ["10002.0", "9999"],
                      note=f"{time.time() - t:.0f} s" + (f"; {proc.stderr.strip().splitlines()[-1][:120]}" if proc.returncode else ""))

    # ---- model loading/integrity
    def hostile_models(self) -> None:
        retain_w = FIX / "tiny-llama" / "retain" / "model.safetensors"
        # 26.1: the weights replaced after fingerprinting (before load), then after the first batch;
        # then the untouched original is run again on the same cache and must give the baseline
        for when in ("load", "batch"):
            d = self.trial_dir()
            model = d / "model"
            shutil.copytree(self.target, model)
            hook = ("from evaldag.engine.adapters import hf\n_real = hf.HFModel.load\n"
                    "def _load(self):\n"
                    f"    if self.path == {str(model)!r} and not getattr(hf, '_swapped', 0):\n"
                    f"        hf._swapped = 1; shutil.copyfile({str(retain_w)!r}, {str(model / 'model.safetensors')!r})\n"
                    "    return _real(self)\nhf.HFModel.load = _load\n") if when == "load" else (
                    "from evaldag.engine import executor\n_real = executor.Executor._run\n_n = [0]\n"
                    "def _run(self, adapter, kind, batch):\n    _n[0] += 1\n"
                    f"    if _n[0] == 2: shutil.copyfile({str(retain_w)!r}, {str(model / 'model.safetensors')!r})\n"
                    "    return _real(self, adapter, kind, batch)\nexecutor.Executor._run = _run\n")
            first = evaldag(argv(model, d / "out1", d / "cache") + ["--batch-tokens", "256"], prelude="import shutil\n" + hook)
            shutil.copyfile(self.target / "model.safetensors", model / "model.safetensors")
            proc = evaldag(argv(model, d / "out", d / "cache"))
            clear = first.returncode == 2 and len(first.stderr.strip().splitlines()) == 1 and "changed while" in first.stderr
            # the retain model's answers stored by the first run came in other batch shapes: drift allowed
            got = outputs(d / "out")
            if got is None or drift(got, self.want) > DRIFT:
                self.classify("weights swapped mid-run", proc, got, self.want,
                              f"swap at {when}: the untouched original got other numbers (first run exit {first.returncode})")
            else:
                self.classify("weights swapped mid-run", first, outputs(d / "out1"), self.want,
                              "" if clear else f"swap at {when}: first run exit {first.returncode}, not one clear line")
        # 26.9: an embedding with fewer rows than the tokenizer has tokens
        d = self.trial_dir()
        model = d / "small-vocab"
        shutil.copytree(self.target, model)
        subprocess.run([sys.executable, "-c", "import sys\nfrom transformers import AutoModelForCausalLM as A\n"
                        "m = A.from_pretrained(sys.argv[1]); m.resize_token_embeddings(1000); m.save_pretrained(sys.argv[1])",
                        str(model)], check=True, capture_output=True)
        proc = evaldag(argv(model, d / "out", d / "cache"))
        one = len(proc.stderr.strip().splitlines()) == 1 and "1000 rows" in proc.stderr and outputs(d / "out") is None
        self.classify("embedding rows < vocab", proc, outputs(d / "out"), None,
                      "" if one else f"{proc.stderr.count('Traceback')} tracebacks, outputs published: {outputs(d / 'out') is not None}")
        # 26.16: NaN weights: every metric computed from the model carries the non-finite note
        d = self.trial_dir()
        model = d / "nan"
        shutil.copytree(self.target, model)
        subprocess.run([sys.executable, "-c", "import sys\nfrom safetensors.torch import load_file, save_file\n"
                        "p = sys.argv[1] + '/model.safetensors'; sd = load_file(p)\n"
                        "sd['model.layers.0.mlp.down_proj.weight'][0, 0] = float('nan'); save_file(sd, p, metadata={'format': 'pt'})",
                        str(model)], check=True, capture_output=True)
        proc = evaldag(argv(model, d / "out", d / "cache"))
        got = outputs(d / "out")
        ev = got[0] if got else {}
        silent = sorted(k for k, v in ev.items() if not k.endswith("@retain_model") and "non-finite" not in str(v.get("reason")))
        ok = bool(ev) and not silent and proc.returncode in (0, 1)
        self.classify("NaN weights: every metric flagged", subprocess.CompletedProcess([], 0 if ok or ev else proc.returncode, "", ""),
                      ("flagged",) if ok else ("silent",), ("flagged",),
                      "" if ok else f"without the note: {', '.join(silent[:6])}{' …' if len(silent) > 6 else ''}")

    # ---- outputs
    def hostile_outputs(self, n: int = 8) -> None:
        """--out over an input, report --out over EVAL, signals while publishing, two runs into
        one folder, a secret in argv. A torn set (files of two runs visible together) counts
        as wrong numbers; a signal's exit with its one line, or a refusal, as failed clearly."""
        retain = FIX / "tiny-llama" / "retain"
        oul = FIX / "open_unlearning"

        def with_logs(out: Path, cache: Path, logs: Path) -> list[str]:
            a = argv(self.target, out, cache)
            i = a.index("--retain-model")
            return a[:i] + ["--retain-logs", str(logs)] + a[i + 2:]

        # --out set to the --retain-logs folder: the logs cannot be rebuilt
        d = self.trial_dir()
        logs = d / "logs"
        logs.mkdir()
        for k in ("EVAL", "SUMMARY"):
            shutil.copy(oul / f"retain_TOFU_{k}.json", logs / f"TOFU_{k}.json")
        before = {p.name: p.read_bytes() for p in logs.iterdir()}
        cache = self.warm_copy(d)
        proc = evaldag(with_logs(logs, cache, logs))
        after = {p.name: p.read_bytes() for p in logs.iterdir() if p.is_file() and not p.name.startswith(".")}
        if proc.returncode == 0:  # the logs were replaced: the next run's forget_quality reads our own outputs
            again = evaldag(with_logs(d / "out2", cache, logs))
            fq = (outputs(d / "out2") or ({}, {}))[1].get("forget_quality")
            note = f"retain logs overwritten; next run's forget_quality {fq}"
        else:
            note = "" if after == before else "refused, but the logs changed"
        self.classify("--out over retain logs", proc, after, before, note if proc.returncode == 0 or after != before else "")
        # evaldag report --out OUT/TOFU_EVAL.json
        d = self.trial_dir()
        cache = self.warm_copy(d)
        evaldag(argv(self.target, d / "out", cache))
        proc = evaldag([EVALDAG, "report", str(d / "out"), "--out", str(d / "out" / "TOFU_EVAL.json")])
        got = outputs(d / "out")
        self.classify("report --out over EVAL", proc, got, self.want,
                      "" if got == self.want else "TOFU_EVAL.json is no longer results")
        # signals at the k-th rename of a warm run (every rename: cache files and the publish),
        # and at random instants; runs alternate target and retain, so a mix of two runs shows
        d = self.trial_dir()
        cache, out = self.warm_copy(d), d / "out"
        models = {"target": self.target, "retain": retain}
        evaldag(argv(retain, out, cache))
        evaldag(argv(self.target, out, cache))
        state = {"last": "target"}

        def one(signum: int, k: int | None, delay: float | None) -> None:
            nxt = "retain" if state["last"] == "target" else "target"
            before = self._which(out)
            if k is not None:
                pre = ("import os, signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"  # `cmd &` ignores SIGINT
                       "_r = os.replace\n_n = [0]\n"
                       f"def _rep(a, b, **kw):\n    _n[0] += 1\n    if _n[0] == {k}: os.kill(os.getpid(), {int(signum)})\n"
                       "    return _r(a, b, **kw)\nos.replace = _rep")
                proc = evaldag(argv(models[nxt], out, cache), prelude=pre)
            else:  # a random instant after the imports (most of a warm run), so the kill lands in the run
                proc = _ready_then(argv(models[nxt], out, cache), lambda pr: (time.sleep(delay), pr.send_signal(signum)))
            now = self._which(out)
            lines = proc.stderr.strip().splitlines()
            kind = f"{signal.Signals(signum).name} at " + ("the k-th rename" if k is not None else "random instants")
            told = len(lines) == 1 and lines[0].startswith("evaldag: interrupted")
            if now[0] == "torn":
                self.classify(kind, subprocess.CompletedProcess([], 0, "", proc.stderr), "torn", "one run", now[1])
            elif proc.returncode == 0:
                self.classify(kind, proc, now[0], nxt)
            elif told and (now[0] == nxt) == ("published" in lines[0]) and now[0] in (before[0], nxt):
                self.classify(kind, subprocess.CompletedProcess([], 2, "", ""), None, None)
            elif proc.returncode == -signal.SIGTERM and not proc.stderr and now[0] in (before[0], nxt):
                self.classify(kind, subprocess.CompletedProcess([], 2, "", ""), None, None)  # importing, or Python's teardown
                self.notes.append(f"{kind} (trial {self.n}): killed while importing or in Python's final teardown "
                                  f"(default action, no line); set whole: {'the old' if now == before else 'the new'}")
            else:
                self.classify(kind, proc, now[0], nxt, f"exit {proc.returncode}, no one-line account; set {now[0]}")
            state["last"] = now[0] if now[0] in models else state["last"]

        _ready_then(argv(models["retain"], out, cache), lambda pr: setattr(self, "_t_ready", time.time()))
        span = time.time() - self._t_ready  # a warm run after its imports
        _ready_then(argv(models["target"], out, cache), lambda pr: None)
        for signum in (signal.SIGTERM, signal.SIGINT):
            for k in range(1, 7):  # a warm run renames a handful of files: cache, stage, publish
                one(signum, k, None)
        for _ in range(n):
            one(signal.SIGTERM, None, self.rng.uniform(0.0, 1.0) * span)
        # two runs into one default ./evaldag-out: tofu on the target, then muse on the retain model
        d = self.trial_dir()
        cache = self.warm_copy(d)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
        tofu = [a for a in argv(self.target, Path("x"), cache) if a not in ("--out", "x")]
        subprocess.run(tofu, cwd=d, capture_output=True, env=env)
        muse = [EVALDAG, "run", "muse", "--model", str(retain), "--data", str(FIX / "muse_tiny"), "--device", "cpu",
                "--retain-logs", str(oul / "retain_MUSE_EVAL.json"), "--quiet", "--cache-dir", str(cache)]
        proc = subprocess.run(muse, cwd=d, capture_output=True, text=True, env=env)
        o = d / "evaldag-out"
        html = (o / "report.html").read_text() if (o / "report.html").exists() else ""
        got = ((o / "TOFU_EVAL.json").exists(), "forget_truth_ratio" in html, (o / "MUSE_EVAL.json").exists())
        self.classify("two runs into one default out", proc, got, (False, False, True),
                      "" if got == (False, False, True) else f"TOFU files shown {got[0]}, TOFU in the report {got[1]}")
        # a secret in argv: a token in a path argument and in the working folder
        token = "hf_" + "Zq8" * 10
        d = self.trial_dir()
        where = d / token
        where.mkdir()
        cache = shutil.copytree(self.cache0, where / "cache", symlinks=True)
        proc = subprocess.run(argv(self.target, d / "out", cache), cwd=where, capture_output=True, text=True, env=env)
        leak = [f for f in ("run.json", "report.html") if (d / "out" / f).exists() and token in (d / "out" / f).read_text()]
        self.classify("secret in argv", proc, leak, [], f"token recorded in {', '.join(leak)}" if leak else "")

    def _which(self, out: Path) -> tuple[str, str]:
        """Which run OUT shows: 'target' / 'retain' when EVAL, SUMMARY and run.json agree, else 'torn'."""
        got = outputs(out)
        try:
            cmd = json.loads((out / "run.json").read_text())["provenance"]["command"]
            named = Path(cmd[cmd.index("--model") + 1]).name
        except (OSError, ValueError, KeyError):
            return "torn", "run.json unreadable"
        by_eval = [m for m, w in (("target", self.want), ("retain", self.want_retain)) if got is not None
                   and drift(got[0], w[0]) <= DRIFT and drift(got[1], w[1]) <= DRIFT]
        if by_eval == [named]:
            return named, ""
        return "torn", f"run.json names {named}, EVAL/SUMMARY match {by_eval or 'neither'}"

    # ------------------------------------------------------------------ report
    def table(self) -> str:
        w = max(len(k) for k in self.rows) + 2
        lines = [f"{'fault':{w}s}" + "".join(f"{c:>16s}" for c in COLUMNS), "-" * (w + 16 * len(COLUMNS))]
        for kind, row in self.rows.items():
            lines.append(f"{kind:{w}s}" + "".join(f"{x:16d}" for x in row))
        return "\n".join(lines + [""] + self.notes)


def _ready_then(cmd: list[str], act) -> subprocess.CompletedProcess:
    """Run evaldag through python, call ``act(popen)`` once its imports are done (it says
    "ready" on stderr), and return the finished process without that line."""
    code = ("import sys\nfrom evaldag.engine.cli import main\nsys.stderr.write('ready\\n'); sys.stderr.flush()\n"
            "raise SystemExit(main(sys.argv[1:]))")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    pr = subprocess.Popen([sys.executable, "-c", code, *cmd[1:]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    first = pr.stderr.readline()
    act(pr)
    o, e = pr.communicate(timeout=900)
    return subprocess.CompletedProcess(cmd, pr.returncode, o, e if first == "ready\n" else first + e)


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _patched_disk(where: str) -> str:
    """Python run first in the subprocess: the disk 'fills' after a few writes."""
    if where == "cache":
        return ("import errno, os\nfrom evaldag.engine.cache import files\n_n = [0]\n_real = os.fsync\n"
                "def _fsync(fd):\n    _n[0] += 1\n    if _n[0] > 4: raise OSError(errno.ENOSPC, 'No space left on device')\n    return _real(fd)\n"
                "files.os.fsync = _fsync")
    return ("import errno\nfrom evaldag.engine.outputs import files\n_real = files._dump\n_n = [0]\n"
            "def _dump(p, o):\n    _n[0] += 1\n    if _n[0] > 1: raise OSError(errno.ENOSPC, 'No space left on device')\n    _real(p, o)\n"
            "files._dump = _dump")


def _forge_one(cache: Path) -> Path:
    """Change the value of one stored aggregator that reads no resource; keep its checksum valid."""
    from evaldag.engine.cache.codec import pack, unpack
    from evaldag.engine.declare import REGISTRY

    for p in sorted((cache / "objects").glob("*/*.safetensors")):
        value, meta = unpack(p.read_bytes())
        m = REGISTRY.get(meta.get("metric", ""))
        if m is not None and not m.scorer and not m.needs and hasattr(value, "agg_value") and isinstance(value.agg_value, float):
            value.agg_value = 0.987654321
            p.write_bytes(pack(value, meta))
            return p
    raise SystemExit("no aggregator entry to forge")


def fault_kinds() -> dict:
    """The fault families kept in ``tests/perf/fault_kinds/``: each module has ``run(campaign)``.

    A family adds its rows through the campaign's own bookkeeping (``trial_dir``, ``classify``,
    ``_refused``, ``rows``, ``notes``), so its counts land in the same table; ``--only NAME``
    takes the module's file name.
    """
    import importlib.util

    found = {}
    for f in sorted((Path(__file__).parent / "fault_kinds").glob("*.py")):
        if f.name.startswith("_"):
            continue
        spec = importlib.util.spec_from_file_location(f"fault_kinds.{f.stem}", f)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        found[f.stem] = mod
    return found


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=5)
    p.add_argument("--corruptions", type=int, default=1, help="trials per (file kind, mode)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", default="/tmp/evaldag-fault-campaign")
    p.add_argument("--only", default=None, help="NAME[,NAME]: run only these Campaign methods (e.g. hostile_data)")
    a = p.parse_args()
    only = set(a.only.split(",")) if a.only else None
    run = lambda name: only is None or name in only  # noqa: E731
    work = Path(a.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    c = Campaign(work, a.seed)
    if only is None or only & {"kills", "corruptions", "full_disks", "hostile", "trust", "hostile_models", "hostile_outputs"}:
        c.baseline()  # the cache-fault methods compare with it
    for name, step in (("kills", lambda: c.kills(a.kills)), ("corruptions", lambda: c.corruptions(a.corruptions)),
                       ("full_disks", c.full_disks), ("hostile", c.hostile), ("trust", c.trust)):
        if run(name):
            step()
    if run("hostile_data"):
        c.hostile_data()
    if run("hostile_cache"):
        c.hostile_cache()
    if run("render"):
        c.render()
    if run("hostile_models"):
        c.hostile_models()
    if run("hostile_outputs"):
        c.hostile_outputs()
    for name, kind in fault_kinds().items():  # tests/perf/fault_kinds/*.py: one module per family of faults
        if run(name):
            kind.run(c)
    print(c.table())
    bad = sum(row[3] + row[4] for row in c.rows.values())
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
