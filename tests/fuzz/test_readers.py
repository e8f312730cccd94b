"""Fuzzing in CI: ``proton-ik show``, ``convert`` and ``diff`` on structurally malformed files,
the mode parser and the scope-name check, each a bounded number of examples. A command succeeds
or says in one line what is wrong with the file."""

from __future__ import annotations

import functools
import random
import string
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proton_ik.contract.names import MAX_NAME_LENGTH, scope_name_problem
from proton_ik.mode import Mode

from .malformed import COMMANDS, MUTATIONS, malformed, run, said_one_error, seeds

FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@functools.cache
def seed_files() -> dict[str, bytes]:
    return seeds(Path(tempfile.mkdtemp(prefix="fuzz-seeds-")))


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("kind", MUTATIONS)
@FUZZ
@given(seed=st.integers(0, 2**32))
def test_a_command_reads_a_malformed_file_or_says_what_is_wrong(command, kind, seed, tmp_path_factory):
    suffix, data = malformed(kind, seed_files(), random.Random(seed))
    scratch = tmp_path_factory.mktemp("in")
    path = scratch / f"input{suffix}"
    path.write_bytes(data)
    code, errors = run(command, path, scratch)
    if code != 0:
        assert code == 1, errors  # bad input (2 is bad usage: the fuzz passes none)
        assert said_one_error(command, path, errors), errors
    else:  # what it said on the way: warnings only
        assert all(line.startswith(f"proton-ik {command}: warning: ") for line in errors.splitlines()), errors


@settings(max_examples=300, deadline=None)
@given(
    text=st.one_of(
        st.text(max_size=80),
        st.lists(
            st.sampled_from(
                ["instrumentation", "granularity=warp", "granularity=foo", "capacity=auto", "capacity=16",
                 "capacity=abc", "capacity=0", "capacity=3", "pairs=on", "pairs=maybe", "=", "x=1", "",
                 "proton_ik", "default"]
            ),
            max_size=5,
        ).map(":".join),
        st.integers(),
        st.none(),
    )
)  # fmt: skip
def test_the_mode_parser_returns_a_mode_or_a_value_error(text):
    try:
        mode = Mode.parse(text)
    except ValueError as error:
        assert str(error)
    else:
        assert Mode.parse(str(mode)) == mode


@settings(max_examples=300, deadline=None)
@given(
    name=st.one_of(st.text(max_size=200), st.text(string.printable, max_size=200), st.integers(), st.none())
)
def test_the_scope_name_check_accepts_exactly_printable_ascii_names(name):
    problem = scope_name_problem(name)
    good = (
        isinstance(name, str)
        and 0 < len(name) <= MAX_NAME_LENGTH
        and all(0x20 <= ord(c) < 0x7F and c not in '"\\$' for c in name)
    )
    assert (problem is None) == good
    if problem is not None:
        assert isinstance(problem, str) and problem
