"""The IR of proton_ik: ``pik`` (what to record) and ``pikgpu`` (how to record it)."""

from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.parser import Parser

from proton_ik.dialect.pik import Pik
from proton_ik.dialect.pikgpu import PikGPU


def make_context() -> Context:
    """A context that knows builtin, pik and pikgpu."""
    context = Context()
    for dialect in (Builtin, Pik, PikGPU):
        context.load_dialect(dialect)
    return context


def parse_module(text: str) -> ModuleOp:
    module = Parser(make_context(), text).parse_module()
    module.verify()
    return module


__all__ = ["Pik", "PikGPU", "make_context", "parse_module"]
