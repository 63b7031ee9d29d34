"""The WEAT benchmark: WEFE's metrics on the standard WEAT word sets, as one graph.

``spec`` builds the nodes and reshapes a run into ``WEAT_EVAL.json``; ``cli`` is
``evaldag run weat``. Word sets: ``word_sets.json`` (from WEFE, MIT; the tests are
Caliskan, Bryson & Narayanan 2017, see docs/fairness.md).
"""
