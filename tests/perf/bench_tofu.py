"""TOFU, full metric set, cold and warm, against open-unlearning's way of doing the same work.

Run: python tests/perf/bench_tofu.py
Uses the fixture checkpoints and data in tests/fixtures (tiny Llama, 2 layers).
Prints: forward rows per unique scored sequence, generations asked vs generated,
padding, cold and warm wall time, and whether a second checkpoint evaluated with
--retain-model forwards the retain model again. open-unlearning's counts are derived
from its code path (spec §1: dedup by metric name only, K mini-batches per perturbed
batch, Min-K++ twice, 7 greedy generations per forget question across the 3 ROUGEs).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from evaldag.engine import cli  # noqa: E402

FIX = Path(__file__).resolve().parents[1] / "fixtures"
METRICS = "default,exact_memorization,mia,forget_Q_A_PARA_ROUGE,forget_Q_A_PERT_ROUGE"


def sizes() -> dict[str, int]:
    n = lambda f: sum(1 for line in (FIX / "tofu_tiny" / f).read_text().splitlines() if line.strip())  # noqa: E731
    return {"F": n("forget10_perturbed.json"), "R": n("retain_perturbed.json"), "A": n("real_authors_perturbed.json"),
            "W": n("world_facts_perturbed.json"), "H": n("holdout10.json")}


def open_unlearning_counts(s: dict[str, int]) -> dict[str, int]:
    """Rows open-unlearning forwards (teacher-forced, target model) and greedy generations."""
    F, R, A, W, H = s["F"], s["R"], s["A"], s["W"], s["H"]
    rows = {
        "forget_truth_ratio (PARA + 5 PERT)": F + 5 * F,
        "forget_Q_A_Prob": F,
        "model_utility (retain Q_A/PARA/PERT, ra/wf Q_A/PERT)": R + R + 5 * R + A + 3 * A + W + 3 * W,
        "privleak -> mia_min_k (forget + holdout)": F + H,
        "extraction_strength": F,
        "exact_memorization": F,
        "mia_min_k_plus_plus (two passes)": 2 * (F + H),
        "mia_loss": F + H,
        "mia_zlib": F + H,
        "mia_reference (target side)": F + H,
    }
    gens = {"forget_Q_A_ROUGE": F, "forget_Q_A_PARA_ROUGE": F, "forget_Q_A_PERT_ROUGE": 5 * F, "retain/ra/wf ROUGE": R + A + W}
    # forget Q->A rows: Prob, ES, EM, Min-K, Min-K++ (twice), LOSS, ZLib, Reference
    return {"rows": sum(rows.values()), "forget_qa_rows": 9 * F, "generations": sum(gens.values()), "forget_generations": 7 * F}


def run(out: Path, cache: Path, model: Path, *extra: str) -> tuple[float, dict]:
    argv = ["run", "tofu", "--quiet", "--model", str(model), "--data", str(FIX / "tofu_tiny"), "--metrics", METRICS,
            "--reference-model", str(FIX / "tiny-llama" / "retain"), "--out", str(out), "--cache-dir", str(cache), *extra]
    t = time.perf_counter()
    assert cli.main(argv) == 0
    return time.perf_counter() - t, json.loads((out / "run.json").read_text())


def perturbed_copy(src: Path, dst: Path) -> Path:
    """A 'second checkpoint': the target with its weights nudged (same tokenizer)."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    w = load_file(str(dst / "model.safetensors"))
    g = torch.Generator().manual_seed(0)
    w = {k: v + 1e-3 * torch.randn(v.shape, generator=g) for k, v in w.items()}
    save_file(w, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


def main() -> None:
    s = sizes()
    ou = open_unlearning_counts(s)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        target, retain = FIX / "tiny-llama" / "target", FIX / "tiny-llama" / "retain"
        cold_s, cold = run(tmp / "cold", tmp / "cache", target, "--retain-model", str(retain))
        warm_s, warm = run(tmp / "warm", tmp / "cache", target, "--retain-model", str(retain))
        second = perturbed_copy(target, tmp / "second")
        second_s, sec = run(tmp / "second_out", tmp / "cache", second, "--retain-model", str(retain))
    ex = cold["executor"]
    ts, gen = ex["by_kind"]["token_stats"], ex["by_kind"]["generate"]
    mine = ex["forwarded_by_model"][cold["provenance"]["models"]["model"]]
    target_rows, target_gens = mine.get("token_stats", 0), mine.get("generate", 0)
    print(f"TOFU fixture: forget {s['F']}, retain {s['R']}, real authors {s['A']}, world facts {s['W']}, holdout {s['H']}")
    print(f"metrics: {METRICS}; --retain-model retain; --reference-model retain\n")
    print(f"{'':52s}{'open-unlearning':>18s}{'evaldag':>12s}")
    print(f"{'teacher-forced rows (target model)':52s}{ou['rows']:>18d}{target_rows:>12d}")
    print(f"{'  of which forget question->answer rows':52s}{ou['forget_qa_rows']:>18d}{s['F']:>12d}")
    print(f"{'forward rows per unique scored sequence':52s}{ou['rows'] / target_rows:>18.2f}{ts['sequences_forwarded'] / ts['unique']:>12.2f}")
    print(f"{'  (all models: rows forwarded / unique (model, sequence))':52s}{'':>18s}{ts['sequences_forwarded']:>6d} / {ts['unique']}")
    print(f"{'greedy generations (target model)':52s}{ou['generations']:>18d}{target_gens:>12d}")
    print(f"{'  per forget question':52s}{7:>18d}{1:>12d}")
    print(f"{'generation requests asked / generated':52s}{'':>18s}{gen['requests']:>6d} / {gen['sequences_forwarded']}")
    print(f"{'padding fraction (token stats)':52s}{'':>18s}{100 * ts['padding_fraction']:>11.1f}%")
    print(f"{'padding fraction (all kinds)':52s}{'':>18s}{100 * ex['padding_fraction']:>11.1f}%")
    print(f"\ncold wall time (target + retain model): {cold_s:.2f} s")
    print(f"warm wall time: {warm_s:.2f} s = {100 * warm_s / cold_s:.1f} % of cold; weights loaded: {warm['executor']['model_loaded']}")
    loaded = sec["executor"]["models_loaded"]
    retain_fp = cold["provenance"]["models"].get("retain_model")
    print(f"second checkpoint with --retain-model: {second_s:.2f} s; models loaded: {len(loaded)}; retain model loaded again: {retain_fp in loaded}")


if __name__ == "__main__":
    main()
