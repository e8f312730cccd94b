"""Shared test setup: GPU tests skip cleanly without CUDA; each session compiles into its own
Triton cache so plain and instrumented binaries from earlier runs never leak in."""

from __future__ import annotations

import pytest


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _private_triton_cache(tmp_path_factory):
    from triton import knobs

    previous = knobs.cache.dir
    knobs.cache.dir = str(tmp_path_factory.mktemp("triton_cache"))
    yield
    knobs.cache.dir = previous
