"""``proton-ik``: summarise, convert, compare, report and demo from the command line.

Exit codes: 0 success, 1 a file it cannot read (the message says why), 2 bad usage (argparse's
code, and an output that would replace the input or an existing file without ``--force``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proton_ik import viewer
from proton_ik.viewer import ranks
from proton_ik.viewer.diff import DiffOptions, diff_sessions, format_diff
from proton_ik.viewer.tracks import TIMELINES

if TYPE_CHECKING:
    from proton_ik.viewer.readback import TraceFile

CONVERSIONS = {"perfetto": ".pftrace", "chrome": ".json"}
OUTPUTS = {"perfetto": "pftrace", "chrome": "json"}  # viewer.render_session's names for them
BAD_INPUT, BAD_USAGE = 1, 2


class UsageError(Exception):
    """A command line that would do harm or cannot be carried out as typed."""


def terminal_safe(text: str) -> str:
    """``text`` with every character a terminal would act on (escapes, controls, bidirectional
    overrides) written as its Python escape; names in files are data, not terminal commands."""
    return "".join(c if c.isprintable() or c == "\n" else repr(c)[1:-1] for c in text)


def _kind(path: Path) -> str:
    from proton_ik.viewer import readback

    return readback.file_kind(path)


def _not_ours(path: Path, kind: str) -> viewer.SessionFileError | None:
    from proton_ik.viewer import readback

    return readback.not_ours(path, kind)


def _read_trace(path: Path, kind: str, for_writing: bool = False) -> TraceFile:
    from proton_ik.viewer import readback

    return readback.read_trace(path, kind, for_writing)


@contextlib.contextmanager
def _written_aside(output: Path) -> Iterator[Path]:
    """A path beside ``output`` to write instead, moved onto it once whole: a command that fails
    halfway leaves no output (nor a file that the next try would refuse without --force)."""
    aside = output.with_name(f".{output.stem}.{os.getpid()}.partial{output.suffix}")
    try:
        yield aside
        os.replace(aside, output)
    finally:
        aside.unlink(missing_ok=True)


def _show(args: argparse.Namespace) -> int:
    paths = _files_of(args.files)
    csv = Path(args.csv) if args.csv else None
    if csv:
        _check_output(csv, paths, args.force, "--csv")
    summaries = {}
    shown: list[tuple[Path, Any]] = []  # each file and its summary, in the order given
    for path in paths:
        kind = _kind(path)
        if (refused := _not_ours(path, kind)) is not None:
            raise refused
        if kind == "session":  # gathered chunk by chunk, without the events table
            summarized = viewer.summarize_session(path)
            summary, info = summarized.summary, summarized.info
        else:
            trace = _read_trace(path, kind)
            summary, info = trace.summary(), getattr(trace, "info", {}) or {}
        if len(paths) > 1:
            print(terminal_safe(f"== {path}"))
        print(terminal_safe(str(summary)))
        label = ranks.label_of(info, path.name)
        summaries[label if label not in summaries else f"{label} ({path.name})"] = summary
        shown.append((path, summary))
    if len(paths) > 1:
        print("== side by side: mean per scope, and the slowest session")
        print(terminal_safe(ranks.side_by_side_text(summaries)))
    if csv:
        with _written_aside(csv) as aside:
            _scopes_csv(shown, aside)
        print(terminal_safe(f"wrote {csv}"))
    return 0


def _files_of(named: list[str]) -> list[Path]:
    """The files named, a folder standing for the session files (.pik) in it (a job's ranks)."""
    found = ranks.files_named(named)
    if not found:
        raise UsageError(f"{', '.join(named)}: a folder with no session file (.pik) in it")
    return found


def _scopes_csv(shown: list[tuple[Path, Any]], csv: Path) -> None:
    """Every file's per-scope table (``Summary.scopes``), one row per scope of each, the file's
    path as given first (a job's ranks may share a name in folders of their own): the numbers
    ``show`` prints, for a program to read."""
    import pandas as pd

    frames = [
        summary.scopes.assign(path=str(path))[["path", *summary.scopes.columns]] for path, summary in shown
    ]
    pd.concat(frames, ignore_index=True).to_csv(csv, index=False)


def _merge(args: argparse.Namespace) -> int:
    from proton_ik.viewer.ranks import merge_sessions, sessions_of

    output = Path(args.output)
    try:
        sessions = sessions_of(args.files)
    except ValueError as error:
        raise UsageError(str(error)) from None
    _sessions_only(sessions, "merge reads session files (.pik), or folders of them")
    _check_output(output, sessions, args.force, "-o")
    if args.torch_trace is None:
        with _written_aside(output) as aside:
            merge_sessions(sessions, aside, timeline=args.timeline)
        print(terminal_safe(f"{output}: {len(sessions)} sessions, a root track each"))
        return 0
    from proton_ik.viewer.torch_profiler import TorchTraceError, merge_torch_trace, read_kineto

    try:
        torch_trace = read_kineto(args.torch_trace)
    except TorchTraceError as error:
        raise UsageError(str(error)) from None
    with _written_aside(output) as aside:
        _, alignments = merge_torch_trace(sessions, torch_trace, aside, timeline=args.timeline)
    said = f"{len(sessions)} session{'s' if len(sessions) > 1 else ''}"
    print(terminal_safe(f"{output}: {said} and {torch_trace.path.name} on one time axis"))
    for path, alignment in zip(sessions, alignments, strict=True):
        print(terminal_safe(f"  {path.name}: {alignment.describe()}"))
    return 0


def _convert(args: argparse.Namespace) -> int:
    source = Path(args.file)
    output = Path(args.output) if args.output else source.with_suffix(CONVERSIONS[args.to])
    if output.exists() and source.exists() and output.resolve() == source.resolve():
        raise UsageError(f"{output} is the input file; writing there would destroy it. Pass another -o")
    if output.exists() and not args.force:
        raise UsageError(f"{output} exists; pass --force to replace it, or another -o")
    kind = _kind(source)
    if (refused := _not_ours(source, kind)) is not None:
        raise refused
    with _written_aside(output) as aside:
        if kind == "session":
            # Streamed: the session's tables are never built, so any session converts in bounded memory.
            viewer.render_session(source, {OUTPUTS[args.to]: aside}, timeline=args.timeline)
        else:
            trace = _read_trace(source, kind, for_writing=True)
            if args.to == "perfetto":
                trace.write_perfetto(aside, timeline=args.timeline)
            else:
                trace.write_chrome(aside, timeline=args.timeline)
    print(terminal_safe(f"wrote {output}"))
    return 0


def _diff(args: argparse.Namespace) -> int:
    try:
        options = DiffOptions(
            args.confidence, args.resamples, args.seed, args.min_change, args.kernel, args.ignore_lines
        )
    except ValueError as error:
        raise UsageError(str(error)) from None
    sessions = [Path(args.a), Path(args.b)]
    csv = Path(args.csv) if args.csv else None
    if csv:
        _check_output(csv, sessions, args.force, "--csv")
    _sessions_only(
        sessions,
        "diff compares session files (.pik), whose CTAs it resamples: pass the .pik files the traces "
        "were rendered from",
    )
    frame = diff_sessions(sessions[0], sessions[1], options)
    print(terminal_safe(format_diff(frame)))
    if csv:
        with _written_aside(csv) as aside:
            frame.to_csv(aside, index=False)
        print(terminal_safe(f"wrote {csv}"))
    return 0


def _check_output(output: Path, inputs: list[Path], force: bool, option: str) -> None:
    """Refuse an output that is one of the inputs, or that exists without --force."""
    if any(output.exists() and path.exists() and output.resolve() == path.resolve() for path in inputs):
        raise UsageError(f"{output} is an input file; writing there would destroy it. Pass another {option}")
    if output.exists() and not force:
        raise UsageError(f"{output} exists; pass --force to replace it, or another {option}")


def _sessions_only(paths: list[Path], why: str) -> None:
    """Refuse any of ``paths`` that is not a session file, saying what it is and ``why``."""
    for path in paths:
        kind = _kind(path)
        if (refused := _not_ours(path, kind)) is not None:
            raise refused
        if kind != "session":
            raise viewer.SessionFileError(f"{path} is a {kind} trace; {why}")


def _report(args: argparse.Namespace) -> int:
    from proton_ik.viewer.report import write_report

    source = Path(args.file)
    output = Path(args.output) if args.output else source.with_suffix(".html")
    inputs = [source, *([Path(args.diff)] if args.diff else [])]
    _sessions_only(
        inputs, "report reads session files (.pik): pass the .pik file the trace was rendered from"
    )
    _check_output(output, inputs, args.force, "-o")
    with _written_aside(output) as aside:
        write_report(source, aside, diff_with=inputs[1] if args.diff else None)
    print(terminal_safe(f"wrote {output}"))
    return 0


# What each of the demo's files is, and how to open it.
_DEMO_FILES = {
    "session": "the session: proton-ik show / convert / diff it, or proton_ik.viewer.load() it in Python",
    "pftrace": "open it in https://ui.perfetto.dev: each SM, CTA slot and warp, with its scopes",
    "json": "Chrome JSON: open it in https://ui.perfetto.dev or chrome://tracing",
}


def _demo(args: argparse.Namespace) -> int:
    from proton_ik import demo
    from proton_ik.session import gpu_available

    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    earlier = sorted(path.name for path in out_dir.glob(f"{demo.DEMO_STEM}.*") if path.is_file())
    if gpu_available():
        result = demo.run_on_gpu(out_dir)
        print(terminal_safe(result.trace.summary_text()))
        paths = result.paths
    else:
        trace = viewer.load(demo.bundled_capture())
        print(
            "No CUDA GPU found, so nothing can be profiled here. Rendering the bundled capture "
            f"instead, a real run of the demo matmul recorded on a {trace.device}:"
        )
        print(terminal_safe(trace.summary_text()))
        stem = out_dir / demo.DEMO_STEM
        session = stem.with_suffix(".pik")
        shutil.copyfile(demo.bundled_capture(), session)
        paths = {
            "session": str(session),
            "pftrace": str(trace.write_perfetto(stem.with_suffix(".pftrace"))),
            "json": str(trace.write_chrome(stem.with_suffix(".json"))),
        }
    if earlier:
        print(terminal_safe(f"(replaced the demo's files of an earlier run: {', '.join(earlier)})"))
    for kind, path in paths.items():
        print(terminal_safe(f"{kind:>8}: {path}"))
        if kind in _DEMO_FILES:
            print(f"          {_DEMO_FILES[kind]}")
    print("Open the .pftrace in https://ui.perfetto.dev to see each SM, CTA and warp.")
    return 0


def _add_show(commands: Any) -> None:
    show = commands.add_parser(
        "show", help="print a per-scope summary of session or trace files; several side by side"
    )
    show.add_argument(
        "files",
        nargs="+",
        metavar="file",
        help="session (.pik), Perfetto (.pftrace) or Chrome (.json) files: the ranks of a job, say "
        "(a folder stands for the .pik files in it)",
    )
    show.add_argument(
        "--csv", help="also write every file's per-scope table to this CSV file (a column path first)"
    )
    show.add_argument("--force", action="store_true", help="replace the --csv file if it exists")
    show.set_defaults(run=_show)


def _add_merge(commands: Any) -> None:
    merge = commands.add_parser(
        "merge", help="one Perfetto trace of several sessions (a job's ranks): a root track each"
    )
    merge.add_argument("files", nargs="+", metavar="file", help="session files, or folders of .pik files")
    merge.add_argument("-o", "--output", required=True, help="the .pftrace to write")
    merge.add_argument("-f", "--force", action="store_true", help="replace an existing output file")
    merge.add_argument("--timeline", choices=TIMELINES, help="tracks: SM slots (default) or a track per CTA")
    merge.add_argument(
        "--torch-trace",
        metavar="TRACE",
        help="a torch.profiler trace of the same steps (prof.export_chrome_trace): its CPU threads, "
        "streams and kernels drawn beside the sessions, each launch aligned to the kernel CUPTI saw",
    )
    merge.set_defaults(run=_merge)


def _add_convert(commands: Any) -> None:
    convert = commands.add_parser(
        "convert", help="convert a session or trace file (.pik, .pftrace, .json) to a trace"
    )
    convert.add_argument("file")
    convert.add_argument("--to", choices=sorted(CONVERSIONS), required=True)
    convert.add_argument("-o", "--output", help="output path (default: FILE with the format's suffix)")
    convert.add_argument("-f", "--force", action="store_true", help="replace an existing output file")
    convert.add_argument(
        "--timeline",
        choices=TIMELINES,
        help="a track per CTA slot of each SM (slots, the default: bounded by SMs x resident CTAs, "
        "whatever the grid) or per CTA (ctas, for small grids)",
    )
    convert.set_defaults(run=_convert)


def _add_diff(commands: Any) -> None:
    diff = commands.add_parser(
        "diff", help="compare two sessions scope by scope, with bootstrap confidence intervals"
    )
    diff.add_argument("a", help="the session to compare against (.pik)")
    diff.add_argument("b", help="the session compared with it (.pik)")
    diff.add_argument("--confidence", type=float, default=DiffOptions.confidence, help="default: %(default)s")
    diff.add_argument("--resamples", type=int, default=DiffOptions.resamples, help="default: %(default)s")
    diff.add_argument("--seed", type=int, default=DiffOptions.seed, help="default: %(default)s")
    diff.add_argument(
        "--min-change",
        type=float,
        default=DiffOptions.min_change,
        help="a significant change smaller than this fraction of A's median is negligible (e.g. 0.01; "
        "default: %(default)s, none)",
    )
    diff.add_argument("--kernel", help="compare this kernel only")
    diff.add_argument("--ignore-lines", action="store_true", help="pair scopes by kernel and name alone")
    diff.add_argument("--csv", help="also write the per-scope table to this CSV file")
    diff.add_argument("-f", "--force", action="store_true", help="replace an existing CSV file")
    diff.set_defaults(run=_diff)


def _add_report(commands: Any) -> None:
    report = commands.add_parser(
        "report", help="one self-contained HTML page of a session: tables, histograms, heatmaps"
    )
    report.add_argument("file", help="the session (.pik)")
    report.add_argument("-o", "--output", help="the .html to write (default: FILE with .html)")
    report.add_argument(
        "--diff", metavar="BASE", help="compare with this session (.pik): BASE is A, FILE is B"
    )
    report.add_argument("-f", "--force", action="store_true", help="replace an existing output file")
    report.set_defaults(run=_report)


def _add_demo(commands: Any) -> None:
    demo = commands.add_parser("demo", help="profile a bundled kernel (or render a bundled capture)")
    demo.add_argument(
        "--out-dir",
        default=".",
        help="where to write the session, its trace and its Chrome JSON (default: here)",
    )
    demo.set_defaults(run=_demo)


def _warning_for(command: str):
    """Warnings as the command's own lines on stderr, not Python's (a source file and line of
    proton_ik's, and the line of code that warned)."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        text = str(message).removeprefix("proton_ik: ")
        print(terminal_safe(f"proton-ik {command}: warning: {text}"), file=file or sys.stderr)

    return show


def main(argv: list[str] | None = None) -> int:
    # The module's docstring, without its reStructuredText literals' backticks.
    parser = argparse.ArgumentParser(prog="proton-ik", description=(__doc__ or "").replace("``", ""))
    commands = parser.add_subparsers(dest="command", required=True)
    for add in (_add_show, _add_merge, _add_convert, _add_diff, _add_report, _add_demo):
        add(commands)
    args = parser.parse_args(argv)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _warning_for(args.command)
            return args.run(args)
    except UsageError as error:
        print(terminal_safe(f"proton-ik {args.command}: {error}"), file=sys.stderr)
        return BAD_USAGE
    except (ValueError, OSError) as error:
        print(terminal_safe(f"proton-ik {args.command}: {error}"), file=sys.stderr)
        return BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
