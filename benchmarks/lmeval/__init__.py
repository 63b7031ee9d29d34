"""lm-evaluation-harness tasks as graph nodes (``evaldag run lmeval``) and lm-evaluation-harness's
``LM`` served by evaldag (``from evaldag.benchmarks.lmeval.lm import EvaldagLM``). See docs/lmeval.md."""
