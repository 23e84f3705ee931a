"""The lab's shared statistics (`experiments.lab.stats`): reading a summary's JSON numbers back."""

import math

import numpy as np
import pytest

from attnjax.serialization import json_form
from experiments.lab import render, stats


def test_number_reads_back_every_number_of_a_json_form():
    values = [1, -2.5, 0.0, np.float32(0.25), np.int64(3), math.nan, math.inf, -math.inf]
    read = [stats.number(v) for v in json_form(values)]
    assert all(type(r) is float for r in read)
    np.testing.assert_array_equal(read, np.asarray(values, dtype=np.float64))


@pytest.mark.parametrize("value", ["NaN", "1.5", "infinity", None, True, [1.0], {"mean": 1.0}])
def test_number_refuses_what_is_not_a_json_number(value):
    with pytest.raises(
        TypeError, match=r"value must be a number or one of \['-inf', 'inf', 'nan'\]"
    ):
        stats.number(value)


def test_an_interval_prints_the_same_from_its_json_form():
    """`render.interval_text` of an interval and of its JSON form (NaN ends as 'nan') agree."""
    for values in ([1.0, 2.0, 4.0], [3.0], [1.0, math.inf]):
        iv = stats.interval(values)
        assert render.interval_text(json_form(iv), ".4g") == render.interval_text(iv, ".4g")
    assert render.interval_text(json_form(stats.interval([3.0]))) == "3 [nan, nan]"


def test_numbers_reads_non_finite_strings_through_nested_parts_and_keeps_labels():
    part = {"a": ["nan", 1.5, {"b": "-inf"}], "label": "causal", "c": "inf"}
    read = stats.numbers(part)
    assert math.isnan(read["a"][0]) and read["a"][1] == 1.5
    assert read["a"][2]["b"] == -math.inf and read["c"] == math.inf
    assert read["label"] == "causal"


def test_log_interval_is_a_geometric_mean_and_its_interval():
    x = stats.log_interval([1.0, 100.0] * 5)
    assert x["mean"] == pytest.approx(10.0) and x["low"] < 10.0 < x["high"] and x["n"] == 10
    assert math.isnan(stats.log_interval([0.0, 1.0])["low"])  # an underflowed median


def test_within_is_three_way_and_one_sided_with_an_infinite_end():
    iv = {"mean": 2.0, "low": 1.5, "high": 3.0, "n": 10}
    assert stats.within(iv, 1.0, 4.0) is True
    assert stats.within(iv, 3.5, math.inf) is False and stats.within(iv, -math.inf, 1.0) is False
    assert stats.within(iv, 2.0, math.inf) is None  # straddles the lower end
    assert stats.within(iv, -math.inf, 2.5) is None  # straddles the upper end
    assert stats.within({"mean": 2.0, "low": "nan", "high": "nan", "n": 1}, 1, 3) is None
    assert stats.within(None, 1, 3) is None


def test_contains_is_two_sided_and_three_way():
    iv = {"mean": 2.0, "low": 1.5, "high": 3.0, "n": 10}
    assert stats.contains(iv, 2.5) is True and stats.contains(iv, 1.5) is True  # ends included
    assert stats.contains(iv, 1.4) is False and stats.contains(iv, 3.1) is False
    assert stats.contains({"mean": 2.0, "low": "nan", "high": 3.0, "n": 1}, 2.0) is None
    assert stats.contains(None, 2.0) is None
