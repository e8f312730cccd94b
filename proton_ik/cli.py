"""``proton-ik``: summarise, convert and demo from the command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from proton_ik import viewer

CONVERSIONS = {"perfetto": ".pftrace", "chrome": ".json"}
OUTPUTS = {"perfetto": "pftrace", "chrome": "json"}  # viewer.render_session's names for them


def _show(args: argparse.Namespace) -> int:
    from proton_ik.viewer import readback

    # By content, not suffix: a session is a zip, a Chrome trace a JSON object, else try Perfetto.
    path = Path(args.file)
    head = b""
    if path.is_file():
        with open(path, "rb") as file:
            head = file.read(64)
    if not path.is_file() or head.startswith(b"PK"):
        trace = viewer.load(path)
    elif head.lstrip().startswith(b"{"):
        trace = readback.read_chrome(path)
    else:
        trace = readback.read_perfetto(path)
    print(trace.summary_text())
    return 0


def _convert(args: argparse.Namespace) -> int:
    output = Path(args.output) if args.output else Path(args.file).with_suffix(CONVERSIONS[args.to])
    # Streamed: the session's tables are never built, so any session converts in bounded memory.
    viewer.render_session(args.file, {OUTPUTS[args.to]: output})
    print(f"wrote {output}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from proton_ik import demo
    from proton_ik.session import gpu_available

    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if gpu_available():
        result = demo.run_on_gpu(out_dir)
        print(result.trace.summary_text())
        paths = result.paths
    else:
        trace = viewer.load(demo.bundled_capture())
        print(
            "No CUDA GPU found, so nothing can be profiled here. Rendering the bundled capture "
            f"instead, a real run of the demo matmul recorded on a {trace.device}:"
        )
        print(trace.summary_text())
        stem = out_dir / "proton_ik_demo"
        paths = {
            "pftrace": str(trace.write_perfetto(stem.with_suffix(".pftrace"))),
            "json": str(trace.write_chrome(stem.with_suffix(".json"))),
        }
    for kind, path in paths.items():
        print(f"{kind:>8}: {path}")
    print("Open the .pftrace in https://ui.perfetto.dev to see each SM, CTA and warp.")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="proton-ik", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    show = commands.add_parser("show", help="print a per-scope summary of a trace or session file")
    show.add_argument("file")
    show.set_defaults(run=_show)

    convert = commands.add_parser("convert", help="convert a session file to a trace")
    convert.add_argument("file")
    convert.add_argument("--to", choices=sorted(CONVERSIONS), required=True)
    convert.add_argument("-o", "--output", help="output path (default: FILE with the format's suffix)")
    convert.set_defaults(run=_convert)

    demo = commands.add_parser("demo", help="profile a bundled kernel (or render a bundled capture)")
    demo.add_argument("--out-dir", default=".", help="where to write the trace (default: here)")
    demo.set_defaults(run=_demo)

    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, OSError) as error:
        print(f"proton-ik {args.command}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
