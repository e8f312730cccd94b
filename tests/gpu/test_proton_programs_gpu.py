"""Programs written for triton.profiler's instrumentation mode, with only the imports changed,
and the files they open read as Proton's own tests read them: ``NAME.chrome_trace`` (event
order, ``cat``, ``tid``, Proton's ``args``), ``NAME.hatchet`` (the frame tree under the kernel,
``cycles`` and ``normalized_cycles``), the compiled kernels' cache.

These are our tests, written to the behaviour that Triton's
``third_party/proton/test/test_instrumentation.py`` checks (one test here per test there that runs
on Hopper and reads a file); that file itself ran against proton_ik with only its import changed
(the closing notes say when and where)."""

from __future__ import annotations

import json
import threading

import pytest
import triton
import triton.language as tl

import proton_ik as proton
import proton_ik.language as pl

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@triton.jit
def nested_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, SIGN: tl.constexpr):
    with pl.scope("kernel"):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        with pl.scope("load_ops"):
            x = tl.load(x_ptr + offsets, mask=mask)
            y = tl.load(y_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, x + SIGN * y, mask=mask)


def _vectors(n: int):
    x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
    return x, y, torch.empty_like(x)


def _events(path) -> list[dict]:
    return json.loads(path.read_text())["traceEvents"]


def _frame(node: dict, name: str) -> dict:
    """The first frame named ``name`` in a hatchet tree, depth first."""
    if node["frame"]["name"] == name:
        return node
    for child in node.get("children", []):
        try:
            return _frame(child, name)
        except KeyError:
            pass
    raise KeyError(name)


def test_a_trace_of_two_kernels_lists_each_kernels_scopes_in_launch_order(tmp_path):
    x, y, out = _vectors(256)
    proton.start(str(tmp_path / "two"), backend="instrumentation", data="trace")
    nested_add[(1,)](x, y, out, 256, BLOCK=1024, SIGN=1, num_warps=1)
    first = out.clone()
    nested_add[(1,)](x, y, out, 256, BLOCK=1024, SIGN=-1, num_warps=1)
    proton.finalize()
    assert torch.equal(first, x + y) and torch.equal(out, x - y)
    events = _events(tmp_path / "two.chrome_trace")
    assert [(e["name"], e["cat"]) for e in events] == [
        ("kernel", "nested_add"),
        ("load_ops", "nested_add"),
        ("kernel", "nested_add"),
        ("load_ops", "nested_add"),
    ]
    assert all(e["ph"] == "X" and e["dur"] > 0 for e in events)


def test_a_global_buffer_gives_one_event_per_scope_and_warp_with_protons_args(tmp_path):
    x, y, out = _vectors(512)
    mode = proton.mode.Default(buffer_type="global")
    proton.start(str(tmp_path / "gmem"), backend="instrumentation", data="trace", mode=mode)
    nested_add[(1,)](x, y, out, 512, BLOCK=1024, SIGN=1, num_warps=2)
    proton.finalize()
    assert torch.equal(out, x + y)
    events = _events(tmp_path / "gmem.chrome_trace")
    assert sorted((e["name"], e["tid"].split(" (")[0]) for e in events) == [
        ("kernel", "warp 0"),
        ("kernel", "warp 1"),
        ("load_ops", "warp 0"),
        ("load_ops", "warp 1"),
    ]
    for event in events:
        assert event["dur"] > 0 and event["ts"] >= 0
        for key in ("Init Time (ns)", "Post Final Time (ns)", "Finalization Time (ns)"):
            assert event["args"][key] >= 0


def test_a_timeline_under_a_host_scope_carries_its_call_stack(tmp_path):
    @triton.jit
    def copy_plus_one(x, y, size: tl.constexpr):
        pl.enter_scope("entire")
        offs = tl.arange(0, size)
        pl.enter_scope("load")
        value = tl.load(x + offs) + 1
        pl.exit_scope("load")
        pl.enter_scope("store")
        tl.store(y + offs, value)
        pl.exit_scope("store")
        pl.exit_scope("entire")

    mode = proton.mode.Default(metric_type="cycle", optimizations="time_shift")
    proton.start(str(tmp_path / "timeline"), data="trace", backend="instrumentation", mode=mode)
    with proton.scope("init"):
        x = torch.ones(1024, device="cuda")
        y = torch.zeros_like(x)
    with proton.scope("test"):
        copy_plus_one[(1,)](x, y, 1024, num_warps=4)
    proton.finalize()
    assert torch.equal(y, x + 1)
    events = _events(tmp_path / "timeline.chrome_trace")
    assert len(events) == 4 * 3  # four warps, three scopes, nothing else
    assert events[-1]["tid"].startswith("warp")
    assert events[-1]["args"]["call_stack"][-2:] == ["test", "copy_plus_one"]


