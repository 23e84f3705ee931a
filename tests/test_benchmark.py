import json

import pytest

from experiments import benchmark


def test_quick_attention_section_produces_rows_with_ratios():
    rows = benchmark.run_sections(["attention"], quick=True)
    names = [r["name"] for r in rows]
    assert "attnjax.dot_product_attention" in names
    timed = [r for r in rows if "ratio" in r]
    assert timed and all(r["ratio"] > 0 and r["seconds"] > 0 for r in timed)
    assert all("ok" not in r for r in rows)  # quick runs carry no targets


def test_quick_analysis_section_times_all_metrics_against_svd():
    rows = benchmark.run_sections(["analysis"], quick=True)
    by_name = {r["name"]: r for r in rows}
    assert any("svd" in n for n in by_name) and any("all metrics" in n for n in by_name)
    assert all(r["seconds"] > 0 for r in rows if "seconds" in r)
    assert all("ok" not in r for r in rows)


def test_quick_linear_section_compares_against_exact_attention():
    rows = benchmark.run_sections(["linear"], quick=True)
    assert any("linear causal" in r["name"] for r in rows)
    assert all(r["seconds"] > 0 for r in rows if r.get("seconds") is not None)
    assert all("ok" not in r for r in rows)


def test_unknown_section_is_rejected():
    with pytest.raises(ValueError, match="unknown benchmark sections"):
        benchmark.run_sections(["attention", "typo"], quick=True)


def test_write_json_is_atomic_and_complete(tmp_path):
    path = tmp_path / "sub" / "out.json"
    benchmark.write_json(str(path), {"environment": benchmark.environment(), "rows": [{"a": 1.5}]})
    data = json.loads(path.read_text())
    assert data["rows"] == [{"a": 1.5}] and data["environment"]["backend"]
    assert not (tmp_path / "sub" / "out.json.tmp").exists()
