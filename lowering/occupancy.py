"""``occupancy=keep``: the instrumented kernel never has fewer resident CTAs per SM than the plain
kernel for want of registers.

At compile time the plain kernel's PTX (the markers are comments in it) goes through ``ptxas``
once more, with the flags Triton's own run uses, for its register count. From that count, the
kernel's warps and its shared memory, the SM's limits give the resident CTAs per SM; the
instrumented PTX gets ``.maxnreg`` = the most registers that keep them. ptxas spills what does
not fit under the cap: spills against a lost CTA is the trade it makes, the default since it
won the suite (docs/PERFORMANCE.md). The plain PTX's ``ptxas`` runs beside the instrumentation
(``Ptxas.start``). A kernel whose PTX already has a ``.maxnreg`` (Triton's ``maxnreg`` option)
keeps the lower of the two; one that moves registers between its warp groups (``setmaxnreg``)
gets no cap.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from proton_ik.contract.metadata import Occupancy
from proton_ik.lowering import ptx_text

MAX_REGISTERS = 255  # per thread
_USED = re.compile(r"Used (?P<registers>\d+) registers")
_SPILLS = re.compile(r"(?P<bytes>\d+) bytes spill stores")
_MAXNREG = re.compile(r"^\s*\.maxnreg\s+(?P<count>\d+)\s*$", re.MULTILINE)
_SETMAXNREG = re.compile(r"^\s*(@\S+\s+)?setmaxnreg\.", re.MULTILINE)


@dataclass(frozen=True)
class SmLimits:
    """What bounds resident CTAs on one SM of a compute capability."""

    name: str
    max_warps: int
    max_ctas: int
    shared_bytes: int  # the largest shared-memory carveout
    max_shared_per_cta: int
    registers: int = 65536
    sub_partitions: int = 4  # each holds a quarter of the registers and whole warps
    register_unit: int = 256  # registers are allocated per warp, in units of this many
    max_registers_per_thread: int = MAX_REGISTERS
    warp_size: int = 32
    reserved_shared_per_cta: int = 1024  # the driver's shared memory per CTA
    shared_unit: int = 128  # shared memory is allocated per CTA in units of this many bytes


SM_LIMITS = {
    80: SmLimits("sm_80", max_warps=64, max_ctas=32, shared_bytes=167936, max_shared_per_cta=166912),
    86: SmLimits("sm_86", max_warps=48, max_ctas=16, shared_bytes=102400, max_shared_per_cta=101376),
    89: SmLimits("sm_89", max_warps=48, max_ctas=24, shared_bytes=102400, max_shared_per_cta=101376),
    90: SmLimits("sm_90", max_warps=64, max_ctas=32, shared_bytes=233472, max_shared_per_cta=232448),
}


@dataclass(frozen=True)
class Residency:
    """The CTAs one SM holds, and what each resource alone would allow."""

    ctas: int
    by_registers: int
    by_warps: int
    by_ctas: int
    by_shared: int

    @property
    def limited_by(self) -> str:
        """The resources that set ``ctas``, as the report names them: 'registers', 'warps'..."""
        limits = {
            "registers": self.by_registers,
            "warps": self.by_warps,
            "CTA slots": self.by_ctas,
            "shared memory": self.by_shared,
        }
        return ", ".join(name for name, allowed in limits.items() if allowed == self.ctas)


def residency(registers: int, num_warps: int, shared: int, limits: SmLimits) -> Residency:
    """CTAs of ``num_warps`` warps, ``registers`` per thread and ``shared`` bytes that fit one SM,
    by CUDA's occupancy rule (``cuda_occupancy.h``): each sub-partition holds whole warps; the
    CTA's shared memory plus the driver's reserve, rounded up, out of the SM's carveout. 0 CTAs:
    the kernel cannot launch."""
    if registers < 0 or num_warps < 1 or shared < 0:
        raise ValueError(f"registers={registers}, warps={num_warps}, shared={shared}: need >= 0, >= 1, >= 0")
    per_warp = _round_up(registers * limits.warp_size, limits.register_unit)
    # The hardware checks a CTA's registers as if its warps were spread over all sub-partitions.
    fits = per_warp * _round_up(num_warps, limits.sub_partitions) <= limits.registers
    if registers > limits.max_registers_per_thread or not fits:
        by_registers = 0
    elif per_warp == 0:
        by_registers = limits.max_ctas
    else:
        per_sub_partition = limits.registers // limits.sub_partitions
        by_registers = per_sub_partition // per_warp * limits.sub_partitions // num_warps
    allocated = _round_up(shared + limits.reserved_shared_per_cta, limits.shared_unit)
    by_shared = 0 if shared > limits.max_shared_per_cta else limits.shared_bytes // allocated
    by_warps = limits.max_warps // num_warps
    ctas = min(by_registers, by_warps, limits.max_ctas, by_shared)
    return Residency(ctas, by_registers, by_warps, limits.max_ctas, by_shared)


def resident_ctas(registers: int, num_warps: int, shared: int, limits: SmLimits) -> int:
    """The CTAs that ``residency`` finds."""
    return residency(registers, num_warps, shared, limits).ctas


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def register_cap(registers: int, num_warps: int, shared: int, limits: SmLimits) -> int:
    """The most registers per thread that give as many resident CTAs as ``registers`` does."""
    keep = resident_ctas(registers, num_warps, shared, limits)
    return max(
        r for r in range(registers, MAX_REGISTERS + 1) if resident_ctas(r, num_warps, shared, limits) >= keep
    )


@dataclass(frozen=True)
class Ptxas:
    """How Triton runs ptxas for this compile: the binary, ``--gpu-name`` and the other flags."""

    path: str
    arch: str  # sm_90a
    flags: Sequence[str] = ("-lineinfo",)

    def registers(self, ptx: str) -> tuple[int, int]:
        """Registers per thread and bytes of spill stores of ``ptx``'s kernel."""
        return self.start(ptx).result()

    def start(self, ptx: str) -> PtxasRun:
        """``registers`` of ``ptx``, begun in a process of its own: ``result`` waits for it."""
        return PtxasRun(self, ptx)


