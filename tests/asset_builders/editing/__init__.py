"""Builds the editing benchmark's shipped material: ``make_assets`` (the edit and text
sets, from the demo's fictitious authors) and ``make_tracer`` (the trace model)."""
