"""What the unlearning benchmarks (TOFU, MUSE) share, so that each is a leaf that imports this
package and never the other.

:mod:`.benchmark` holds :class:`~.benchmark.UnlearningBenchmark` (the plugin base: menu
with the ``mia`` group, the common flags, config and resources), :mod:`.rows` the row
readers, :mod:`.eval_logs` the retain model's ``<GROUP>_EVAL.json``, :mod:`.catalogue`
the name -> node recipes with the retain side and :mod:`.report` the plots. Nothing is
imported here, so reading TOFU's rows does not import the plugin machinery.
"""