class PtxasRun:
    """One ``ptxas -v`` of a kernel's PTX, running while the caller does other work."""

    def __init__(self, ptxas: Ptxas | None, ptx: str, error: OSError | None = None):
        """``ptxas`` run on ``ptx``; with no ``ptxas``, a run that could not begin, whose
        ``result`` raises ``error``."""
        self._process: subprocess.Popen[str] | None = None
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._error = error
        if ptxas is None:
            return
        self._folder = tempfile.TemporaryDirectory(prefix="proton_ik_ptxas_")
        source = Path(self._folder.name) / "plain.ptx"
        source.write_text(ptx)
        command = [
            ptxas.path,
            *ptxas.flags,
            "-v",
            f"--gpu-name={ptxas.arch}",
            str(source),
            "-o",
            f"{source}.o",
        ]
        try:
            self._process = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            )
        except OSError as error:  # no ptxas there: ``result`` says so
            self._error = error
            self._clean()

    def result(self) -> tuple[int, int]:
        """Registers per thread and bytes of spill stores; OSError or RuntimeError where ptxas
        could not run or failed."""
        if self._process is None:
            raise self._error or OSError("ptxas did not run")
        try:
            _, stderr = self._process.communicate()
        finally:
            self._clean()
        used, spills = _USED.search(stderr), _SPILLS.search(stderr)
        if self._process.returncode or used is None:
            raise RuntimeError(f"ptxas on the plain PTX failed ({self._process.returncode}): {stderr[-500:]}")
        return int(used.group("registers")), int(spills.group("bytes")) if spills else 0

    def cancel(self) -> None:
        """Stop it where it still runs, and remove its files: its count is not wanted (the
        kernel compiles plain, or gets no cap). Nothing to do once ``result`` has returned."""
        if self._process is not None and self._process.returncode is None:
            self._process.kill()
            self._process.communicate()
        self._clean()

    def _clean(self) -> None:
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None


