"""The benchmarks' one harness (issue 32, item 7): one shapes table (tessera.bench.shapes) that
every benchmark reads — the C++ `tessera bench train` copy agrees with it, and no other Python
file spells it out again —, one CUDA-event timer (tessera.bench.timing), and
`python -m tessera.bench --help` answering without torch."""
import os
import re
import subprocess
import sys

import pytest

from tessera.bench import shapes

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def run_bench_main(*args):
    """python -m tessera.bench <args> in a fresh interpreter where `import torch` fails."""
    code = ("import runpy, sys; sys.modules['torch'] = None; "
            f"sys.argv = ['tessera.bench', *{list(args)!r}]; "
            "runpy.run_module('tessera.bench', run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, timeout=120)


def test_help_needs_no_torch():
    r = run_bench_main("--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: python -m tessera.bench {train,host,cpu,moe,chart,results}"), r.stdout
    for suite in ("train", "host", "cpu"):
        assert f"\n  {suite} " in r.stdout, r.stdout
    assert "ModuleNotFoundError" not in r.stderr and "ImportError" not in r.stderr


def test_unknown_suite_is_named_without_torch():
    r = run_bench_main("trian")
    assert r.returncode == 2
    assert "unknown suite 'trian'" in r.stderr and "usage:" in r.stderr
    # A suite that needs torch is what imports it (here: refused, torch being blocked).
    r = run_bench_main("cpu", "--help")
    assert r.returncode != 0 and "torch" in r.stderr


def test_cpp_bench_shapes_are_the_python_table():
    text = open(os.path.join(ROOT, "tools", "cli", "bench.cpp")).read()
    table = text[text.index("kShapes[] = {"):]
    table = table[:table.index("};")]
    cpp = {m[0]: tuple(int(v) for v in m[1:])
           for m in re.findall(r'\{"([\w-]+)", (\d+), (\d+), (\d+), (\d+)\}', table)}
    assert cpp == shapes.LINEAR_SHAPES


def python_sources():
    for top in ("python", "bench", "tools"):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith(".py"):
                    yield os.path.join(folder, f)


def test_one_python_shapes_table_and_one_cuda_event_timer():
    own = {os.path.realpath(os.path.join(ROOT, "python", "tessera", "bench", f))
           for f in ("shapes.py", "timing.py")}
    tables, timers = [], []
    for path in python_sources():
        if os.path.realpath(path) in own:
            continue
        text = open(path, encoding="utf-8").read()
        if re.search(r"""["']dsv3-fc1[^"']*["']\s*:\s*\(""", text):
            tables.append(path)
        if "Event(enable_timing" in text:
            timers.append(path)
    assert tables == [], f"a shapes table outside tessera.bench.shapes: {tables}"
    # tools/gpu/ep_*.py time multi-process exchanges their own way (owned elsewhere).
    timers = [t for t in timers if not os.path.basename(t).startswith("ep_")]
    assert timers == [], f"a CUDA-event timer outside tessera.bench.timing: {timers}"


def test_bench_scripts_read_the_same_table():
    torch = pytest.importorskip("torch")  # bench_common imports torch (its group-size rule)
    sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))
    try:
        import bench_common
    finally:
        sys.path.pop(0)
    assert bench_common.SHAPES == shapes.LINEAR_SHAPES
    assert bench_common.shapes.describe("dsv3-fc1") == "dsv3-fc1 (32e,512t,7168->4096)"
    assert sum(bench_common.group_sizes(32, 512, True)) == 32 * 512
    del torch


@pytest.mark.parametrize("name", list(shapes.LINEAR_SHAPES) + list(shapes.MLP_SHAPES))
def test_imbalanced_group_sizes_keep_the_total(name):
    table = shapes.LINEAR_SHAPES if name in shapes.LINEAR_SHAPES else shapes.MLP_SHAPES
    e, per = table[name][:2]
    sizes = shapes.group_sizes(e, per, True)
    assert len(sizes) == e and sum(sizes) == e * per
    assert sizes[0] == 0 and all(s % 16 == 0 and s >= 0 for s in sizes)
    assert max(sizes) > per  # skewed
    assert shapes.group_sizes(e, per, False) == [per] * e


