"""Print every ``hf_args.path`` key of open-unlearning's composed TOFU eval config (for path_keys.txt).

Run with open-unlearning's venv: python list_paths.py OU_REPO METRICS > path_keys.txt
(METRICS: run_ou.sh's EXTRA list). run_ou.sh points each of these keys at the data folder.
"""

import sys

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

repo, metrics = sys.argv[1], sys.argv[2]
with initialize_config_dir(config_dir=f"{repo}/configs", version_base=None):
    cfg = compose(config_name="eval.yaml", overrides=["model=phi-1_5", f"+eval/tofu_metrics=[{metrics}]", "task_name=x"])


def walk(node, prefix: str) -> None:
    if OmegaConf.is_dict(node):
        for k in node.keys():
            path = f"{prefix}.{k}"
            if k == "path" and prefix.endswith("hf_args"):
                print(path)
            else:
                walk(node._get_node(k), path)


walk(cfg.eval, "eval")
