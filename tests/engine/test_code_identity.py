"""Code identity: editing a metric's function recomputes it, with reason ``code``."""

import importlib.util
import sys
import textwrap

from evaldag.engine import Metric, metric, run
from evaldag.engine.fingerprint import code_identity

MODULE = '''
from evaldag.engine import metric

@metric("ci_total_{tag}", version="1", needs=["data"])
def total(data):
    """The sum."""
    return float(sum(data)) * {factor}
'''


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_an_edited_function_recomputes_with_reason_code(tmp_path):
    src = tmp_path / "user_metric.py"
    src.write_text(MODULE.format(tag="a", factor="1"))
    first = run([_load(src, "user_metric").total(name="t")], {"data": [1, 2, 3]}, cache_dir=tmp_path / "c")
    assert first["t"] == 6.0 and first.record("t").reason == "new"
    again = run([_load(src, "user_metric").total(name="t")], {"data": [1, 2, 3]}, cache_dir=tmp_path / "c")
    assert again.record("t").status == "cached"  # same source, same fingerprint

    src.write_text(MODULE.format(tag="a", factor="10"))  # the body changes, version does not
    edited = run([_load(src, "user_metric").total(name="t")], {"data": [1, 2, 3]}, cache_dir=tmp_path / "c")
    rec = edited.record("t")
    assert (rec.status, rec.reason) == ("computed", "code")
    assert edited["t"] == 60.0


def test_comments_docstrings_and_formatting_do_not_count(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text(MODULE.format(tag="b", factor="2"))
    b.write_text(MODULE.format(tag="c", factor="2").replace('"""The sum."""', "# a comment\n\n    # and another")
                 .replace("float(sum(data)) * 2", "float( sum( data ) )*2"))
    fa, fb = _load(a, "ci_a").total.code, _load(b, "ci_b").total.code
    assert fa == fb and fa.startswith("src:")
    c = tmp_path / "c.py"
    c.write_text(MODULE.format(tag="d", factor="3"))
    assert _load(c, "ci_c").total.code != fa


def test_functions_without_source_fall_back_to_bytecode():
    ns: dict = {}
    exec(textwrap.dedent("def f(data):\n    return sum(data) + 1\n"), ns)  # no file: no source
    g = lambda data: sum(data) + 1  # noqa: E731 - a lambda is hashed by its bytecode
    h = lambda data: sum(data) + 2  # noqa: E731
    assert code_identity(ns["f"]).startswith("code:")
    assert code_identity(g).startswith("code:") and code_identity(g) != code_identity(h)
    m = metric("ci_lambda", version="1", needs=["data"], register=False)(g)
    assert m.code == code_identity(g)


def test_a_metric_subclass_is_identified_by_its_class_source(tmp_path):
    class CiCounter(Metric):
        name = "ci_counter"
        version = "1"
        needs = ("data",)

        def compute(self, data):
            return self.helper(data)

        def helper(self, data):
            return len(data)

    assert CiCounter.metric.code == code_identity(CiCounter) and CiCounter.metric.code.startswith("src:")
    res = run([CiCounter.metric(name="n")], {"data": [1, 2]}, cache_dir=tmp_path)
    assert res["n"] == 2