def test_optim_suite_steps_quantize_where_their_labels_say(monkeypatch):
    """The optimizer suite's contenders (python -m tessera.bench train --optim), run on CPU
    tensors: every step moves its weight; a "+quantize_weights_" step's forward reads the copies
    quantize_weights_ made after the previous optimizer step (no re-quantization in the forward),
    the other FP8 step's forward re-quantizes."""
    torch = pytest.importorskip("torch")
    tt = pytest.importorskip("tessera.torch")
    from tessera.bench import train
    from tessera.torch import _ext

    class Case:  # the fields optim_contenders reads
        g = torch.Generator().manual_seed(0)
        sizes = [5, 0, 11]
        offs = torch.tensor(sizes).cumsum(0).to(torch.int32)
        x = torch.randn(16, 32, generator=g).to(torch.bfloat16)
        w = (torch.randn(3, 16, 32, generator=g) / 8).to(torch.bfloat16)
        dy = torch.randn(16, 16, generator=g).to(torch.bfloat16)

    calls = []
    real = _ext.linear_fwd

    def counted(x, weight, offs, bias, wcache, requantize, *rest):
        calls.append((x.shape[0], requantize))
        return real(x, weight, offs, bias, wcache, requantize, *rest)

    monkeypatch.setattr(_ext, "linear_fwd", counted)
    if _ext.linear is not None:  # the eager C++ node: the copies it is given (None: re-made)
        node = _ext.linear

        def counted_node(x, weight, offs, bias, wcache, *rest):
            calls.append((x.shape[0], wcache is None))
            return node(x, weight, offs, bias, wcache, *rest)

        monkeypatch.setattr(_ext, "linear", counted_node)
    steps = train.optim_contenders(tt, Case, ("bf16", "fp8_rowwise"))
    labels = [label for label, _ in steps]
    assert labels == ["torch bf16 +adamw", "tessera bf16 +adamw", "tessera fp8 +adamw",
                      "tessera fp8 +adamw +quantize_weights_"]
    for label, step in steps:
        step()  # the first step (a side step also makes the copies for the second)
        calls.clear()
        step()
        forwards = [requant for rows, requant in calls if rows == 16]
        side = [requant for rows, requant in calls if rows == 0]
        if label.startswith("tessera"):
            assert len(forwards) == 1, (label, calls)
        if label.endswith("+quantize_weights_"):
            assert forwards == [False] and side == [True], (label, calls)
        elif label == "tessera fp8 +adamw":
            assert forwards == [True] and side == [], (label, calls)


def simulated_gpu(monkeypatch, torch):
    """torch.cuda's timing surface on a simulated GPU: one clock (ms) for host and device, a
    stream that runs each launch's work after the work before it and not before the launch,
    events that complete when the work queued before them has (query() answers whether the event
    has completed; a host told no keeps polling, so its clock moves on to the event),
    torch.cuda._sleep(c) queuing c / 2e6 ms of work. Returns (clock, launch): launch(host_ms,
    device_ms) spends host_ms on the host, then queues device_ms of work."""
    clock = {"now": 0.0, "busy_until": 0.0}

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

        def record(self):
            self.t = max(clock["now"], clock["busy_until"])

        def query(self):
            done = clock["now"] >= self.t
            clock["now"] = max(clock["now"], self.t)
            return done

        def synchronize(self):
            clock["now"] = max(clock["now"], self.t)

        def elapsed_time(self, end):
            return end.t - self.t

    def launch(host_ms, device_ms):
        clock["now"] += host_ms
        clock["busy_until"] = max(clock["busy_until"], clock["now"]) + device_ms

    def synchronize():
        clock["now"] = max(clock["now"], clock["busy_until"])

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: launch(0.0, cycles / 2e6))
    return clock, launch


def test_marked_step_timer_reports_medians_of_the_timed_steps(monkeypatch):
    """tessera.bench.timing.marked_step_us (tools/gpu/step_marks.py) on the simulated GPU
    (simulated_gpu). Step i's forward costs i ms of host time and 5 ms of device work, its backward 2 ms of host
    and 10 ms of device. The warm-up steps are dropped; each column is the median of the rest."""
    torch = pytest.importorskip("torch")
    import time

    from tessera.bench import timing

    clock, launch = simulated_gpu(monkeypatch, torch)
    monkeypatch.setattr(time, "perf_counter", lambda: clock["now"] / 1e3)
    step = {"i": 0}

    def fwd():
        step["i"] += 1
        launch(step["i"], 5.0)
        return "y"

    def bwd(y):
        assert y == "y"
        launch(2.0, 10.0)

    for polling in (False, True):
        step["i"] = 0
        got = timing.marked_step_us(fwd, bwd, 5, polling, warmup=2)
        # timed steps i = 3..7: the forward returns after i ms (median 5), the backward 2 ms
        # later; the device finishes the forward 5 ms after its launch, the backward 10 ms
        # after the forward (launched before that)
        assert got == pytest.approx([5e3, 10e3, 7e3, 20e3])
    del torch


