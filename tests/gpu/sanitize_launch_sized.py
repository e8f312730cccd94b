"""Run under compute-sanitizer memcheck: a persistent kernel sized at launch, given a buffer of
exactly the bytes a session gives that launch (``runtime.launch_sizing``), with its capacity in
the address's low bits, and no caching allocator: a store past the launch's segments is an
error, and the CTA header holds the launch's capacity: the kernel's arithmetic agrees with the
host's."""

from __future__ import annotations

import kernels
import numpy as np
import torch
from triton.runtime._allocation import set_profile_allocator

import proton_ik
from proton_ik.contract.layout import CTA_HEADER_DTYPE
from proton_ik.contract.metadata import KernelMetadata
from proton_ik.runtime import launch_sizing
from proton_ik.runtime.loaded import KernelInfo

PROGRAMS, BLOCK = 8, 128
buffers = []

for n_tiles, k in ((100, 64 * BLOCK), (13, 5 * BLOCK + 1)):
    x = torch.randn(k, device="cuda")
    out = torch.zeros(n_tiles * BLOCK, device="cuda")
    args = (x, out, n_tiles, k, PROGRAMS, BLOCK)
    with proton_ik.instrumented("instrumentation"):
        compiled = kernels.persistent_kernel.warmup(
            *args[:4], NUM_PROGRAMS=PROGRAMS, BLOCK=BLOCK, grid=(PROGRAMS,)
        )
    metadata = KernelMetadata.from_dict(compiled.metadata.proton_ik, "persistent_kernel")
    loaded = KernelInfo(compiled.name, 4, metadata.layout.cta_bytes, metadata, metadata.to_dict())
    launch = launch_sizing.launch_kernel(loaded, compiled, (PROGRAMS, 1, 1), args, PROGRAMS, 1 << 30)
    size, tag = PROGRAMS * launch.cta_bytes, launch_sizing.pointer_tag(launch)

    def exact(requested: int, alignment: int, stream: int, size=size, tag=tag) -> int:
        buffer = torch.zeros(size, dtype=torch.uint8, device="cuda")
        buffers.append(buffer)
        return buffer.data_ptr() + tag

    set_profile_allocator(exact)
    with proton_ik.instrumented("instrumentation"):
        kernels.persistent_kernel[(PROGRAMS,)](*args[:4], NUM_PROGRAMS=PROGRAMS, BLOCK=BLOCK)
    torch.cuda.synchronize()
    set_profile_allocator(None)
    header = np.frombuffer(buffers[-1].cpu().numpy().tobytes(), dtype=CTA_HEADER_DTYPE, count=1)
    assert int(header["capacity"][0]) == launch.layout.capacity, (header, launch.layout.capacity)
print("launch-sized records ok", len(buffers))
