"""Errors that name the kernel, the scope and the source line, and say how to fix it."""

from __future__ import annotations


class ScopeError(ValueError):
    """A kernel's scope annotations are provably wrong."""

    def __init__(self, kernel: str, scope: str, where: str, problem: str, fix: str):
        self.kernel, self.scope, self.where = kernel, scope, where
        super().__init__(f"proton_ik: kernel '{kernel}', scope '{scope}' at {where}: {problem}. Fix: {fix}")
