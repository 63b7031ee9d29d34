"""The planner: declared model work checked against a backend's capabilities before anything runs.

A third party's backend (``limited``: the toy model's weights behind an interface that
gives the chosen token's log-prob and the greedy token, no full-vocabulary statistics) is
installed through the ``evaldag.backends`` entry-point group, with a benchmark that asks
for Min-K%++-style statistics through it.
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evaldag.engine import Result, Rows, metric, run
from evaldag.engine.adapters.toy import ToyModel
from evaldag.engine.backend import Capabilities, Routed
from evaldag.engine.planner import PlanError, plan
from evaldag.engine.graph import Graph
from evaldag.engine.resources import ResourceSet

from ..plugins import install

EVALDAG = str(Path(sys.executable).with_name("evaldag"))

LIMITED = '''
"""A third party's backend: the toy weights, served without full-vocabulary statistics."""
import numpy as np

from evaldag.engine.adapters.toy import ToyModel
from evaldag.engine.backend import Capabilities, Identity, ModelAdapter, ModelResource

CAPS = Capabilities({"token_stats", "generate"}, {"logprob", "argmax"})


class LimitedAdapter(ModelAdapter):
    def __init__(self, inner):
        self.inner = inner

    def capabilities(self):
        return CAPS

    def run_batch(self, requests):
        out = self.inner.run_batch(requests)
        for r in out:
            if hasattr(r, "mu"):
                r.mu, r.var = np.full_like(r.mu, np.nan), np.full_like(r.var, np.nan)
        return out


class LimitedModel(ModelResource):
    backend = "limited"

    def __init__(self, target="0"):
        self.toy = ToyModel(seed=int(target))

    def fingerprint(self):
        return self.toy.fingerprint()  # the same weights as toy:SEED

    def capabilities(self):
        return CAPS

    def identity(self):
        return Identity("limited", "cpu", (("version", "1"),))

    def encoder(self):
        return self.toy.encoder()

    def load(self):
        return LimitedAdapter(self.toy.load())

    def describe(self):
        return {"spec": f"limited:{self.toy.seed}"}
'''

LIMBENCH = '''
"""A benchmark whose model comes from a backend spec; Min-K%++ needs full statistics."""
import argparse

import numpy as np
from pydantic import BaseModel

from evaldag.engine import Result, Rows, metric
from evaldag.engine.backend import Routed, backend_factory
from evaldag.engine.benchmark import Benchmark, MetricMenu
from evaldag.engine.requests import TokenStats


def _stats(model, data):
    enc = model.encoder()
    got = yield [TokenStats(tuple(enc.encode(r["q"])), tuple(enc.encode(r["a"], add_special_tokens=False))) for r in data]
    listed = lambda a: None if a is None else a.tolist()  # noqa: E731 - None: not available from this backend
    return {"lp": [g.logprob.tolist() for g in got], "mu": [listed(g.mu) for g in got], "var": [listed(g.var) for g in got]}


lp_stats = metric("limbench_lp_stats", version="1", needs=("model", "data"), register=False,
                  requests={"model": {"token_stats": ("logprob",)}})(_stats)


def _full(model, data):
    return (yield from _stats(model, data))


full_stats = metric("limbench_full_stats", version="1", needs=("model", "data"), register=False,
                    requests={"model": {"token_stats": ("logprob",)}})(_full)


@metric("limbench_mean_lp", version="1", parents={"s": lp_stats()}, register=False)
def mean_lp(s):
    return Result(float(np.mean([np.mean(x) for x in s["lp"]])))


@metric("limbench_minkpp", version="1", parents={"s": full_stats()}, register=False,
        uses={"token_stats": ("mu", "var")})
def minkpp(s):
    z = [(np.asarray(l) - np.asarray(m)) / np.sqrt(np.asarray(v)) for l, m, v in zip(s["lp"], s["mu"], s["var"])]
    return Result(float(np.mean([np.mean(x) for x in z])))


class Cfg(BaseModel):
    model: str
    fallback: str | None = None
    metrics: tuple[str, ...] = ()


class LimBench(Benchmark):
    name = "limbench"
    group = "LIM"
    description = "a benchmark on a third-party backend"
    Config = Cfg

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--lim-model", required=True)
        parser.add_argument("--lim-fallback")

    def config_from_args(self, args):
        return Cfg(model=args.lim_model, fallback=args.lim_fallback, metrics=self.metrics_from_args(args))

    def metric_menu(self):
        return MetricMenu(default=("mean_lp", "minkpp"), all=("mean_lp", "minkpp"))

    def build(self, cfg):
        def spec(s):
            scheme, _, target = s.partition(":")
            return backend_factory(scheme)(target)
        model = spec(cfg.model)
        if cfg.fallback:
            model = Routed(model, spec(cfg.fallback))
        made = {"mean_lp": lambda: mean_lp(name="mean_lp", group="LIM"),
                "minkpp": lambda: minkpp(name="minkpp", group="LIM")}
        rows = [{"q": "who is it?", "a": "a cat"}, {"q": "where?", "a": "at home, now"}]
        return [made[m]() for m in cfg.metrics], {"model": model, "data": Rows(lambda: rows, source="lim:2")}
