"""``evaldag list``: the benchmarks with the metric names ``--metrics`` takes, then the registered metrics."""

from __future__ import annotations

import argparse
import textwrap

from ..registry import BENCHMARKS
from ..declare import REGISTRY


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    return sub.add_parser("list", help="list benchmarks (with their --metrics names) and registered metrics")


def _names(label: str, names: tuple[str, ...] | list[str]) -> str:
    text = f"{label}: " + (", ".join(names) or "-")
    return textwrap.fill(text, width=100, initial_indent="    ", subsequent_indent=" " * (6 + len(label)))


def benchmark_lines() -> list[str]:
    lines = ["benchmarks (`evaldag run NAME`; --metrics takes the names below, `default`, `all` and each group):"]
    for name in BENCHMARKS.names():
        try:
            b = BENCHMARKS.get(name)
        except Exception as e:  # a broken plugin is listed with its error, the others still show
            lines.append(f"  {name:8s} cannot be loaded: {type(e).__name__}: {e}")
            continue
        menu = b.metric_menu()
        lines.append(f"  {name:8s} {b.description}")
        lines.append(_names("default", menu.default) if menu.default or not menu.note else f"    default: {menu.note}")
        for group, members in menu.groups.items():
            lines.append(_names(group, members))
        lines.append(_names("all", menu.all))
    return lines


def metric_lines() -> list[str]:
    lines = ["metrics (registered; a benchmark's names above are nodes built from these):"]
    for m in REGISTRY.all():
        first = (m.doc.splitlines() or [""])[0]
        lines.append(f"  {m.name:34s} {m.kind:10s} v{m.version:4s} {first}")
    return lines


def cmd(args: argparse.Namespace) -> int:
    print("\n".join(benchmark_lines() + [""] + metric_lines()))
    return 0
