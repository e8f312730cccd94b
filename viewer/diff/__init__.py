"""Two sessions compared scope by scope, with cluster-bootstrap confidence intervals.

    frame = proton_ik.diff("before.pik", "after.pik")  # one row per scope; frame.attrs: kernels, clocks
    print(format_diff(frame))                          # what ``proton-ik diff`` prints

Matching: a scope of A pairs with the scope of B of the same kernel, name and source line. A
scope whose line moved is not paired but reported twice, "only in A" and "only in B": an edit
that moves a scope may change what it encloses, and two scopes are only known to be one by their
place in the code. ``ignore_lines=True`` pairs them by kernel and name alone.

Statistics, per session, in nanoseconds (each launch's fitted SM clocks convert the cycles, so
sessions taken at different clocks compare; the report says when the clocks differ):

- a scope's median duration, over all of its events (the median ``proton-ik show`` prints);
- its share of kernel time: its durations summed over the lifetimes of its kernel's finished
  units (warps, by default) summed, as ``show``'s share; and its time per launch of the kernel;
- a kernel's warp time per launch (unit lifetimes summed) and span per launch (the median over
  its launches of first unit start to last unit end).

Confidence intervals are percentile intervals of ``B* - A*``, A* and B* being the statistic on
independent resamples of each session: CTAs drawn with replacement within each launch, each
with all of its events and its warp time (``bootstrap``). The resampled median is exactly the
median of the drawn CTAs' events, repeats included, not an approximation. Events of one CTA are
correlated (one SM, one moment of the run), so resampling events would understate the spread;
CTAs of a launch are independent draws of the kernel's work, so resampling them is the
bootstrap of a cluster sample, and the bootstrap of a quantile is consistent as the number of
clusters grows. With few CTAs the percentile interval of a median is slightly liberal; the
false-positive rate is measured in ``tests/viewer/test_diff.py``.

Columns: ``*_a`` and ``*_b`` are A's and B's values. ``change_ns`` (with ``change_ns_low`` and
``change_ns_high``, its interval) is the change of the median, ``change`` (``change_low``,
``change_high``) the same as a fraction of A's median; ``share_change*`` the change of share;
``per_launch_*`` the scope's time per launch of its kernel, and ``explains`` its change over
the kernel's change of warp time per launch; ``ctas_*`` count the CTAs with events of the scope.

Verdict: "slower" or "faster" where the interval of the median's change excludes zero and the
change is at least ``min_change`` of A's median; "negligible" where the interval excludes zero
but the change is smaller; "no significant change" where it includes zero; "only in A" and
"only in B" for scopes not paired. Relative changes divide by A's median (or A's value): their
interval is the difference's, divided the same way.

Its modules: ``compare`` (matching, the statistics' table and the verdicts), ``sample`` (a
session's events and warp time by CTA), ``stats`` (one side's statistics, resampled),
``bootstrap`` (resampling CTAs, the exact resampled median) and ``text`` (what ``proton-ik diff``
prints).
"""

from proton_ik.viewer.diff.compare import (
    FASTER,
    KERNEL_COLUMNS,
    NEGLIGIBLE,
    NO_CHANGE,
    ONLY_A,
    ONLY_B,
    SCOPE_COLUMNS,
    SLOWER,
    DiffOptions,
    diff,
    diff_sessions,
)
from proton_ik.viewer.diff.text import format_diff

__all__ = [
    "FASTER",
    "KERNEL_COLUMNS",
    "NEGLIGIBLE",
    "NO_CHANGE",
    "ONLY_A",
    "ONLY_B",
    "SCOPE_COLUMNS",
    "SLOWER",
    "DiffOptions",
    "diff",
    "diff_sessions",
    "format_diff",
]
