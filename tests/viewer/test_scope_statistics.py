"""``summary.statistics.scope_statistics`` against pandas' groupby of the same events (what the
summary computed before it sorted once in numpy): the same groups in the same order, the same
counts, totals, first lines and files, and the same means, medians and 90th percentiles."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proton_ik.viewer.summary.statistics import launch_keys, scope_statistics

KEYS = ["host_scope", "kernel", "name", "scope"]


def by_pandas(events: pd.DataFrame, labels: pd.DataFrame | None) -> pd.DataFrame:
    keys = launch_keys(events, labels)
    read = events.assign(
        kernel=keys.kernel[keys.row], host_scope=keys.host_scope[keys.row], name=keys.name[keys.row]
    )
    grouped = read.assign(scope=read["scope"].astype(str)).groupby(KEYS, sort=True)
    stats = grouped.agg(
        line=("line", "first"),
        file=("file", "first"),
        count=("dur_ns", "size"),
        mean_ns=("dur_ns", "mean"),
        median_ns=("dur_ns", "median"),
        mean_cycles=("dur_cycles", "mean"),
        median_cycles=("dur_cycles", "median"),
        total_ns=("dur_ns", "sum"),
    )
    stats["p90_ns"] = grouped["dur_ns"].quantile(0.9)
    stats["p90_cycles"] = grouped["dur_cycles"].quantile(0.9)
    return stats


def events_of(rows: list[tuple[int, int, int, int | None, int | None, int, int]]) -> pd.DataFrame:
    launch, kernel, scope, line, file, ns, cycles = map(list, zip(*rows, strict=True))
    return pd.DataFrame(
        {
            "launch": np.array(launch, dtype=np.int64),
            "kernel": pd.Categorical.from_codes(kernel, categories=["mm", "add", "Norm"]),
            "scope": pd.Categorical.from_codes(scope, categories=["load", "store", "k_step", "Load"]),
            "line": pd.array(line, dtype="Int64"),
            "file": pd.Categorical.from_codes(
                [-1 if f is None else f for f in file], categories=["a.py", "b.py"]
            ),
            "dur_ns": np.array(ns, dtype=np.int64),
            "dur_cycles": np.array(cycles, dtype=np.int64),
        }
    )


ROWS = st.lists(
    st.tuples(
        st.integers(0, 5),
        st.integers(0, 2),
        st.integers(0, 3),
        st.none() | st.integers(1, 400),
        st.none() | st.integers(0, 1),
        st.integers(0, 10**9),
        st.integers(0, 10**9),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(rows=ROWS, named=st.booleans())
def test_the_statistics_are_pandas_groupbys(rows, named):
    events = events_of(rows)
    labels = (
        pd.DataFrame(
            {"host_scope": ["", "step 1", None, "step 2", "", "b"], "name": ["x", None, "y", None, "x", "z"]},
            index=range(6),
        )
        if named
        else None
    )
    found, expected = scope_statistics(events, labels, KEYS), by_pandas(events, labels)
    pd.testing.assert_index_equal(found.index, expected.index)
    pd.testing.assert_frame_equal(found, expected, check_dtype=False, check_categorical=False)


def test_a_trace_read_back_has_scopes_as_strings():
    events = events_of([(0, 0, 0, 3, 0, 10, 20), (0, 0, 1, 4, 1, 30, 60)]).assign(
        scope=lambda frame: frame["scope"].astype(object)
    )
    found = scope_statistics(events, None, KEYS)
    assert found.index.get_level_values("scope").tolist() == ["load", "store"]
    assert found["total_ns"].tolist() == [10, 30]


@pytest.mark.parametrize("q_rows", [1, 2, 7])
def test_the_percentiles_interpolate_as_numpy_does(q_rows):
    durations = list(range(3, 3 + 10 * q_rows, 10))
    events = events_of([(0, 0, 0, 1, 0, d, d) for d in durations])
    found = scope_statistics(events, None, KEYS)
    assert found["p90_ns"].iloc[0] == pytest.approx(np.quantile(durations, 0.9))
    assert found["median_ns"].iloc[0] == pytest.approx(np.median(durations))
