"""Knowledge-editing checks: an edited model beside its original (lm-debugger's metrics, ROME's trace).

Resources: ``model`` (the edited checkpoint) and ``base_model`` (the original); the
providers in :mod:`.providers` derive ``weight_deltas`` and ``manipulated_layers`` from
them. Importing this package registers the providers and metrics.
"""

from . import causal_trace, efficacy, perplexity, providers, weight_delta_norm  # noqa: F401  (they register)
