#!/usr/bin/env bash
# Time open-unlearning's own TOFU evaluator (src/eval.py) on CPU, on bench_tofu_scale.py's workload.
# Usage: OU_REPO=DIR OU_VENV=DIR tests/perf/open_unlearning/run_ou.sh DATA_DIR MODEL_DIR OUT_DIR [HYDRA_OVERRIDE...]
#   DATA_DIR : TOFU-format subsets loadable by datasets.load_dataset(DATA_DIR, name=<subset>) (README.md configs:)
#   MODEL_DIR: the Llama checkpoint with a tokenizer transformers 4.45.1 reads
#   OUT_DIR  : wiped, then TOFU_EVAL.json, TOFU_SUMMARY.json, stdout.log, stderr.log, time_v.txt, wall_s.txt
# Optional: OU_MODEL (its model config, default phi-1_5), OU_EXTRA_METRICS (appended to its TOFU defaults,
#   default the list below; empty: none), OU_PATH_KEYS (default path_keys.txt here), OU_RETAIN_LOGS (default null).
# Prints OU_WALL_S=<seconds> last. See README.md here for the set-up.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 DATA_DIR MODEL_DIR OUT_DIR [HYDRA_OVERRIDE...]" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=$(realpath "$1"); MODEL=$(realpath "$2"); OUT=$(realpath -m "$3"); shift 3
: "${OU_REPO:?set OU_REPO to the open-unlearning source tree at commit d3d7cf9}"
: "${OU_VENV:?set OU_VENV to the venv that runs it}"

export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export HF_DATASETS_CACHE=${HF_DATASETS_CACHE:-$OUT.datasets-cache}
export PYTHONPATH=$HERE/stubs${PYTHONPATH:+:$PYTHONPATH}   # deepspeed + lm_eval import stubs (imported, never called)
export CUDA_VISIBLE_DEVICES=""

# open-unlearning's TOFU defaults stay in; these are appended (bench_tofu_scale.METRICS, without mia_reference)
EXTRA=${OU_EXTRA_METRICS-exact_memorization,mia_loss,mia_zlib,mia_min_k,mia_min_k_plus_plus,mia_gradnorm,forget_Q_A_PARA_ROUGE,forget_Q_A_PERT_ROUGE}
EXTRA_ARGS=(); [ -n "$EXTRA" ] && EXTRA_ARGS=("+eval/tofu_metrics=[$EXTRA]")
PATH_OVERRIDES=()  # every hf_args.path of the composed config (list_paths.py wrote path_keys.txt)
while read -r key; do [ -n "$key" ] && PATH_OVERRIDES+=("$key=$DATA"); done < "${OU_PATH_KEYS:-$HERE/path_keys.txt}"

rm -rf "$OUT"; mkdir -p "$OUT"
# datasets builds an Arrow cache on a subset's first load: build it here, untimed (< 0.5 s at this size)
"$OU_VENV/bin/python" - "$DATA" <<'PY'
import sys, datasets
for name in ["forget10_perturbed", "holdout10", "retain_perturbed", "real_authors_perturbed", "world_facts_perturbed"]:
    datasets.load_dataset(sys.argv[1], name=name, split="train")
PY
cd "$OU_REPO"
# overwrite=true: else open-unlearning skips every metric already in an existing TOFU_EVAL.json
ARGS=(src/eval.py "model=${OU_MODEL:-phi-1_5}"
  "model.model_args.pretrained_model_name_or_path=$MODEL" "model.tokenizer_args.pretrained_model_name_or_path=$MODEL"
  ++model.model_args.attn_implementation=sdpa ++model.model_args.torch_dtype=float32 model.model_args.device_map=cpu
  "${EXTRA_ARGS[@]}" "eval.tofu.retain_logs_path=${OU_RETAIN_LOGS:-null}"
  eval.tofu.overwrite=true
  "paths.output_dir=$OUT" task_name=ou_tofu_bench "${PATH_OVERRIDES[@]}" "$@")
t0=$(date +%s.%N)
set +e
/usr/bin/time -v -o "$OUT/time_v.txt" "$OU_VENV/bin/python" "${ARGS[@]}" > "$OUT/stdout.log" 2> "$OUT/stderr.log"
rc=$?
set -e
t1=$(date +%s.%N)
wall=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
echo "$wall" > "$OUT/wall_s.txt"
[ $rc -eq 0 ] || { tail -30 "$OUT/stderr.log" >&2; exit $rc; }
echo "OU_WALL_S=$wall"