def test_a_tree_nests_scopes_under_the_kernel_named_by_its_launch_metadata(tmp_path):
    def named(grid, kernel, args):
        return {"name": f"add_{args['BLOCK']}"}

    @triton.jit(launch_metadata=named)
    def loads_nested(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        with pl.scope("kernel"):
            offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offsets < n
            with pl.scope("load_ops"):
                with pl.scope("load_x"):
                    x = tl.load(x_ptr + offsets, mask=mask)
                with pl.scope("load_y"):
                    y = tl.load(y_ptr + offsets, mask=mask)
            tl.store(out_ptr + offsets, x + y, mask=mask)

    x, y, out = _vectors(256)
    for hook in ("triton", None):
        path = tmp_path / f"tree_{hook}"
        proton.start(str(path), backend="instrumentation", hook=hook)
        loads_nested[(1,)](x, y, out, 256, BLOCK=1024, num_warps=1)
        proton.finalize()
        tree = json.loads(path.with_suffix(".hatchet").read_text())
        launch = tree[0]["children"][0]
        if hook:
            assert launch["frame"]["name"] == "add_1024"
        load_ops = launch["children"][0]["children"][0]
        assert load_ops["frame"]["name"] == "load_ops"
        assert {child["frame"]["name"] for child in load_ops["children"]} == {"load_x", "load_y"}
        for child in load_ops["children"]:
            assert child["metrics"]["cycles"] > 0 and child["metrics"]["normalized_cycles"] > 0
    assert torch.equal(out, x + y)


def test_a_warp_specialized_tma_matmul_records_its_loop(tmp_path):
    from triton._internal_testing import supports_tma, supports_ws
    from triton.tools.tensor_descriptor import TensorDescriptor

    if not (supports_tma() and supports_ws()):
        pytest.skip("needs TMA and warp specialization")

    @triton.jit
    def matmul_ws(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pid_m, pid_n = tl.program_id(0), tl.program_id(1)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in tl.range(tl.cdiv(K, BK), warp_specialize=True):
            pl.enter_scope("loop")
            a = a_desc.load([pid_m * BM, k * BK])
            b = b_desc.load([pid_n * BN, k * BK])
            acc = tl.dot(a, b.T, acc)
            pl.exit_scope("loop")
        c_desc.store([pid_m * BM, pid_n * BN], acc.to(tl.float16))

    M = N = K = 512
    a = torch.randn((M, K), device="cuda", dtype=torch.float16)
    b = torch.randn((N, K), device="cuda", dtype=torch.float16)
    c = torch.empty((M, N), device="cuda", dtype=torch.float16)
    descriptors = [
        TensorDescriptor(a, a.shape, a.stride(), [128, 64]),
        TensorDescriptor(b, b.shape, b.stride(), [128, 64]),
        TensorDescriptor(c, c.shape, c.stride(), [128, 128]),
    ]
    mode = proton.mode.Default(metric_type="cycle", optimizations="clock32")
    proton.start(str(tmp_path / "ws"), backend="instrumentation", mode=mode)
    matmul_ws[(M // 128, N // 128)](*descriptors, K, BM=128, BN=128, BK=64, num_warps=8, num_stages=2)
    proton.finalize()
    torch.testing.assert_close(c, (a.float() @ b.float().T).half(), atol=0.5, rtol=0.02)
    kernel = json.loads((tmp_path / "ws.hatchet").read_text())[0]["children"][0]
    assert kernel["frame"]["name"] == "matmul_ws"
    assert kernel["children"][0]["frame"]["name"] == "loop"
    assert kernel["children"][0]["metrics"]["cycles"] > 0


def test_a_kernel_launched_from_another_thread_is_recorded(tmp_path):
    x, y, out = _vectors(256)
    failures: list[BaseException] = []

    def launch():
        try:
            nested_add[(1,)](x, y, out, 256, BLOCK=1024, SIGN=1)
        except BaseException as error:  # the test reports it below
            failures.append(error)

    proton.start(str(tmp_path / "threaded"), backend="instrumentation", data="trace")
    worker = threading.Thread(target=launch)
    worker.start()
    worker.join()
    proton.finalize()
    assert not failures
    assert torch.equal(out, x + y)
    assert [e for e in _events(tmp_path / "threaded.chrome_trace") if e["name"] == "kernel"]


def test_selective_sampling_keeps_one_warp_on_the_device_clock(tmp_path):
    @triton.jit
    def wide_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pl.enter_scope("add")
        add_block(x_ptr, y_ptr, out_ptr, n, BLOCK)
        pl.exit_scope("add")

    n = 1024 * 2000
    x, y, out = _vectors(n)
    mode = proton.mode.Default(
        metric_type="cycle",
        optimizations="clock32,time_shift",
        sampling_strategy="selective",
        sampling_options="0",
    )
    proton.start(str(tmp_path / "sampled"), data="trace", backend="instrumentation", mode=mode)
    wide_add[(triton.cdiv(n, 1024),)](x, y, out, n, 1024, num_warps=16)
    proton.finalize()
    assert torch.equal(out, x + y)
    events = _events(tmp_path / "sampled.chrome_trace")
    assert {e["tid"].split(" (")[0] for e in events} == {"warp 0"}  # the one warp kept of 16
    on_core0 = sorted((e for e in events if "Core0 " in e["pid"]), key=lambda e: e["ts"])
    assert len(on_core0) > 1  # several CTAs ran on SM 0, one after another on one clock
    assert on_core0[-1]["ts"] - on_core0[0]["ts"] >= on_core0[0]["dur"]


def test_the_plain_and_the_instrumented_binary_are_cached_apart(tmp_path):
    @triton.jit
    def copy(x, size: tl.constexpr, y):
        offs = tl.arange(0, size)
        tl.store(y + offs, tl.load(x + offs))

    x = torch.tensor([2.0], device="cuda")
    y = torch.zeros_like(x)
    device = triton.runtime.driver.active.get_current_device()
    proton.start(str(tmp_path / "cached"), backend="instrumentation")
    copy[(1,)](x, 1, y, num_warps=4)
    assert len(copy.device_caches[device][0]) == 1
    proton.finalize()
    copy[(1,)](x, 1, y, num_warps=4)
    assert len(copy.device_caches[device][0]) == 2  # the session's binary, and the plain one
    assert torch.equal(y, x)


@triton.jit
def add_block(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out = x + y over this program's block (inlined where it is called)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(
        out_ptr + offsets,
        tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
        mask=mask,
    )


@triton.jit
def plain_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    add_block(x_ptr, y_ptr, out_ptr, n, BLOCK)


def _records_inserted(ttgir: str) -> str:
    """Proton's IR override tutorial's edit: ``kernel`` around the body, ``loads`` around the loads."""
    lines = ttgir.splitlines(keepends=True)
    loads = [i for i, line in enumerate(lines) if "tt.load" in line]
    out = []
    for i, line in enumerate(lines):
        if "tt.return" in line:
            out.append('    proton.record end "kernel"\n')
        if i == loads[0]:
            out.append('    proton.record start "loads"\n')
        out.append(line)
        if "tt.func public @" in line:
            out.append('    proton.record start "kernel"\n')
        if i == loads[-1]:
            out.append('    proton.record end "loads"\n')
    return "".join(out)


def test_a_ttgir_override_with_proton_records_records_them(tmp_path, monkeypatch):
    from triton import knobs

    n = 1 << 16
    x, y, out = _vectors(n)
    monkeypatch.setattr(knobs.compilation, "always_compile", True)
    monkeypatch.setattr(knobs.compilation, "dump_ir", True)  # TRITON_KERNEL_DUMP=1
    monkeypatch.setattr(knobs.cache, "dump_dir", str(tmp_path / "ttgir_dump"))
    plain_add[(n // 1024,)](x, y, out, n, BLOCK=1024)  # the dump, as the tutorial's first step
    for stage in (tmp_path / "ttgir_dump").rglob("*"):  # its dump script keeps the TTGIR alone
        if stage.is_file() and stage.suffix != ".ttgir":
            stage.unlink()
    (dumped,) = (tmp_path / "ttgir_dump").rglob("*.ttgir")
    edited = _records_inserted(dumped.read_text())
    dumped.write_text(edited)
    monkeypatch.setattr(knobs.compilation, "dump_ir", False)
    monkeypatch.setattr(knobs.compilation, "override", True)  # TRITON_KERNEL_OVERRIDE=1
    monkeypatch.setattr(knobs.cache, "override_dir", str(tmp_path / "ttgir_dump"))
    out.zero_()
    proton.start(str(tmp_path / "override"), data="trace", backend="instrumentation")
    plain_add[(n // 1024,)](x, y, out, n, BLOCK=1024)
    proton.finalize()
    assert torch.equal(out, x + y)
    assert dumped.read_text() == edited  # the user's file, as they left it
    events = _events(tmp_path / "override.chrome_trace")
    per_scope = {name: sum(e["name"] == name for e in events) for name in ("kernel", "loads")}
    assert per_scope == {"kernel": (n // 1024) * 4, "loads": (n // 1024) * 4}  # every warp of every CTA
