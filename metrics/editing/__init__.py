"""Knowledge-editing checks: an edited model beside its original (lm-debugger's metrics, ROME's trace).

Resources: ``model`` (the edited checkpoint) and ``base_model`` (the original); the
providers in :mod:`.providers` derive ``weight_deltas`` and ``manipulated_layers`` from
them. Each module registers what it declares when imported; ``register_builtin``
imports them all.
"""
