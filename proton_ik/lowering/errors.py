"""Errors that name the kernel, the scope and the source line, and say how to fix it."""

from __future__ import annotations


class ScopeError(ValueError):
    """A kernel's scope, event or mark annotations are provably wrong; ``what`` says which."""

    def __init__(self, kernel: str, scope: str, where: str, problem: str, fix: str, what: str = "scope"):
        self.kernel, self.scope, self.where = kernel, scope, where
        super().__init__(f"proton_ik: kernel '{kernel}', {what} '{scope}' at {where}: {problem}. Fix: {fix}")


class ProtonOverrideError(ValueError):
    """An IR override written for triton.profiler (with ``proton.record`` ops) under proton_ik."""

    def __init__(self, path: object):
        self.path = path
        super().__init__(
            f"proton_ik: the IR override {path} records with proton.record ops, which belong to "
            "triton.profiler's dialect and which proton_ik does not read. Fix: put "
            "pl.enter_scope / pl.exit_scope (import proton_ik.language as pl) in the kernel's "
            "source instead of overriding its IR, or profile this override with triton.profiler"
        )
