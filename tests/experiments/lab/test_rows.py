"""The five kinds of report row (`experiments.lab.study.prediction`) and their counts."""

import pytest

from experiments.lab.render import interval_text, kind_counts, label, rows_by_kind
from experiments.lab.study import KINDS, prediction


def test_every_kind_makes_a_row_and_an_unknown_kind_raises():
    for kind in ("prediction", "replication", "hypothesis", "sanity"):
        assert prediction("c", "src", "claim", 1.0, True, kind=kind)["kind"] == kind
    with pytest.raises(ValueError, match="kind must be one of"):
        prediction("c", "src", "claim", 1.0, True, kind="guess")


def test_a_not_applicable_row_has_no_verdict_and_says_why():
    row = prediction(
        "c", "src", "claim", None, None, "pre-training length varies", "not applicable"
    )
    assert row["verdict"] == "not applicable" and label(row["verdict"]) == "not applicable"
    with pytest.raises(ValueError, match="no verdict"):
        prediction("c", "src", "claim", 1.0, False, "setting differs", "not applicable")
    with pytest.raises(ValueError, match="which part of the setting differs"):
        prediction("c", "src", "claim", None, None, "", "not applicable")


def test_kind_counts_count_each_kind_apart():
    rows = [
        prediction("a", "s", "p", 1, True),
        prediction("b", "s", "p", 1, False),
        prediction("c", "s", "p", 1, True, kind="hypothesis"),
        prediction("d", "s", "p", 1, None, kind="replication"),
        prediction("e", "s", "p", 1, True, kind="sanity"),
        prediction("f", "s", "p", None, None, "why", kind="not applicable"),
    ]
    counts = kind_counts(rows)
    assert set(counts) == set(KINDS)
    assert counts["prediction"]["pass"] == 1 and counts["prediction"]["fail"] == 1
    assert counts["hypothesis"]["pass"] == 1 and counts["hypothesis"]["fail"] == 0
    assert counts["replication"]["not measured"] == 1
    assert counts["sanity"]["pass"] == 1
    assert counts["not applicable"]["not applicable"] == 1
    assert sum(sum(c.values()) for c in counts.values()) == len(rows)


def test_rows_by_kind_lists_every_kind_in_order_with_its_counts_and_records():
    rows = [
        prediction("a", "s", "p", 1, True, kind="sanity"),
        prediction("b", "s", "p", 1, False, kind="hypothesis"),
        {"name": "c", "verdict": "pass"},  # a record without a kind is a prediction
    ]
    groups = rows_by_kind(rows)
    assert [g["kind"] for g in groups] == list(KINDS)
    by_kind = {g["kind"]: g for g in groups}
    assert [r["name"] for r in by_kind["prediction"]["records"]] == ["c"]
    assert by_kind["hypothesis"]["counts"]["fail"] == 1 and by_kind["replication"]["records"] == []


def test_an_interval_reads_back_from_its_json_form():
    """A summary.json stores NaN as "nan": the interval text reads it back, e.g. a one-seed interval."""
    assert interval_text({"mean": 0.5, "low": 0.25, "high": 0.75}) == "0.5 [0.25, 0.75]"
    assert interval_text({"mean": 0.5, "low": "nan", "high": "nan", "n": 1}) == "0.5 [nan, nan]"