def keep(
    plain_ptx: str, ptx: str, ptxas: Ptxas, capability: int, num_warps: int, shared: int
) -> tuple[str, Occupancy]:
    """``ptx`` with the register cap that keeps the plain kernel's resident CTAs, and what was
    found; ``ptx`` unchanged where no cap can be computed (the reason says why)."""
    return keep_measured(lambda: ptxas.registers(plain_ptx), ptx, capability, num_warps, shared)


def keep_measured(
    plain_registers: Callable[[], tuple[int, int]], ptx: str, capability: int, num_warps: int, shared: int
) -> tuple[str, Occupancy]:
    """``keep``, with the plain kernel's registers and spills from ``plain_registers`` (a
    ``PtxasRun``'s ``result``, begun before the instrumentation)."""
    limits = SM_LIMITS.get(capability)
    if limits is None:
        reason = f"no table of SM limits for sm_{capability} (known: {sorted(SM_LIMITS)}): no cap"
        return ptx, Occupancy(None, None, None, reason)
    if _SETMAXNREG.search(ptx):
        reason = "the kernel sets its warp groups' registers itself (setmaxnreg): no cap"
        return ptx, Occupancy(None, None, None, reason)
    try:
        registers, spills = plain_registers()
    except (OSError, RuntimeError) as error:
        return ptx, Occupancy(None, None, None, f"{error}; no cap")
    ctas = resident_ctas(registers, num_warps, shared, limits)
    cap = register_cap(registers, num_warps, shared, limits)
    existing = _MAXNREG.search(ptx)
    if existing is not None and int(existing.group("count")) <= cap:
        reason = f"the kernel's own .maxnreg {existing.group('count')} is at or below the cap"
        return ptx, Occupancy(registers, ctas, int(existing.group("count")), reason)
    reason = (
        f"plain: {registers} registers, {spills} bytes of spills, {ctas} CTAs of {num_warps} warps "
        f"and {shared} bytes of shared memory per SM; at most {cap} registers keep them"
    )
    return with_maxnreg(ptx, cap), Occupancy(registers, ctas, cap, reason)


def with_maxnreg(ptx: str, cap: int) -> str:
    """``ptx`` whose entry has ``.maxnreg cap`` (in place of a higher one it had)."""
    if _MAXNREG.search(ptx):
        return _MAXNREG.sub(f".maxnreg {cap}", ptx, count=1)
    lines = ptx.splitlines(keepends=True)
    entry, _ = ptx_text.entry_params([line.rstrip("\n") for line in lines])
    end = next(i for i in range(entry, len(lines)) if lines[i].strip().startswith(")"))
    return "".join([*lines[: end + 1], f".maxnreg {cap}\n", *lines[end + 1 :]])


def start_plain(ptx: str, options: object, capability: int) -> PtxasRun:
    """``ptxas`` of the plain PTX, begun with Triton's flags; a run whose ``result`` says why
    where Triton's ptxas cannot be found (its internals moved: the kernel then gets no cap)."""
    try:
        ptxas = triton_ptxas(options, capability)
    except (ImportError, AttributeError, TypeError, ValueError, RuntimeError) as error:
        return PtxasRun(None, ptx, OSError(f"Triton's ptxas for sm_{capability} was not found ({error})"))
    return ptxas.start(ptx)


def triton_ptxas(options: object, capability: int) -> Ptxas:
    """The ptxas that Triton's compile of ``options`` for ``capability`` runs, with its flags."""
    from triton import knobs
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    flags = ["-lineinfo", *(["-suppress-debug-info"] if knobs.compilation.disable_line_info else [])]
    if not getattr(options, "enable_fp_fusion", True):
        flags.append("--fmad=false")
    extra = getattr(options, "ptx_options", None)
    flags += extra.split(" ") if extra else []
    return Ptxas(get_ptxas(capability).path, sm_arch_from_capability(capability), tuple(flags))
