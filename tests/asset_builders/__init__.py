"""Tools that rebuild the assets the packages ship; not part of the installed library.

``demo/`` writes ``benchmarks/demo/assets`` (fictitious authors in TOFU's format and
three tiny checkpoints, docs/demo-assets.md) and ``editing/`` writes the editing
benchmark's edit and text sets and its trace model (docs/editing.md). Run them from the
repository root, e.g. ``python -m tests.asset_builders.demo.make_assets``; the tests in
``tests/benchmarks`` import them to check that a rebuild gives the shipped bytes.
"""
