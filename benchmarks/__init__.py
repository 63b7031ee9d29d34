"""Benchmark specs (named, composable graphs) and their data loaders."""
