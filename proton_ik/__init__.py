"""proton_ik: an intra-kernel profiler for Triton and Gluon kernels.

    import proton_ik as proton
    import proton_ik.language as pl

    proton.start("matmul", mode="instrumentation")
    kernel[grid](...)          # kernels annotated with pl.scope / pl.enter_scope / pl.exit_scope
    proton.finalize()          # writes matmul.pftrace and matmul.pik

``with proton_ik.instrumented():`` compiles annotated kernels instrumented with no session
(nothing runs or is recorded): for calibration, benchmarks and machines with no GPU.

``proton_ik.diff("a.pik", "b.pik")`` compares two sessions scope by scope, with confidence
intervals (a pandas DataFrame; ``proton_ik.viewer.diff``).

The API mirrors ``triton.profiler``'s instrumentation mode, so that swapping the import is
enough: its ``mode`` strings and ``mode.Default(...)``, ``data``, ``hook`` and ``context``
arguments, ``finalize(output_format=...)`` and the host-side ``scope`` are accepted and mapped
(README: "Coming from triton.profiler").
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Iterator
from pathlib import Path

from proton_ik import compile_mode, mode, torch_compile
from proton_ik.host_scopes import enter_scope, exit_scope, scope
from proton_ik.mode import Mode
from proton_ik.proton_modes import proton_mode
from proton_ik.result import Result
from proton_ik.session import DEFAULT_FORMATS, DEFAULT_POOL_BYTES, FORMATS, Session

# Kernels under torch.compile: Inductor's copy of their source keeps their imports of
# proton_ik.language, and what a compiled program runs follows the compile mode.
torch_compile.follow()

__all__ = [
    "Mode",
    "Result",
    "activate",
    "deactivate",
    "diff",
    "enter_scope",
    "exit_scope",
    "finalize",
    "flush",
    "instrumented",
    "merge",
    "mode",
    "profile",
    "scope",
    "start",
]

_session: Session | None = None

# triton.profiler's data= and output_format= values, and the trace file each one adds.
PROTON_DATA = {"tree": "hatchet", "trace": "chrome_trace"}
PROTON_CONTEXTS = ("shadow", "python")
PROTON_HOOKS = (None, "triton", "launch")
BACKENDS = (None, "instrumentation")
MIN_POOL_BYTES = 1 << 20


def start(
    name: str | None = None,
    *,
    mode: object = "instrumentation",
    backend: str | None = None,
    out_dir: str | Path | None = None,
    pool_bytes: int = DEFAULT_POOL_BYTES,
    formats: str | tuple[str, ...] = DEFAULT_FORMATS,
    context: str | None = "shadow",
    data: str | None = None,
    hook: str | None = None,
    timeline: str | None = None,
    overwrite: bool | None = None,
    flush_every: int | None = None,
    flush_seconds: float | None = None,
) -> Session:
    """Start profiling: annotated kernels compiled from now on record their scopes.

    ``mode`` is ``"instrumentation"`` with options, e.g.
    ``"instrumentation:granularity=warpgroup:capacity=4096"``, or one of Triton Proton's
    (``"default:buffer_size=4096"``, ``proton_ik.mode.Default(...)``). ``name`` may carry a
    directory, as in ``triton.profiler``, unless ``out_dir`` is given. ``pool_bytes`` bounds
    the device memory that holds records in flight, per device. ``formats`` names the traces
    finalize writes besides the session file: ``"pftrace"`` (the default), ``"json"``
    (Chrome), ``"chrome_trace"`` and ``"hatchet"`` (Proton's file names), and ``"html"`` (a
    self-contained report, ``proton_ik.viewer.report``). Proton's ``data``
    adds its file (``"tree"``: NAME.hatchet, ``"trace"``: NAME.chrome_trace); ``hook="triton"``
    names each launch from the kernel's ``launch_metadata``. ``timeline`` lays out the traces'
    tracks: ``"slots"`` (the default: each SM's CTA slots, as many as CTAs ran on it at once,
    whatever the grid) or ``"ctas"`` (a track per CTA, for small grids).

    Files are never written over: each process writes its own (under ``torchrun``, each rank's
    names carry ``.rankN``) and finalize moves them into place, taking ``NAME.1``, ``NAME.2``, ...
    where ``NAME``'s files exist. ``overwrite=True`` replaces them instead; it is the default when
    ``data=`` is given, as code written for ``triton.profiler`` reads ``NAME.hatchet`` back.
    Called as ``triton.profiler`` is (``backend="instrumentation"`` given), ``data`` defaults to
    Proton's ``"tree"``: ``NAME.hatchet`` is written as Proton writes it.
    Launches reach the session file when the device pool fills, at ``flush()`` and at finalize;
    ``flush_every=N`` (launches) or ``flush_seconds=S`` also writes them that often, so that a
    long job killed midway loses at most that much.
    """
    global _session
    _check_start(backend, context, data, hook, pool_bytes, timeline, flush_every, flush_seconds, overwrite)
    if backend is not None and data is None:
        data = "tree"  # triton.profiler.start's default: the code that calls it opens NAME.hatchet
    new_session = _session_with_files(name, out_dir, formats, data, mode, flush_every, flush_seconds)
    session = new_session(
        mode=Mode.parse(mode),  # parsed here, so that a Proton mode's warnings name start's caller
        pool_bytes=pool_bytes,
        launch_metadata=hook is not None,
        timeline=timeline,
        overwrite=bool(data) if overwrite is None else bool(overwrite),
    )
    session.start()
    _session = session
    return session


def _check_start(
    backend: object,
    context: object,
    data: object,
    hook: object,
    pool_bytes: object,
    timeline: object,
    flush_every: object,
    flush_seconds: object,
    overwrite: object,
) -> None:
    """``start``'s checks of its arguments, and of no session running, in the order it makes them."""
    if _session is not None:
        raise RuntimeError(
            f"proton_ik: session '{_session.name}' is already running (started at "
            f"{_session.started_at}); call proton_ik.finalize() before starting another"
        )
    _check_choice("backend", backend, BACKENDS, "proton_ik profiles inside kernels only")
    _check_choice("context", context, PROTON_CONTEXTS)
    _check_choice("data", data, (None, *PROTON_DATA))
    _check_choice("hook", hook, PROTON_HOOKS)
    if context == "python":
        warnings.warn(
            "proton_ik: context='python' (Python call stacks as context) has no meaning for "
            "intra-kernel records; accepted and ignored. Host scopes (proton_ik.scope) group launches",
            stacklevel=3,  # the caller of start
        )
    if isinstance(pool_bytes, bool) or not isinstance(pool_bytes, int) or pool_bytes < MIN_POOL_BYTES:
        raise ValueError(
            f"pool_bytes={pool_bytes!r}: the device pool for profile buffers takes a byte count of "
            f"at least {MIN_POOL_BYTES} (1 MiB), e.g. pool_bytes={DEFAULT_POOL_BYTES} (the default)"
        )
    _check_timeline(timeline)
    _check_flush(flush_every, flush_seconds)
    _check_choice("overwrite", overwrite, (None, True, False), "True replaces files of that name")


