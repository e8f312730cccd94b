"""proton_ik: an intra-kernel profiler for Triton and Gluon kernels.

    import proton_ik as proton
    import proton_ik.language as pl

    proton.start("matmul", mode="instrumentation")
    kernel[grid](...)          # kernels annotated with pl.scope / pl.enter_scope / pl.exit_scope
    proton.finalize()          # writes matmul.pftrace, matmul.json and matmul.pik

The API mirrors ``triton.profiler`` so that swapping the import is enough.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from proton_ik.mode import Mode
from proton_ik.session import DEFAULT_FORMATS, DEFAULT_POOL_BYTES, FORMATS, Result, Session

__all__ = ["Mode", "Result", "activate", "deactivate", "finalize", "profile", "start"]

_session: Session | None = None


def start(
    name: str | None = None,
    *,
    mode: str | Mode | None = "instrumentation",
    backend: str | None = "instrumentation",
    out_dir: str | Path | None = None,
    pool_bytes: int = DEFAULT_POOL_BYTES,
    formats: str | tuple[str, ...] = DEFAULT_FORMATS,
    **triton_profiler_options: object,
) -> Session:
    """Start profiling: annotated kernels compiled from now on record their scopes.

    ``mode`` is ``"instrumentation"`` with options, e.g.
    ``"instrumentation:granularity=warpgroup:capacity=4096"``. ``pool_bytes`` bounds the device
    memory that holds records in flight. ``formats`` names the traces finalize writes besides
    the session file: ``"pftrace"`` (the default) and ``"json"`` (Chrome). ``triton.profiler``'s ``context``, ``data`` and
    ``hook`` arguments are accepted and ignored, so its call sites work unchanged.
    """
    global _session
    if _session is not None:
        raise RuntimeError(
            f"proton_ik: session '{_session.name}' is already running (started at "
            f"{_session.started_at}); call proton_ik.finalize() before starting another"
        )
    if backend not in (None, "instrumentation"):
        raise ValueError(f"proton_ik has one backend, 'instrumentation'; got backend={backend!r}")
    unknown = set(triton_profiler_options) - {"context", "data", "hook"}
    if unknown:
        raise TypeError(f"proton_ik.start() got unexpected arguments {sorted(unknown)}")
    if isinstance(formats, str):
        formats = (formats,)
    if not isinstance(pool_bytes, int) or pool_bytes < 1 << 20:
        raise ValueError(
            f"pool_bytes={pool_bytes!r}: the device pool for profile buffers takes a byte count of "
            f"at least 1 MiB, e.g. pool_bytes={DEFAULT_POOL_BYTES} (the default)"
        )
    for unsupported in (fmt for fmt in formats if fmt not in FORMATS):
        raise ValueError(f"unknown trace format {unsupported!r}; choose from {FORMATS}")
    session = Session(
        name=name or "proton_ik",
        mode=Mode.parse(mode),
        out_dir=Path(out_dir) if out_dir is not None else Path.cwd(),
        pool_bytes=pool_bytes,
        formats=tuple(formats),
    )
    session.start()
    _session = session
    return session


def _running(action: str) -> Session:
    if _session is None:
        raise RuntimeError(f"proton_ik.{action}() needs a running session: call proton_ik.start() first")
    return _session


def activate(session: object = None) -> None:
    """Resume recording (and instrumented compiles) after ``deactivate``."""
    _running("activate").activate()


def deactivate(session: object = None) -> None:
    """Pause: kernels compile and run plain until ``activate``."""
    _running("deactivate").deactivate()


def finalize(session: object = None, output_format: str = "") -> Result:
    """End the session: drain the device, write the traces, return the decoded result."""
    global _session
    current = _running("finalize")
    _session = None
    return current.finalize()


def profile(func=None, *, name: str | None = None, **options: object):
    """``with proton_ik.profile("name"):``, or ``@proton_ik.profile`` on a function."""
    if callable(func):
        return _ProfileContext(name or func.__name__, options)(func)
    return _ProfileContext(func if isinstance(func, str) else name, options)


class _ProfileContext(contextlib.ContextDecorator):
    def __init__(self, name: str | None, options: dict[str, object]):
        self.name, self.options, self.result = name, options, None

    def __enter__(self) -> _ProfileContext:
        start(self.name, **self.options)  # type: ignore[arg-type]
        return self

    def __exit__(self, *exc: object) -> None:
        self.result = finalize()
