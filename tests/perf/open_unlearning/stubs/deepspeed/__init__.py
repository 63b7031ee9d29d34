"""CPU stub for deepspeed (GPU-only). open-unlearning's src/trainer/unlearn/rmu.py does `import deepspeed`
at import time and eval.py imports the trainer package (for seed_everything); evaluation never calls it.
No dist-info is installed, so transformers/accelerate `is_deepspeed_available()` stays False."""
class DeepSpeedEngine:  # only used in an isinstance() check inside the RMU trainer
    pass
def initialize(*args, **kwargs):
    raise RuntimeError("deepspeed stub: not available in this CPU benchmark venv")
