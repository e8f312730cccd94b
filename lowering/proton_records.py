"""Triton Proton's IR override workflow under proton_ik: ``proton.record`` ops become our markers.

Proton's tutorial (``example_override.py``) dumps a kernel's TTGIR, inserts lines such as

    proton.record start "load_x" loc(#loc1)
    proton.record end "load_x" loc(#loc1)

(``insert_proton_records``) and runs again with ``TRITON_KERNEL_OVERRIDE=1``. Triton's parser
here has no ``proton`` dialect, so each such line is translated, in a copy of the file, into the
op a ``pl.enter_scope`` / ``pl.exit_scope`` call leaves in the IR: a non-pure scalar inline asm
whose text carries the ``pik.record`` (``dialect.markers``). The lowering then treats it as any
scope of the source. The user's file is never changed: Triton is handed the copy
(``triton_hook`` points its override manager, and an autotune config's ``ir_override``, there).
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from proton_ik.contract.names import scope_name_problem
from proton_ik.dialect.markers import marker_text
from proton_ik.dialect.pik import RecordOp
from proton_ik.lowering.errors import ProtonOverrideError

PROTON_RECORD_OP = "proton.record"
_RECORD = re.compile(r'^(?P<indent>\s*)proton\.record\s+(?P<kind>start|end)\s+"(?P<name>[^"]*)"(?P<rest>.*)$')
_KINDS = {"start": "begin", "end": "end"}


def translate(text: str, where: str) -> str:
    """``text`` with each ``proton.record start|end "name"`` line replaced by our marker op; a
    ``proton.record`` in any other form, or a name the scope rule refuses, is an error naming
    ``where`` and the line."""
    out = []
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        ending = line[len(line.rstrip("\r\n")) :]
        match = _RECORD.match(line.rstrip("\r\n"))
        if match is None:
            if PROTON_RECORD_OP in line.split("//")[0]:
                raise ProtonOverrideError(
                    where, f"line {number} is not a form proton_ik reads: {line.strip()[:120]!r}"
                )
            out.append(line)
            continue
        name = match["name"]
        problem = scope_name_problem(name)
        if problem is not None:
            raise ProtonOverrideError(where, f"line {number}: {problem}")
        marker = marker_text(RecordOp(_KINDS[match["kind"]], name))
        asm = marker.replace("\\", "\\5C").replace('"', "\\22")  # an MLIR string literal
        out.append(
            f'{match["indent"]}%pik_proton_record_{number} = tt.elementwise_inline_asm "{asm}" '
            f'{{constraints = "=r", packed_element = 1 : i32, pure = false}} -> i32{match["rest"]}{ending}'
        )
    return "".join(out)


class TranslatedCopies:
    """Translated copies of override files, in a folder of this process, made once per file
    and content."""

    def __init__(self) -> None:
        self._folder: Path | None = None
        self._made: dict[tuple[str, str], Path] = {}

    def of(self, path: str | Path) -> Path:
        """``path`` itself where it holds no ``proton.record``, else its translated copy (with
        the same file name: Triton picks the parser by its suffix)."""
        source = Path(path)
        try:
            text = source.read_text()
        except (OSError, UnicodeDecodeError):
            return source  # Triton's parser says what is wrong with it
        if PROTON_RECORD_OP not in text:
            return source
        key = (str(source.resolve()), text)
        if key not in self._made:
            if self._folder is None:
                self._folder = Path(tempfile.mkdtemp(prefix="proton_ik-overrides-"))
            folder = self._folder / str(len(self._made))
            folder.mkdir()
            copy = folder / source.name
            copy.write_text(translate(text, str(source)))
            self._made[key] = copy
        return self._made[key]
