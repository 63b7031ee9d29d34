"""GenderBench 1.1.0 generation probes as an evaldag benchmark (``evaldag run probes``); see docs/probes.md."""
