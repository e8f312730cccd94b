import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

from benchmarks.buffers.end_to_end import end_to_end
from benchmarks.buffers.settings import Settings

a = np.random.randint(0, 255, 16 << 20, dtype=np.uint8)
t = time.perf_counter()
for _ in range(10):
    zlib.crc32(a)
print("crc32 GB/s", 10 * a.size / 1e9 / (time.perf_counter() - t))
s = Settings(False, 132, Path(tempfile.mkdtemp()), 3)
r = end_to_end(s)
for k in ("plain_ms", "loop_ms", "flushed_ms", "copy_ms", "write_ms"):
    print(k, round(r[k]["median"], 3))
print(
    "x_bound",
    r["x_bound"],
    "drain GB/s",
    r["drain_gb_per_s"],
    "write GB/s",
    r["write_gb_per_s"],
    "exact",
    r["launches_exact"],
)
