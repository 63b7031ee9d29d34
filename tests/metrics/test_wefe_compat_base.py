"""WEFE's BaseMetric on evaldag: the seed's ExampleMetric (docs listing, imports changed) and its
WEFE 1.0.1 spelling give the example's formula on WEFE's vectors, computed here from the npz
alone; the lookup's rules (threshold, primary then secondary preprocessing, None), the checks'
errors, and the node (cached, fingerprinted by the class source)."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial import distance

from evaldag.engine import write_outputs
from evaldag.metrics.fairness import wefe_compat as wefe

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "coming-from.md"
FIX = ROOT / "tests" / "fixtures" / "wefe"
SETS = json.loads((FIX / "wefe_word_sets.json").read_text())
FLOWERS = SETS["weat1_flowers_insects"]["target_sets"][0]
WEAPONS = SETS["weat2_instruments_weapons"]["target_sets"][1]
PLEASANT = SETS["weat1_flowers_insects"]["attribute_sets"][0]


def _section_blocks(heading: str) -> list[str]:
    section = re.search(rf"## {re.escape(heading)}\n(.*?)(?=\n## |\Z)", DOC.read_text(), re.S).group(1)
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.fixture(scope="module")
def listing(tmp_path_factory):
    """The docs' two class listings as a module imported from its file (so its source is hashed)."""
    path = tmp_path_factory.mktemp("wefe") / "example_metric.py"
    path.write_text("\n\n".join(_section_blocks("WEFE")[:2]))
    spec = importlib.util.spec_from_file_location("wefe_docs_listing", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["wefe_docs_listing"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def model():
    return wefe.WordEmbeddingModel(str(FIX / "wefe_subset.npz"), "wefe_subset", "")


def reference(sets: list[list[str]]) -> float:
    """ExampleMetric's formula on the npz, with WEFE's lookup rule by hand (found words, first seen)."""
    z = np.load(FIX / "wefe_subset.npz")
    vec = dict(zip((str(w) for w in z["words"]), z["vectors"]))
    means = [np.mean(np.array([vec[w] for w in dict.fromkeys(s) if w in vec]), axis=0) for s in sets]
    return distance.cosine(means[0], means[2]) - distance.cosine(means[1], means[2])


def test_docs_example_runs_and_gives_the_formula(listing, model, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # the page names the embeddings relative to the repository
    ns = {"CACHE": str(tmp_path), "flowers": FLOWERS, "weapons": WEAPONS, "pleasant": PLEASANT,
          **{k: getattr(listing, k) for k in ("ExampleMetric", "WordEmbeddingModel", "Query")}}
    exec(compile(_section_blocks("WEFE")[2], str(DOC), "exec"), ns)
    expected = reference([FLOWERS, WEAPONS, PLEASANT])
    assert "axe" in WEAPONS and "axe" not in model  # one word lost (4% < 20%): the query still runs
    assert ns["results"] == {"query_name": "Flowers and Weapons wrt Pleasant", "result": pytest.approx(expected, abs=1e-7),
                             "em": pytest.approx(expected, abs=1e-7)}
    assert capsys.readouterr().out.startswith("{'query_name': 'Flowers and Weapons wrt Pleasant', 'result': ")
    assert ns["again"] == ns["results"]
    q = ns["query"]
    ex = listing.ExampleMetric(cache_dir=str(tmp_path))
    ex.run_query(q, model)
    assert ex.last_run.record("WEFE/query/EM").status == "cached"
    new = listing.ExampleMetric101(cache_dir=str(tmp_path))  # WEFE 1.0.1's spelling: its own node, the same number
    assert new.run_query(q, model)["result"] == pytest.approx(expected, abs=1e-7)
    assert new.last_run.record("WEFE/query/EM101").status == "computed"


def test_lost_words_give_none_and_a_nan_with_its_reason(listing, model, tmp_path):
    q = wefe.Query([FLOWERS, WEAPONS], [["caress", "freedom", "zzqx", "qqzz"]], ["Flowers", "Weapons"], ["Mixed"])
    assert model.get_embeddings_from_query(q) is None  # the seed's spelling
    assert wefe.get_embeddings_from_query(model, q) is None  # 1.0.1's
    assert wefe.get_embeddings_from_query(model, q, lost_vocabulary_threshold=0.5) is not None  # 2 of 4 lost: not more than half
    for cls, short in ((listing.ExampleMetric, "EM"), (listing.ExampleMetric101, "EM101")):
        out = cls(cache_dir=str(tmp_path)).run_query(q, model)
        assert math.isnan(out["result"]) and math.isnan(out["em"])
        assert "attribute set 'Mixed' lost 2 of 4 words (50.0%)" in out["reason"]
    m = listing.ExampleMetric(cache_dir=str(tmp_path))
    m.run_query(q, model)
    write_outputs(m.last_run, tmp_path / "out")  # the node's files: strict JSON, the NaN a null with its reason
    ev = json.loads((tmp_path / "out" / "WEFE_EVAL.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    summary = json.loads((tmp_path / "out" / "WEFE_SUMMARY.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert ev["query/EM"]["agg_value"] is None and ev["query/EM"]["em"] is None
    assert "attribute set 'Mixed' lost 2 of 4 words" in ev["query/EM"]["reason"]
    assert summary["query/EM"]["value"] is None and "lost 2 of 4 words" in summary["query/EM"]["reason"]


def test_primary_then_secondary_preprocessing(listing, model, tmp_path):
    upper = [w.upper() for w in FLOWERS]
    q_up = wefe.Query([upper, WEAPONS], [PLEASANT], ["Flowers", "Weapons"], ["Pleasant"])
    q = wefe.Query([FLOWERS, WEAPONS], [PLEASANT], ["Flowers", "Weapons"], ["Pleasant"])
    assert model.get_embeddings_from_query(q_up) is None  # the primary preprocessing alone misses them
    targets, _ = model.get_embeddings_from_query(q_up, secondary_preprocessor_args={"lowercase": True})
    plain, _ = wefe.get_embeddings_from_query(model, q)
    assert list(targets["Flowers"]) == list(plain["Flowers"])
    assert all(np.array_equal(targets["Flowers"][w], plain["Flowers"][w]) for w in plain["Flowers"])
    expected = reference([FLOWERS, WEAPONS, PLEASANT])
    seed = listing.ExampleMetric(cache_dir=str(tmp_path)).run_query(q_up, model, secondary_preprocessor_args={"lowercase": True})
    new = listing.ExampleMetric101(cache_dir=str(tmp_path)).run_query(q_up, model, preprocessors=[{}, {"lowercase": True}])
    assert seed["result"] == pytest.approx(expected, abs=1e-7) and new["result"] == pytest.approx(expected, abs=1e-7)


def test_checks_raise_wefe_errors_before_any_work(listing, model, tmp_path):
    q22 = wefe.Query([FLOWERS, WEAPONS], [PLEASANT, PLEASANT[:5]], ["Flowers", "Weapons"], ["Pleasant", "Few"])
    for cls, short in ((listing.ExampleMetric, "EM"), (listing.ExampleMetric101, "EM101")):
        m = cls(cache_dir=str(tmp_path))
        with pytest.raises(ValueError, match=re.escape(
                f"The cardinality of the attribute sets of the '{q22.query_name}' query (2) does not match "
                f"the cardinality required by {short} (1).")):
            m.run_query(q22, model)
        assert m.last_run is None  # nothing ran
        with pytest.raises(TypeError, match="model should be a WordEmbeddingModel instance"):
            m.run_query(wefe.Query([FLOWERS, WEAPONS], [PLEASANT]), {"a": np.zeros(3)})
    q = wefe.Query([FLOWERS, WEAPONS], [PLEASANT])
    with pytest.raises(TypeError, match="lost_vocabulary_threshold should be a float"):
        listing.ExampleMetric(cache_dir=str(tmp_path)).run_query(q, model, 1)  # the seed's super().run_query check
    with pytest.raises(TypeError, match="preprocessor_args should be a dict"):
        model.get_embeddings_from_query(q, preprocessor_args=[{}])


def test_edited_class_recomputes(listing, model, tmp_path):
    """The node's code identity is the class's source: same name, other body -> computed again."""
    q = wefe.Query([FLOWERS, WEAPONS], [PLEASANT])
    first = listing.ExampleMetric(cache_dir=str(tmp_path))
    first.run_query(q, model)
    path = Path(listing.__file__).with_name("edited_metric.py")
    path.write_text(Path(listing.__file__).read_text().replace("dist_target_0_attr - dist_target_1_attr",
                                                               "dist_target_1_attr - dist_target_0_attr"))
    spec = importlib.util.spec_from_file_location("wefe_docs_listing_edited", path)
    edited = importlib.util.module_from_spec(spec)
    sys.modules["wefe_docs_listing_edited"] = edited
    spec.loader.exec_module(edited)
    second = edited.ExampleMetric(cache_dir=str(tmp_path))
    out = second.run_query(q, model)
    assert second.last_run.record("WEFE/query/EM").status == "computed"
    assert out["result"] == pytest.approx(-first.run_query(q, model)["result"])


def test_a_metric_configured_in_init_is_cached_per_configuration(listing, model, tmp_path):
    """Instance attributes are params: two configurations are two nodes, never one cached value."""
    class Scaled(listing.ExampleMetric):
        metric_short_name = "SEM"

        def __init__(self, scale=1.0, **kw):
            super().__init__(**kw)
            self.scale = scale

        def _calc_metric(self, target_embeddings, attribute_embeddings):
            return self.scale * super()._calc_metric(target_embeddings, attribute_embeddings)

    q = wefe.Query([FLOWERS, WEAPONS], [PLEASANT])
    one, two = Scaled(1.0, cache_dir=str(tmp_path)), Scaled(2.0, cache_dir=str(tmp_path))
    a, b = one.run_query(q, model)["result"], two.run_query(q, model)["result"]
    assert b == pytest.approx(2 * a) and a == pytest.approx(reference([FLOWERS, WEAPONS, PLEASANT]), abs=1e-7)
    assert two.last_run.record("WEFE/query/SEM").status == "computed"
    again = Scaled(2.0, cache_dir=str(tmp_path))
    assert again.run_query(q, model)["result"] == b and again.last_run.record("WEFE/query/SEM").status == "cached"
