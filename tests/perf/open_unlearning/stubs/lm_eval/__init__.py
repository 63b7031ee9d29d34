"""Stub for lm-eval (optional extra `open-unlearning[lm-eval]`). src/evals/__init__.py imports
evals.lm_eval unconditionally; the TOFU evaluator never uses it."""
def simple_evaluate(*args, **kwargs):
    raise RuntimeError("lm_eval stub: not installed in this benchmark venv")
