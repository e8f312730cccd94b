"""A session beside a ``torch.profiler`` trace of the same steps, on one time axis: ``kineto``
reads PyTorch's trace (CUPTI's kernels, the host's events) and turns its events into Perfetto
packets; ``timeline`` matches each launch to its CUPTI kernel and draws both in one trace."""

from proton_ik.viewer.torch_profiler.kineto import KinetoTrace, TorchTraceError, read_kineto
from proton_ik.viewer.torch_profiler.timeline import Alignment, merge_torch_trace

__all__ = ["Alignment", "KinetoTrace", "TorchTraceError", "merge_torch_trace", "read_kineto"]
