"""Builds ``evaldag demo``'s assets: ``authors`` (the data), ``training`` (tokenizer and
checkpoints), ``signal_check`` (the check that the checkpoints show the demo's signal)
and ``make_assets`` (all of it, and the manifest)."""