def _session_with_files(
    name: str | None,
    out_dir: str | Path | None,
    formats: str | tuple[str, ...],
    data: str | None,
    mode: object,
    flush_every: int | None,
    flush_seconds: float | None,
) -> functools.partial[Session]:
    """A ``Session`` with its files (folder, name, formats) and its flushes set; ``start`` gives
    the rest. A Proton mode's ``buffer_strategy=flush`` flushes every launch."""
    proton = proton_mode(mode)
    if proton is not None and proton.flushes_every_launch and flush_every is None and flush_seconds is None:
        flush_every = 1  # Proton's buffer_strategy=flush: records leave the device as they are written
    outputs = _formats(formats) + ((PROTON_DATA[data],) if data else ())
    directory, stem = _place(name, out_dir)
    return functools.partial(
        Session,
        name=stem,
        out_dir=directory,
        formats=tuple(dict.fromkeys(outputs)),
        flush_every=(flush_every, None if flush_seconds is None else float(flush_seconds)),
    )


def _check_choice(option: str, value: object, choices: tuple, why: str = "") -> None:
    if value not in choices:
        shown = ", ".join(repr(choice) for choice in choices)
        raise ValueError(f"{option}={value!r}: {why + '; ' if why else ''}choose from {shown}")


def _check_flush(launches: object, seconds: object) -> None:
    if launches is not None and (isinstance(launches, bool) or not isinstance(launches, int) or launches < 1):
        raise ValueError(f"flush_every={launches!r}: a number of launches, at least 1, e.g. flush_every=100")
    if seconds is not None and (
        isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0
    ):
        raise ValueError(f"flush_seconds={seconds!r}: a number of seconds above 0, e.g. flush_seconds=30")