def test_host_loop_runs_the_selected_contenders_for_a_profiler(capsys):
    """`python -m tessera.bench host --loop` (what tools/gpu/host_spy.sh samples) runs only
    the contenders --only selects, and names a selection that matches none."""
    pytest.importorskip("torch")
    from tessera.bench import host

    assert host.main(["--device", "cpu", "--shape", "2,2,16,16", "--loop", "0.05",
                      "--only", "fp8_rowwise"]) == 0
    lines = [l for l in capsys.readouterr().out.splitlines() if "steps," in l]
    assert len(lines) == 1 and "tessera fp8_rowwise cached-W" in lines[0], lines
    assert int(lines[0].split(": ")[1].split()[0]) >= 100  # at least one round of 100 steps
    assert host.main(["--device", "cpu", "--shape", "2,2,16,16", "--loop", "0.05",
                      "--only", "no such contender"]) == 2
    assert "matches no contender" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        host.main(["--device", "cpu", "--loop", "-1"])


def test_host_moe_table_times_the_row_path_against_torch(capsys):
    """`python -m tessera.bench host --moe`: the MoE row path's table, its three contenders
    timed (tessera dropless and capacity, torch's), each row a positive time and its ratio."""
    pytest.importorskip("torch")
    from tessera.bench import host

    assert host.main(["--device", "cpu", "--shape", "2,2,16,16", "--moe", "--steps", "2",
                      "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    rows = [l for l in out.split("| MoE row path")[1].splitlines() if l.startswith("| 64x64x8x2")]
    labels = [r.split(" | ")[1] for r in rows]
    assert labels == ["torch permute + weighted sum", "tessera dispatch + combine, dropless",
                      "tessera dispatch + combine, capacity"], out
    assert all(float(r.split(" | ")[2]) > 0 for r in rows), out
    assert rows[0].split(" | ")[3].rstrip(" |") == "1.00", out


def test_spy_summary_keeps_the_samples_inside_a_step():
    """tools/gpu/spy_summary.py on hand-made raw stacks: the import, the main thread's wait for
    the engine and the engine's idle wait are dropped; shares are of the kept samples."""
    sys.path.insert(0, os.path.join(ROOT, "tools", "gpu"))
    try:
        import spy_summary
    finally:
        sys.path.pop(0)
    run = "<module> (x.py:1);main (tessera/bench/host.py:90);contenders.<locals>.step.<locals>.run (tessera/bench/host.py:53)"
    raw = [
        "<module> (x.py:1);_find_and_load (<frozen>:1) 50",                       # import: dropped
        f"{run};linear (libtessera.so);cudaLaunchKernel (libcudart.so) 6",         # kept
        f"{run};linear (libtessera.so) 2",                                         # kept
        f"{run};backward (torch/_tensor.py:1);torch::autograd::Engine::execute (libtorch.so) 9",  # wait
        "thread_main (libtorch.so);torch::autograd::ReadyQueue::pop (libtorch.so) 30",  # idle
        "thread_main (libtorch.so);torch::autograd::CppNode<LinearNode>::apply (a.so);linear_bwd (a.so) 2",
    ]
    out = spy_summary.summarize(raw, r"\.run \([^;]*host\.py:", 10)
    assert out.splitlines()[0] == "samples: 99, inside a step: 10", out
    self_part = out.split("== inclusive")[0]
    assert " 60.00% cudaLaunchKernel" in self_part and " 20.00% linear\n" in self_part
    assert " 20.00% linear_bwd" in self_part
    inclusive = out.split("== inclusive")[1]
    assert " 80.00% linear\n" in inclusive and "_find_and_load" not in out
    assert "no sample matched" in spy_summary.summarize(raw[:1], r"nothing", 10)


def test_device_only_timer_hides_the_host_enqueue_and_falls_back_on_a_sync(monkeypatch):
    """tessera.bench.timing.cuda_interleaved_ms(device_only=True) on the simulated GPU
    (simulated_gpu). Each call's GPU work alone comes out, also when its host cost
    outlasts the first spin; a call that waits for the device is timed with its host enqueue
    and named in `eager`; device_only=False includes the host enqueue of every call."""
    torch = pytest.importorskip("torch")
    from tessera.bench import timing

    _, launch = simulated_gpu(monkeypatch, torch)
    monkeypatch.setattr(timing._device_ms, "spin", 1 << 21)

    def syncing():
        launch(0.2, 0.3)
        torch.cuda.synchronize()

    fns = {"short host": lambda: launch(0.5, 0.1),    # hidden by the first spin (~1 ms)
           "long host": lambda: launch(3.0, 0.25),    # the spin doubles to cover 3 ms
           "syncs": syncing}
    eager = set()
    got = timing.cuda_interleaved_ms(fns, 5, device_only=True, eager=eager)
    assert got == pytest.approx({"short host": 0.1, "long host": 0.25, "syncs": 0.5})
    assert eager == {"syncs"}
    monkeypatch.setattr(timing._device_ms, "spin", 1 << 21)
    got = timing.cuda_interleaved_ms(fns, 5)
    assert got == pytest.approx({"short host": 0.6, "long host": 3.25, "syncs": 0.5})
    del torch
