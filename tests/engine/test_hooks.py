"""The engine's objects declare their notebook displays; importing the engine attaches nothing
to a class and registers nothing; the registry type behind the tables (hooks.NameTable)."""

import subprocess
import sys

import pytest

from evaldag.benchmarks.toy import ToyBenchmark, ToyConfig
from evaldag.engine import Graph, Result, RunResult
from evaldag.engine.benchmark import Benchmark
from evaldag.engine.hooks import DISPLAY, NameTable
from evaldag.engine.requests import REQUEST_TYPES, RESULT_TYPES, TokenStats, register_kind


@pytest.mark.parametrize("cls, names", [(Graph, ["_repr_svg_"]), (RunResult, ["_repr_html_", "to_pandas"]),
                                        (Result, ["_repr_html_"]), (Benchmark, ["_repr_html_"])])
def test_each_class_declares_its_displays_in_its_own_body(cls, names):
    for name in names:
        assert name in vars(cls), f"{cls.__name__}.{name} is not declared on the class"
        assert vars(cls)[name].__module__ == cls.__module__


def test_importing_the_engine_imports_no_drawing_until_a_display_is_asked_for():
    code = ("import sys, evaldag.engine as e\n"
            "from evaldag.benchmarks.toy import ToyBenchmark, ToyConfig\n"
            "print(sorted(m for m in ('evaldag.engine.notebook', 'evaldag.engine.views') if m in sys.modules))\n"
            "svg = e.Graph(ToyBenchmark().plan(ToyConfig()))._repr_svg_()\n"
            "print(svg.startswith('<svg'), 'evaldag.engine.notebook' in sys.modules, 'evaldag.engine.views' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.splitlines() == ["[]", "True True True"]


def test_a_display_is_found_through_its_declared_reference():
    assert set(DISPLAY.names()) == {"graph_svg", "run_result_html", "result_html", "benchmark_html", "to_pandas"}
    svg = DISPLAY.need("graph_svg")(Graph(ToyBenchmark().plan(ToyConfig())))
    assert svg.startswith("<svg") and "toy_probability" in svg


def test_the_registry_refuses_a_second_owner_and_names_the_known_ones():
    reg = NameTable("colour", {"red": 1}, refs={"path": "os.path:join"})
    assert reg.add("red", 1) == 1 and reg.get("blue") is None and "path" not in reg
    with pytest.raises(ValueError, match="colour 'red' is already registered"):
        reg.add("red", 2)
    with pytest.raises(KeyError, match="unknown colour 'blue'; registered: path, red"):
        reg.need("blue")
    import os.path
    assert reg.need("path") is os.path.join and "path" in reg


def test_request_kinds_keep_their_old_api_on_the_registry():
    assert isinstance(REQUEST_TYPES, NameTable) and REQUEST_TYPES["token_stats"] is TokenStats
    register_kind(TokenStats, RESULT_TYPES["token_stats"])  # the same owner again: fine

    class Other(TokenStats):
        kind = "token_stats"

    with pytest.raises(ValueError, match="request kind 'token_stats' is already registered by evaldag.engine.requests.TokenStats"):
        register_kind(Other, RESULT_TYPES["token_stats"])