def _check_timeline(timeline: object) -> None:
    if timeline is not None:
        from proton_ik.viewer.tracks import check_timeline

        check_timeline(timeline)


def _formats(formats: object) -> tuple[str, ...]:
    if isinstance(formats, str):
        formats = (formats,)
    if not isinstance(formats, (tuple, list)):
        raise ValueError(f"formats={formats!r}: a format name or a tuple of them, from {FORMATS}")
    for unsupported in (fmt for fmt in formats if fmt not in FORMATS):
        raise ValueError(f"unknown trace format {unsupported!r}; choose from {FORMATS}")
    return tuple(formats)


def _place(name: object, out_dir: str | Path | None) -> tuple[Path, str]:
    """The folder and the file stem of a session's files. As in ``triton.profiler``, ``name``
    may carry a folder; with ``out_dir`` it must be a plain name, so it cannot leave it."""
    if name is None:
        name = "proton_ik"
    if not isinstance(name, str) or not name.strip() or name.endswith(("/", "\\")):
        raise ValueError(f"name={name!r}: a session name is a non-empty file name, e.g. 'matmul'")
    path = Path(name)
    if out_dir is None:
        return (path.parent if str(path.parent) != "" else Path.cwd()), path.name
    if path.name != name or name in (".", ".."):
        raise ValueError(
            f"name={name!r} with out_dir={str(out_dir)!r}: the name must be a plain file name, so "
            "that the session's files stay in out_dir; put the folder in out_dir"
        )
    return Path(out_dir), name


def _running(action: str) -> Session:
    if _session is None:
        raise RuntimeError(f"proton_ik.{action}() needs a running session: call proton_ik.start() first")
    return _session


def _check_session(action: str, session: object) -> Session:
    """``session`` as triton.profiler takes it: None (all), 0 (the first) or the session itself."""
    running = _running(action)
    if session not in (None, 0) and session is not running:
        raise ValueError(
            f"proton_ik.{action}(session={session!r}): proton_ik runs one session at a time; "
            "pass nothing, 0, or what proton_ik.start() returned"
        )
    return running


def activate(session: object = None) -> None:
    """Resume recording (and instrumented compiles) after ``deactivate``."""
    _check_session("activate", session).activate()


def deactivate(session: object = None) -> None:
    """Pause: kernels compile and run plain until ``activate``."""
    _check_session("deactivate", session).deactivate()


def merge(
    paths: str | Path | list,
    output: str | Path,
    *,
    timeline: str | None = None,
    torch_trace: str | Path | None = None,
) -> Path:
    """One Perfetto trace of several sessions (a job's ranks: files, or folders of ``.pik``
    files), a root track each, on one time axis; returns its path. ``torch_trace``: a
    ``torch.profiler`` trace of the same steps (``prof.export_chrome_trace``), drawn beside them,
    each session aligned to the kernels CUPTI recorded (``viewer.torch_profiler``; how well:
    ``proton-ik merge --torch-trace`` prints it)."""
    from proton_ik.viewer.ranks import merge_sessions, sessions_of

    if torch_trace is None:
        return merge_sessions(paths, output, timeline=timeline)
    from proton_ik.viewer.torch_profiler import merge_torch_trace

    return merge_torch_trace(sessions_of(paths), torch_trace, output, timeline=timeline)[0]


def flush(session: object = None) -> None:
    """Copy every launch recorded so far off the devices into the session file, so that a long
    job can be profiled in steps: what is flushed is readable even if the process is killed
    before ``finalize`` (``proton-ik show`` reads the unclosed ``NAME.pik.HOST-PID.partial``)."""
    _check_session("flush", session).flush()


