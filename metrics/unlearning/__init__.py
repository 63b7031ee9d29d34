"""Unlearning metrics (open-unlearning's TOFU and MUSE), one concept per module.

``scoring`` holds the scorers (the only metrics that ask the model for anything);
every other module is a formula and the aggregator metric that applies it:
``probability``, ``truth_ratio``, ``rouge``, ``memorization``, ``mia``,
``forget_quality``, ``privleak``, ``utility``, plus ``retain_logs`` (values read from a
retain model's logs). ``blocks`` holds the small helpers they share. Importing a
module registers its metrics.
"""
