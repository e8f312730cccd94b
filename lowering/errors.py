"""Errors that name the kernel, the scope and the source line, and say how to fix it."""

from __future__ import annotations


class ScopeError(ValueError):
    """A kernel's scope, event or mark annotations are provably wrong; ``what`` says which."""

    def __init__(self, kernel: str, scope: str, where: str, problem: str, fix: str, what: str = "scope"):
        self.kernel, self.scope, self.where = kernel, scope, where
        super().__init__(f"proton_ik: kernel '{kernel}', {what} '{scope}' at {where}: {problem}. Fix: {fix}")


class ProtonOverrideError(ValueError):
    """An IR override written for triton.profiler whose ``proton.record`` ops proton_ik cannot
    translate (``lowering.proton_records``)."""

    def __init__(self, path: object, problem: str):
        self.path = path
        super().__init__(
            f"proton_ik: the IR override {path}: {problem}. Fix: write each record as "
            '`proton.record start "name"` or `proton.record end "name"` (what insert_proton_records '
            "writes), with a name of printable ASCII, or put pl.enter_scope / pl.exit_scope "
            "(import proton_ik.language as pl) in the kernel's source instead"
        )