def finalize(session: object = None, output_format: str | None = "", timeline: str | None = None) -> Result:
    """End the session: drain the devices, write the session file and the traces, and return
    the result. ``output_format`` ("hatchet", "chrome_trace", "pftrace" or "json") adds a trace;
    ``timeline`` ("slots" or "ctas") replaces the one ``start`` was given."""
    global _session
    current = _check_session("finalize", session)
    _check_timeline(timeline)
    if timeline is not None:
        current.timeline = timeline
    if output_format:
        current.formats = tuple(dict.fromkeys((*current.formats, *_formats(output_format))))
    _session = None
    result = current.finalize()
    refused = current.refused_launches
    if not result.launches and refused:
        warnings.warn(
            f"proton_ik: session '{current.name}' recorded no launch, so no file was written: "
            f"{len(refused)} launch(es) were refused before they ran. {refused[0]}",
            stacklevel=2,
        )
    elif not result.launches and current.runs_kernels:
        warnings.warn(
            f"proton_ik: session '{current.name}' recorded no instrumented launch, so no file was "
            "written. Annotate kernels with pl.scope (or pl.enter_scope / pl.exit_scope) and "
            "launch them between start() and finalize()",
            stacklevel=2,
        )
    return result


def instrumented(mode: object = "instrumentation") -> contextlib.AbstractContextManager[Mode]:
    """``with proton_ik.instrumented(mode):`` compiles annotated kernels instrumented inside the
    block, with no session: no buffers, no launch hooks, no files. ``triton.compile(src,
    target=...)`` or ``kernel.warmup(...)`` in the block gives the instrumented binary, whose
    ``metadata.proton_ik`` holds its scopes and buffer layout. ``mode`` is what ``start`` takes;
    the block yields it as a ``Mode``.

    Blocks nest: the mode found on entry comes back on exit, also on an exception. The switch is
    per process (``proton_ik.compile_mode``). Inside a running session, a block with the
    session's mode changes nothing; another mode, or a paused session, is refused.
    """
    return _instrumented(Mode.parse(mode))  # parsed here, so Proton-mode warnings name the caller


@contextlib.contextmanager
def _instrumented(wanted: Mode) -> Iterator[Mode]:
    if _session is None:
        with compile_mode.compiling(wanted):
            yield wanted
        return
    running = (
        f"proton_ik.instrumented(mode='{wanted}'): session '{_session.name}' "
        f"(started at {_session.started_at})"
    )
    if wanted != _session.mode:
        raise RuntimeError(
            f"{running} compiles under '{_session.mode}', and kernels compile under one mode at a "
            f"time: inside the session compile with no block (or start it with mode='{wanted}'), "
            "or call proton_ik.finalize() before the block"
        )
    if not _session.active:
        raise RuntimeError(
            f"{running} is paused by proton_ik.deactivate(): call proton_ik.activate() and "
            "compile with no block, or call proton_ik.finalize() before the block"
        )
    yield wanted


def profile(func=None, *, name: str | None = None, **options: object):
    """``with proton_ik.profile("name"):``, or ``@proton_ik.profile`` on a function."""
    if callable(func):
        return _ProfileContext(name or func.__name__, options)(func)
    return _ProfileContext(func if isinstance(func, str) else name, options)


class _ProfileContext(contextlib.ContextDecorator):
    def __init__(self, name: str | None, options: dict[str, object]):
        self.name, self.options = name, options
        self.result: Result | None = None

    def __enter__(self) -> _ProfileContext:
        start(self.name, **self.options)  # type: ignore[arg-type]
        return self

    def __exit__(self, *exc: object) -> None:
        self.result = finalize()


def __getattr__(name: str) -> object:
    # diff reads sessions with the viewer (numpy, pandas): imported on first use, so that
    # ``import proton_ik`` in a kernel's process stays light.
    if name == "diff":
        from proton_ik.viewer.diff import diff

        return diff
    raise AttributeError(f"module 'proton_ik' has no attribute {name!r}")
