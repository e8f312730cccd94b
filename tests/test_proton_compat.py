"""Code written for triton.profiler: its modes, arguments and host-side scopes, mapped or refused
with a message that lists what is allowed (no GPU needed)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from triton import knobs

import proton_ik
import proton_ik.language as pl
from proton_ik import compile_mode, host_scopes
from proton_ik.contract.layout import ENTRY_BYTES, Granularity
from proton_ik.mode import AUTO, Default, Mode

# Sessions started here on a machine with no GPU say so; what these tests check is elsewhere.
pytestmark = pytest.mark.filterwarnings("ignore:proton_ik. no CUDA GPU here")


@pytest.fixture(autouse=True)
def _no_session_left():
    yield
    if proton_ik._session is not None:
        proton_ik.finalize()
    assert compile_mode.active_mode() is None and knobs.compilation.instrumentation_mode == ""


def _parsed(mode):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parsed = Mode.parse(mode)
    return parsed, [str(w.message) for w in caught]


@pytest.mark.parametrize(
    ("proton", "granularity", "capacity"),
    [
        ("default", Granularity.WARP, AUTO),
        ("default:buffer_type=global", Granularity.WARP, AUTO),
        ("default:metric_type=cycle:buffer_size=4096", Granularity.WARP, 4096 // ENTRY_BYTES),
        ("default:buffer_size=1000", Granularity.WARP, 32),  # 62 entries: down to a power of two
        ("default:granularity=warp_group", Granularity.WARPGROUP, AUTO),
        ("default:granularity=warp_2", Granularity.WARP_2, AUTO),
        ("default:granularity=warp_8", Granularity.WARP_8, AUTO),
        ("default:granularity=warp_group_2", Granularity.WARPGROUP_2, AUTO),
        ("default:granularity=warp_group_8", Granularity.WARPGROUP_8, AUTO),
        ("default:granularity=cta:buffer_strategy=circular", Granularity.CTA, AUTO),
        ("default:optimizations=clock32,time_shift", Granularity.WARP, AUTO),
    ],
)
def test_proton_mode_strings_map_silently_where_they_mean_something(proton, granularity, capacity):
    mode, warned = _parsed(proton)
    assert (mode.granularity, mode.capacity) == (granularity, capacity)
    assert warned == []


@pytest.mark.parametrize(
    ("proton", "named"),
    [
        (
            "default:sampling_strategy=selective:sampling_options=0:granularity=cta",
            "sampling_strategy=selective",
        ),
        ("default:optimizations=sched_stores", "optimizations=sched_stores"),
    ],
)
def test_proton_fields_with_no_meaning_here_warn_once_naming_the_field(proton, named):
    _, warned = _parsed(proton)
    assert len(warned) == 1 and named in warned[0] and "accepted and ignored" in warned[0]


@pytest.mark.parametrize(
    ("proton", "warps"),
    [
        ("default:sampling_strategy=selective:sampling_options=0,2", (0, 2)),  # Proton's test_select_ids
        ("default:sampling_strategy=selective:sampling_options=2,0,2", (0, 2)),
        ("default:sampling_strategy=selective:sampling_options=1:granularity=warp_group", (4,)),
        ("default:sampling_strategy=selective:sampling_options=1,3:granularity=warp_2", (2, 6)),
        ("default:sampling_strategy=selective:sampling_options=1:granularity=warp_group_2", (8,)),
        ("default:sampling_strategy=none:sampling_options=0,2", ()),
    ],
)
def test_selective_sampling_keeps_the_units_listed(proton, warps):
    mode, warned = _parsed(proton)
    assert mode.warps == warps and warned == []


@pytest.mark.parametrize("options", ["", "a,b"])
def test_selective_sampling_without_unit_ids_says_what_to_pass(options):
    with pytest.raises(ValueError, match="sampling_options='0,2'"):
        _parsed(f"default:sampling_strategy=selective:sampling_options={options}")


@pytest.mark.parametrize(
    ("bad", "listed"),
    [
        ("default:granularity=thread", "warp_group_8"),
        ("default:metric_type=time", "cycle"),
        ("default:buffer_type=local", "global"),
        ("default:buffer_size=big", "buffer_size=4096"),
        ("default:optimizations=fast", "sched_barriers"),
        ("default:colour=red", "sampling_strategy"),
        ("instrumentation:granularity=foo", "warpgroup"),
        (123, "proton_ik.mode.Default"),
    ],
)
def test_wrong_proton_fields_are_errors_that_list_the_choices(bad, listed):
    with pytest.raises(ValueError, match=listed):
        Mode.parse(bad)


def test_default_objects_map_like_their_strings():
    default = Default(metric_type="cycle", optimizations="clock32", buffer_type="global", buffer_size=2048)
    assert Mode.parse(default) == Mode.parse("default:buffer_type=global:buffer_size=2048")
    assert Mode.parse(default).capacity == 2048 // ENTRY_BYTES
    assert proton_ik.mode.Default is Default  # proton.mode.Default(...) after the import swap


def test_enable_semantic_checks_its_argument_only():
    pl.enable_semantic("triton")
    pl.enable_semantic("gluon")
    pl.disable_semantic("triton")
    with pytest.raises(ValueError, match="triton, gluon"):
        pl.enable_semantic("cuda")


def test_host_scopes_nest_per_thread_and_close_in_order():
    assert host_scopes.open_scopes() == []
    with proton_ik.scope("outer"):
        proton_ik.enter_scope("inner")
        assert host_scopes.open_scopes() == ["outer", "inner"]
        with pytest.raises(RuntimeError, match="innermost open host scope is 'inner'"):
            proton_ik.exit_scope("outer")
        proton_ik.exit_scope()
        assert host_scopes.open_scopes() == ["outer"]

    @proton_ik.scope("decorated")
    def work():
        return host_scopes.open_scopes()

    assert work() == ["decorated"] and host_scopes.open_scopes() == []
    with pytest.raises(RuntimeError, match="no host scope open"):
        proton_ik.exit_scope()
    with pytest.raises(ValueError, match="non-empty string"):
        proton_ik.scope("")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"backend": "cupti"}, "inside kernels only"),
        ({"context": "stack"}, "'shadow', 'python'"),
        ({"data": "json"}, "'tree', 'trace'"),
        ({"hook": "kernel"}, "'triton'"),
        ({"pool_bytes": 0}, "at least 1048576"),
        ({"pool_bytes": "big"}, "at least 1048576"),
        ({"formats": "svg"}, "unknown trace format 'svg'"),
        ({"mode": "instrumentation:capacity=abc"}, "capacity=auto"),
        ({"mode": "instrumentation:granularity=foo"}, "choose from warp, warp_2, warp_4, warp_8, warpgroup"),
    ],
)
def test_every_start_option_is_checked_with_the_allowed_values(tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        proton_ik.start("x", out_dir=tmp_path, **options)
    assert proton_ik._session is None


def test_a_name_cannot_leave_out_dir_but_may_carry_a_folder_without_it(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="plain file name"):
        proton_ik.start("../../x", out_dir=tmp_path)
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no GPU here
        session = proton_ik.start("runs/add", data="trace")
    assert session.out_dir == Path("runs") and session.name == "add"
    assert "chrome_trace" in session.formats and "pftrace" in session.formats
    proton_ik.finalize(output_format="hatchet")
    assert "hatchet" in session.formats


def test_finalize_and_activate_take_triton_profilers_session_argument(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session = proton_ik.start("s", out_dir=tmp_path)
    proton_ik.deactivate(0)
    proton_ik.activate(session)
    with pytest.raises(ValueError, match="one session at a time"):
        proton_ik.activate(7)
    with pytest.raises(ValueError, match="unknown trace format 'xml'"):
        proton_ik.finalize(output_format="xml")
    proton_ik.finalize(0)


def test_a_context_with_no_meaning_here_warns_naming_it(tmp_path):
    with pytest.warns(UserWarning, match=r"context='python'.*accepted and ignored"):
        proton_ik.start("c", out_dir=tmp_path, context="python")


def test_called_as_triton_profiler_is_it_writes_the_tree_by_default(tmp_path, monkeypatch):
    """triton.profiler.start's data defaults to "tree": its callers open NAME.hatchet."""
    monkeypatch.setattr("proton_ik.session.why_no_gpu", lambda: "no CUDA GPU here")
    with pytest.warns(UserWarning, match="no CUDA GPU"):
        session = proton_ik.start(str(tmp_path / "run"), backend="instrumentation")
    try:
        assert "hatchet" in session.formats and session.overwrite
    finally:
        proton_ik.finalize()
    with pytest.warns(UserWarning, match="no CUDA GPU"):
        ours = proton_ik.start(str(tmp_path / "ours"))
    try:
        assert "hatchet" not in ours.formats and not ours.overwrite
    finally:
        proton_ik.finalize()


def test_buffer_strategy_flush_writes_each_launch_to_the_session_file_at_once(tmp_path):
    """Proton's records leave the device as its buffer fills: here, every launch is flushed."""
    _, warned = _parsed("default:buffer_strategy=flush")
    assert warned == []
    session = proton_ik.start("flushing", out_dir=tmp_path, mode="default:buffer_strategy=flush")
    try:
        assert session.flush_every == (1, None)
    finally:
        proton_ik.finalize()
    asked = proton_ik.start("asked", out_dir=tmp_path, mode="default:buffer_strategy=flush", flush_every=50)
    try:
        assert asked.flush_every == (50, None)  # what the caller asked for stands
    finally:
        proton_ik.finalize()
