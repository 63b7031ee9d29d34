"""The probes' report sections: per-probe tables and a marks overview across runs."""

from evaldag.benchmarks.probes.report import sections_html

RUN_A = {"DirectProbe": {"metrics": {"fail_rate": 0.2679, "sbic_fail_rate": float("nan")},
                         "intervals": {"fail_rate": [0.2579, 0.2779]},
                         "marks": {"fail_rate": {"mark_value": 2}}},
         "IsearProbe": {"status": "failed", "reason": "IsearProbe needs isear/isear_samples.txt"}}
RUN_B = {"DirectProbe": {"metrics": {"fail_rate": 0.01}, "intervals": {}, "marks": {"fail_rate": {"mark_value": 0}}}}


def test_marks_overview_and_tables():
    overview, tables = sections_html([("model-a", RUN_A), ("model-b", RUN_B)])
    # one row per marked metric, one column per run, letters A..D
    assert overview.count("<tr>") == 2 and "<th>model-a</th><th>model-b</th>" in overview
    assert ">C</b>" in overview and ">A</b>" in overview
    assert "[0.2579, 0.2779]" in tables and "NaN" in tables and "0.2679" in tables
    assert "IsearProbe</b>: failed" in tables and "<h3>model-b</h3>" in tables