'''


@pytest.fixture()
def limited(tmp_path):
    """A dist-info with an ``evaldag.backends`` and an ``evaldag.benchmarks`` entry point, as pip leaves it."""
    return install(tmp_path / "site", "limitedbackend", {"limitedbackend.py": LIMITED, "limbench.py": LIMBENCH},
                   "[evaldag.backends]\nlimited = limitedbackend:LimitedModel\n\n"
                   "[evaldag.benchmarks]\nlimbench = limbench:LimBench\n")


def _cli(env, tmp_path, *extra):
    cmd = [EVALDAG, "run", "limbench", "--lim-model", "limited:3", "--out", str(tmp_path / "out"),
           "--cache-dir", str(tmp_path / "cache"), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def test_refusal_is_one_line_exit_2_and_nothing_written(limited, tmp_path):
    done = _cli(limited, tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "evaldag: error: limbench_minkpp needs full-vocabulary log-prob statistics; limited:3 gives token statistics "
        "with the chosen token's log-prob and the greedy token (argmax) only, generation: drop it, or add --model-arg fallback=hf:DIR"]
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_fallback_serves_just_the_vertex_the_primary_cannot(limited, tmp_path):
    done = _cli(limited, tmp_path, "--lim-fallback", "toy:3")
    assert done.returncode == 0, done.stderr
    nodes = json.loads((tmp_path / "out" / "run.json").read_text())["nodes"]
    served = {n["metric"]: n.get("backend") for n in nodes.values()}
    assert served == {"limbench_lp_stats": {"model": "limited:3"}, "limbench_full_stats": {"model": "toy:3"},
                      "limbench_mean_lp": None, "limbench_minkpp": None}
    ex = json.loads((tmp_path / "out" / "run.json").read_text())["executor"]
    fp = ToyModel(seed=3).fingerprint()
    limited_key = [k for k in ex["forwarded_by_model"] if k != fp]
    # two rows each: the limited backend (its own model key) served one scorer, the toy the other
    assert ex["forwarded_by_model"] == {fp: {"token_stats": 2}, limited_key[0]: {"token_stats": 2}}
    assert limited_key[0].startswith(fp + "~limited-")
    summary = json.loads((tmp_path / "out" / "LIM_SUMMARY.json").read_text())
    assert np.isfinite(summary["minkpp"])  # full statistics, not the NaNs the limited backend would give


# ---------------------------------------------------------------------------- in-process


class _Limited(ToyModel):
    """The toy weights without full-vocabulary statistics (capabilities only: the planner never loads)."""

    def capabilities(self) -> Capabilities:
        return Capabilities({"token_stats"}, {"logprob"})

    def label(self) -> str:
        return "limited:0"


@metric("planner_stats", version="1", needs=("model", "data"), register=False,
        requests={"model": {"token_stats": ("logprob",)}})
def _stats(model, data):
    got = yield []
    return {"n": len(got)}


@metric("planner_minkpp", version="1", parents={"s": _stats()}, register=False, uses={"token_stats": ("mu", "var")})
def _minkpp(s):
    return Result(0.0)


@metric("planner_greedy", version="1", parents={"s": _stats()}, register=False, uses={"token_stats": ("argmax",)})
def _greedy(s):
    return Result(0.0)


def test_plan_names_every_metric_and_what_is_missing(tmp_path):
    ok = plan(Graph([_minkpp(), _greedy()]), ResourceSet({"model": ToyModel(), "data": [1]}))
    assert list(ok.labels.values()) == [{"model": "toy:0"}]  # the one scorer both read, on the toy
    retain = {"model": "retain_model"}
    graph = Graph([_minkpp(), _minkpp(name="mk_r", bind=retain), _greedy(name="g_r", bind=retain)])
    with pytest.raises(PlanError) as e:
        run(graph, {"model": ToyModel(), "retain_model": _Limited(), "data": [1]}, cache_dir=tmp_path / "c")
    assert str(e.value) == (
        "planner_greedy needs the greedy token (argmax), planner_minkpp needs full-vocabulary log-prob statistics; "
        "limited:0 gives token statistics with the chosen token's log-prob only: drop them, or add --model-arg retain:fallback=hf:DIR")
    assert not (tmp_path / "c").exists()


def test_routed_capabilities_are_the_union_and_the_primary_is_preferred():
    r = Routed(_Limited(), ToyModel())
    assert r.capabilities() == Capabilities({"token_stats", "generate"}, {"logprob", "argmax", "mu", "var"})
    assert r.serving("token_stats", {"logprob"}) is r.primary
    assert r.serving("token_stats", {"logprob", "mu"}) is r.fallback and r.fingerprint() == ToyModel().fingerprint()


def test_the_plan_view_shows_the_backends_or_the_refusal(limited, tmp_path):
    base = [EVALDAG, "graph", "limbench", "--lim-model", "limited:3", "--cache-dir", str(tmp_path / "cache"),
            "--format", "mermaid"]
    refused = subprocess.run(base, capture_output=True, text=True, env=limited)
    assert refused.returncode == 2 and refused.stderr.splitlines()[0].startswith(
        "evaldag: error: limbench_minkpp needs full-vocabulary log-prob statistics; limited:3 gives")
    assert not (tmp_path / "cache").exists()
    shown = subprocess.run(base + ["--lim-fallback", "toy:3"], capture_output=True, text=True, env=limited)
    assert shown.returncode == 0, shown.stderr
    assert sorted(line.split("[")[0] + " <- " + line.split(" <- ")[1] for line in shown.stderr.splitlines()) == [
        "evaldag: limbench_full_stats <- model: toy:3", "evaldag: limbench_lp_stats <- model: limited:3"]
