#!/usr/bin/env python3
"""Real-GPU measurements for preempt-lab (issue 31, steps 1 and 2), on one NVIDIA GPU.

Step 1, `--phase shapes`: the lab's workloads profiled alone with PyTorch's profiler (Kineto):
per kernel its name, grid, block, registers per thread, shared memory, the occupancy limit in
blocks per SM computed from those, and its duration. Workloads: ResNet-18 batch-1 inference
(cuDNN on and off), ResNet-50 training at batch `--train-batch` (cuDNN off, as in step 2), a GEMM
loop, a bandwidth-bound elementwise loop, one decode step of a small transformer.

`--phase ncu-target --workload W` runs one request/iteration of W between cudaProfilerStart and
Stop, for `ncu --profile-from-start off` (DRAM bytes and SM throughput per kernel): run.sh does it.

Step 2, `--phase coloc`: co-location in ONE process, one stream per job (two streams of one
process run kernels side by side, as AMD's hardware scheduler runs queues of several processes;
two processes without MPS time-slice). The latency job (HP) is ResNet-18 batch 1, one request
= one CUDA-graph replay where the graph could be captured on that stream (eager otherwise; the
same mode in every row), Poisson arrivals at `--rate`/s (the same arrival times in every row).
Next to each batch kind (LP: ResNet-50 training, GEMM loop, bandwidth loop), rows:
  native          both streams at the default priority
  priority        HP stream at the highest stream priority
  hold-w1         host-side hold (kfdq level 1): LP launches stop while a request is in flight,
                  at most 1 LP unit in flight on the GPU; HP at high priority
  hold-unbounded  the same with LP running ahead (up to --lp-ahead units in flight)
  split-N         disjoint SM partitions (green contexts from one split): HP on N SMs, LP on the
                  rest; N = 16, 32, 64
  temporal        the best a temporal preemption could do: LP stops launching and its stream is
                  drained before each arrival (the arrival times are known in advance), and
                  resumes after the request; latency counted from the arrival
plus the baselines: HP alone after an idle GPU (cold) and right after the LP job ran (warm),
HP alone in each split's partition, LP alone on the whole GPU and in each split's remainder.
cuDNN is disabled for every co-location row: it fails on a green context's stream
(CUDNN_STATUS_EXECUTION_FAILED), so convolutions use PyTorch's own kernels in every row alike.
An NVML sampler records the SM clock and power throughout.

Output (all under --out): shapes.json, coloc.json (every row with its per-request latencies),
coloc.csv, env.json, plus ncu.csv from run.sh. `--self-test` checks the pure helpers without a GPU
or PyTorch; `--quick` runs every code path with tiny counts.
"""

import argparse
import collections
import json
import math
import os
import random
import sys
import threading
import time
import traceback

# H100 SXM per-SM limits (CUDA C Programming Guide, "Compute Capabilities", 9.0): 64K 32-bit
# registers, 228 KB shared memory (1 KB reserved per block), 64 warps, 32 blocks.
SM90 = {
    "regs": 65536,
    "reg_unit": 256,
    "smem": 228 * 1024,
    "smem_reserved": 1024,
    "warps": 64,
    "blocks": 32,
}


def log(*a):
    print(*a, flush=True)


# ------------------------------------------------------------------ pure helpers (self-tested)


def nearest_rank(xs, q):
    """The q-quantile by nearest rank: the ceil(q n)-th smallest (preempt-lab's report rule)."""
    s = sorted(xs)
    if not s:
        return float("nan")
    k = max(1, math.ceil(q * len(s)))
    return s[min(k, len(s)) - 1]


def poisson_arrivals(rate, n, seed):
    """n arrival offsets (s) of a Poisson process of `rate`/s."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        out.append(t)
    return out


def blocks_per_sm(threads, regs_per_thread, smem_bytes, lim=SM90):
    """Occupancy limit of a kernel in blocks per SM, and what limits it."""
    warps = max(1, math.ceil(threads / 32))
    by = {"warps": lim["warps"] // warps, "blocks": lim["blocks"]}
    if regs_per_thread:
        per_warp = math.ceil(regs_per_thread * 32 / lim["reg_unit"]) * lim["reg_unit"]
        by["registers"] = (lim["regs"] // per_warp) // warps
    by["shared memory"] = lim["smem"] // (int(smem_bytes or 0) + lim["smem_reserved"])
    b = min(by.values())
    return max(b, 0), min(by, key=by.get)


def row_stats(lat_s, alone_s):
    """P50/P99/max of latencies (s) in ms, and their ratios to `alone_s` latencies."""
    r = {
        "p50_ms": nearest_rank(lat_s, 0.5) * 1e3,
        "p99_ms": nearest_rank(lat_s, 0.99) * 1e3,
        "max_ms": max(lat_s) * 1e3 if lat_s else float("nan"),
        "n": len(lat_s),
    }
    if alone_s:
        r["p50_x"] = r["p50_ms"] / (nearest_rank(alone_s, 0.5) * 1e3)
        r["p99_x"] = r["p99_ms"] / (nearest_rank(alone_s, 0.99) * 1e3)
    return r


def self_test():
    assert nearest_rank([5, 1, 3, 2, 4], 0.5) == 3
    assert nearest_rank(list(range(1, 101)), 0.99) == 99
    assert nearest_rank([7], 0.99) == 7
    a = poisson_arrivals(20.0, 2000, 1)
    assert a == poisson_arrivals(20.0, 2000, 1) and a != poisson_arrivals(20.0, 2000, 2)
    assert abs(a[-1] / 2000 - 0.05) < 0.005, a[-1]
    # 256 threads, 32 registers: 8 blocks by warps; 64 registers: 4 by registers.
    assert blocks_per_sm(256, 32, 0) == (8, "warps")
    assert blocks_per_sm(256, 64, 0) == (4, "registers")
    assert blocks_per_sm(128, 168, 200 * 1024) == (1, "shared memory")
    assert blocks_per_sm(32, 16, 0) == (32, "blocks")
    s = row_stats([0.001, 0.002, 0.004], [0.001, 0.001, 0.002])
    assert s["p50_x"] == 2.0 and s["p99_x"] == 2.0, s
    log("self-test: ok")


# ------------------------------------------------------------------ workloads (plain torch.nn)


def build_models():
    import torch
    from torch import nn

    class Basic(nn.Module):
        expansion = 1

        def __init__(self, cin, c, stride):
            super().__init__()
            self.c1 = nn.Conv2d(cin, c, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(c)
            self.c2 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(c)
            self.down = None
            if stride != 1 or cin != c:
                self.down = nn.Sequential(nn.Conv2d(cin, c, 1, stride, bias=False), nn.BatchNorm2d(c))

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            y = self.b2(self.c2(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, cin, c, stride):
            super().__init__()
            self.c1 = nn.Conv2d(cin, c, 1, bias=False)
            self.b1 = nn.BatchNorm2d(c)
            self.c2 = nn.Conv2d(c, c, 3, stride, 1, bias=False)
            self.b2 = nn.BatchNorm2d(c)
            self.c3 = nn.Conv2d(c, c * 4, 1, bias=False)
            self.b3 = nn.BatchNorm2d(c * 4)
            self.down = None
            if stride != 1 or cin != c * 4:
                self.down = nn.Sequential(nn.Conv2d(cin, c * 4, 1, stride, bias=False), nn.BatchNorm2d(c * 4))

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            y = torch.relu(self.b2(self.c2(y)))
            y = self.b3(self.c3(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class ResNet(nn.Module):
        """torchvision's ResNet layout (He et al. 2016), written out: no torchvision needed."""

        def __init__(self, block, layers, classes=1000):
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
            )
            blocks, cin = [], 64
            for i, n in enumerate(layers):
                c = 64 * 2**i
                for j in range(n):
                    blocks.append(block(cin, c, 2 if (j == 0 and i > 0) else 1))
                    cin = c * block.expansion
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            x = self.blocks(self.stem(x))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    class Decoder(nn.Module):
        """A small decoder-only transformer's decode step: `layers` x (attention over a KV cache
        of `ctx` tokens, MLP), batch 1, bf16."""

        def __init__(self, d=2048, heads=16, layers=16, ctx=512):
            super().__init__()
            self.h, self.dh = heads, d // heads
            self.ln1 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
            self.qkv = nn.ModuleList(nn.Linear(d, 3 * d, bias=False) for _ in range(layers))
            self.out = nn.ModuleList(nn.Linear(d, d, bias=False) for _ in range(layers))
            self.ln2 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
            self.up = nn.ModuleList(nn.Linear(d, 4 * d, bias=False) for _ in range(layers))
            self.down = nn.ModuleList(nn.Linear(4 * d, d, bias=False) for _ in range(layers))
            self.kv = [
                (torch.zeros(1, heads, ctx, d // heads), torch.zeros(1, heads, ctx, d // heads))
                for _ in range(layers)
            ]

        def setup(self, device, dtype):
            self.to(device, dtype)
            self.kv = [(k.to(device, dtype).normal_(), v.to(device, dtype).normal_()) for k, v in self.kv]
            return self

        def forward(self, x):
            for i in range(len(self.qkv)):
                q, k, v = self.qkv[i](self.ln1[i](x)).view(1, 1, 3, self.h, self.dh).unbind(2)
                kc, vc = self.kv[i]
                kc[:, :, -1:] = k.transpose(1, 2)
                vc[:, :, -1:] = v.transpose(1, 2)
                a = nn.functional.scaled_dot_product_attention(q.transpose(1, 2), kc, vc)
                x = x + self.out[i](a.transpose(1, 2).reshape(1, 1, -1))
                x = x + self.down[i](nn.functional.gelu(self.up[i](self.ln2[i](x))))
            return x

    return {
        "resnet18": lambda: ResNet(Basic, [2, 2, 2, 2]),
        "resnet50": lambda: ResNet(Bottleneck, [3, 4, 6, 3]),
        "decoder": Decoder,
    }


class Jobs:
    """The workloads on the GPU, each as a function that launches one unit of work on the
    current stream: an HP request, or one LP unit (a training iteration, one GEMM, one
    elementwise kernel)."""

    def __init__(self, args):
        import torch

        self.torch = torch
        dev = "cuda"
        models = build_models()
        torch.manual_seed(0)
        self.r18 = models["resnet18"]().eval().to(dev)
        self.x18 = torch.randn(1, 3, 224, 224, device=dev)
        self.r50 = models["resnet50"]().train().to(dev)
        self.opt = torch.optim.SGD(self.r50.parameters(), lr=0.01, momentum=0.9)
        self.x50 = torch.randn(args.train_batch, 3, 224, 224, device=dev)
        self.y50 = torch.randint(0, 1000, (args.train_batch,), device=dev)
        n = args.gemm_n
        self.ga = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        self.gb = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        self.gc = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
        m = args.bw_elems
        self.bx = torch.randn(m, device=dev)
        self.by = torch.randn(m, device=dev)
        self.bz = torch.empty(m, device=dev)
        self.dec = models["decoder"]().setup(dev, torch.bfloat16)
        self.dx = torch.randn(1, 1, 2048, device=dev, dtype=torch.bfloat16)
        self.units = {"train": self.train_step, "gemm": self.gemm, "bw": self.bw}
        self.bytes_estimate = {
            "gemm": 3 * n * n * 2,
            "bw": 3 * m * 4,
        }

    def request(self):
        with self.torch.no_grad():
            return self.r18(self.x18)

    def decode(self):
        with self.torch.no_grad():
            return self.dec(self.dx)

    def train_step(self):
        torch = self.torch
        self.opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(self.r50(self.x50), self.y50)
        loss.backward()
        self.opt.step()

    def gemm(self):
        self.torch.mm(self.ga, self.gb, out=self.gc)

    def bw(self):
        self.torch.add(self.bx, self.by, out=self.bz)


# ------------------------------------------------------------------ green contexts


class GreenSplits:
    """For each N: one `cuDevSmResourceSplitByCount` of the device's SMs into a group of N and
    the remainder, a green context on each, a stream in each (the HP one at the highest
    priority), wrapped for PyTorch."""

    def __init__(self, counts):
        import torch
        from cuda.bindings import driver as drv

        self.drv = drv
        self.check(drv.cuInit(0))
        dev = self.check(drv.cuDeviceGet(0))
        res = self.check(drv.cuDeviceGetDevResource(dev, drv.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM))
        self.total = int(res.sm.smCount)
        self.splits = {}
        self.keep = []
        for n in counts:
            r = drv.cuDevSmResourceSplitByCount(1, res, 0, n)
            self.err(r[0], f"split {n}")
            groups, _, rem = r[1], r[2], r[3]
            ctxs, streams = [], []
            for i, part in enumerate((groups[0], rem)):
                desc = self.check(drv.cuDevResourceGenerateDesc([part], 1))
                g = self.check(drv.cuGreenCtxCreate(desc, dev, drv.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM))
                prio = -5 if i == 0 else 0
                try:
                    s = self.check(drv.cuGreenCtxStreamCreate(g, drv.CUstream_flags.CU_STREAM_NON_BLOCKING, prio))
                except RuntimeError:
                    s = self.check(drv.cuGreenCtxStreamCreate(g, drv.CUstream_flags.CU_STREAM_NON_BLOCKING, 0))
                ctxs.append(g)
                ptr = int(s) if hasattr(s, "__int__") else int(s.getPtr())
                streams.append(torch.cuda.get_stream_from_external(ptr))
                self.keep.append((g, s))
            self.splits[n] = {
                "hp_sms": int(groups[0].sm.smCount),
                "lp_sms": int(rem.sm.smCount),
                "hp": streams[0],
                "lp": streams[1],
            }
            log(f"green split {n}: HP {groups[0].sm.smCount} SMs, LP {rem.sm.smCount} SMs")

    def err(self, e, what):
        if int(e) != 0:
            raise RuntimeError(f"{what}: CUDA driver error {e}")

    def check(self, r):
        self.err(r[0], "driver call")
        return r[1] if len(r) == 2 else r[1:]


def smid_probe(streams, blocks=2048):
    """Distinct SMs a `blocks`-block Triton kernel ran on, per stream (checks the partitions)."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def smid_kernel(out_ptr):
        pid = tl.program_id(0)
        z = tl.full((1,), 0, tl.int32)
        sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [z], dtype=tl.int32, is_pure=False, pack=1)
        tl.store(out_ptr + pid + tl.arange(0, 1), sm)

    out = {}
    for name, s in streams.items():
        buf = torch.full((blocks,), -1, dtype=torch.int32, device="cuda")
        with torch.cuda.stream(s):
            smid_kernel[(blocks,)](buf)
        s.synchronize()
        ids = buf.cpu().tolist()
        out[name] = {"distinct_sms": len(set(ids)), "min": min(ids), "max": max(ids), "unwritten": ids.count(-1)}
    return out


# ------------------------------------------------------------------ NVML clock sampler


class Sampler:
    def __init__(self, period=0.01):
        self.samples = []
        self.times = []
        self.stop = False
        self.ok = False
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nv = pynvml
            self.h = pynvml.nvmlDeviceGetHandleByIndex(0)
            self.ok = True
        except Exception as e:  # noqa: BLE001
            log(f"NVML unavailable: {e}")
        self.period = period
        if self.ok:
            self.t = threading.Thread(target=self.run, daemon=True)
            self.t.start()

    def run(self):
        nv = self.nv
        while not self.stop:
            try:
                clk = nv.nvmlDeviceGetClockInfo(self.h, nv.NVML_CLOCK_SM)
                mem = nv.nvmlDeviceGetClockInfo(self.h, nv.NVML_CLOCK_MEM)
                pw = nv.nvmlDeviceGetPowerUsage(self.h) / 1000.0
                t = time.perf_counter()
                self.samples.append((t, clk, mem, pw))
                self.times.append(t)
            except Exception:  # noqa: BLE001
                pass
            time.sleep(self.period)

    def window(self, t0, t1):
        import bisect

        n = len(self.times)
        s = self.samples[bisect.bisect_left(self.times, t0, 0, n):bisect.bisect_right(self.times, t1, 0, n)]
        if not s:
            return {}
        clk = [x[1] for x in s]
        pw = [x[3] for x in s]
        return {
            "sm_mhz_mean": sum(clk) / len(clk),
            "sm_mhz_min": min(clk),
            "sm_mhz_max": max(clk),
            "power_w_mean": sum(pw) / len(pw),
            "power_w_max": max(pw),
        }

    def at(self, t):
        """The SM clock of the sample nearest before t."""
        import bisect

        i = bisect.bisect_right(self.times, t, 0, len(self.times)) - 1
        return self.samples[i][1] if i >= 0 else None


# ------------------------------------------------------------------ co-location engine


class LpJob:
    """The batch job's host thread: launches units on its stream, at most `window` in flight,
    stopping while `hold` is set. Completed units are timed with events where the stream's
    context allows them, else by synchronising."""

    def __init__(self, torch, unit, stream, window, use_events):
        self.torch = torch
        self.unit = unit
        self.stream = stream
        self.window = window
        self.use_events = use_events
        self.cv = threading.Condition()
        self.launch_lock = threading.Lock()
        self.hold = False
        self.stop = False
        self.done_times = []  # host perf_counter at which each unit was known complete
        self.launched = 0
        self.error = None
        self.t = threading.Thread(target=self.run, daemon=True)

    def set_hold(self, h, wait_launch=False):
        """Holds (no new launches from now on) or releases the job. A hold takes effect at the
        next launch, as the shim's does; with `wait_launch` it also waits for a launch under way,
        so that a stream synchronisation after it drains everything."""
        self.hold = h
        if not h:
            with self.cv:
                self.cv.notify_all()
        if wait_launch:
            with self.launch_lock:
                pass

    def run(self):
        torch = self.torch
        inflight = collections.deque()
        try:
            while True:
                with self.cv:
                    while self.hold and not self.stop:
                        self.cv.wait(0.01)
                if self.stop:
                    break
                # Reap completed units.
                while inflight and self.query(inflight[0]):
                    inflight.popleft()
                    self.done_times.append(time.perf_counter())
                if len(inflight) >= self.window:
                    self.wait(inflight.popleft())
                    self.done_times.append(time.perf_counter())
                    continue
                with self.launch_lock:
                    if self.hold or self.stop:
                        continue
                    with torch.cuda.stream(self.stream):
                        self.unit()
                        ev = None
                        if self.use_events:
                            ev = torch.cuda.Event()
                            ev.record(self.stream)
                inflight.append(ev)
                self.launched += 1
            while inflight:
                self.wait(inflight.popleft())
                self.done_times.append(time.perf_counter())
        except Exception as e:  # noqa: BLE001
            self.error = f"{type(e).__name__}: {e}"
            log("LP thread failed:", self.error)

    def query(self, ev):
        return ev.query() if ev is not None else False

    def wait(self, ev):
        if ev is not None:
            ev.synchronize()
        else:
            self.stream.synchronize()


def sleep_until(t):
    d = t - time.perf_counter()
    if d > 0.002:
        time.sleep(d - 0.0015)
    while time.perf_counter() < t:
        pass


class Coloc:
    def __init__(self, args, jobs, sampler):
        import torch

        self.torch = torch
        self.args = args
        self.jobs = jobs
        self.sampler = sampler
        self.arrivals = poisson_arrivals(args.rate, args.requests, args.seed)
        self.rows = []
        self.events_ok = {}
        self.req_fn = {}
        self.lp_fn = {}
        self.graph_mode = None
        self.train_mode = None

    def prepare_request(self, name, stream):
        """A request on `stream`: a CUDA graph captured on it, or eager launches."""
        torch = self.torch
        jobs = self.jobs
        with torch.cuda.stream(stream):
            for _ in range(3):
                jobs.request()
        stream.synchronize()
        if self.args.graphs:
            try:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, stream=stream):
                    jobs.request()
                with torch.cuda.stream(stream):
                    g.replay()
                stream.synchronize()
                self.req_fn[name] = g.replay
                return "graph"
            except Exception as e:  # noqa: BLE001
                log(f"graph capture on {name} failed: {type(e).__name__}: {e}")
                torch.cuda.synchronize()
        self.req_fn[name] = jobs.request
        return "eager"

    def prepare_train(self, name, stream):
        """The training iteration on `stream` as a CUDA graph captured there (whole-network
        capture: static input and labels, SGD's step inside), or False if capture failed."""
        torch = self.torch
        jobs = self.jobs
        with torch.cuda.stream(stream):
            for _ in range(2):
                jobs.train_step()
        stream.synchronize()
        try:
            g = torch.cuda.CUDAGraph()
            jobs.opt.zero_grad(set_to_none=True)
            with torch.cuda.graph(g, stream=stream):
                loss = torch.nn.functional.cross_entropy(jobs.r50(jobs.x50), jobs.y50)
                loss.backward()
                jobs.opt.step()
            with torch.cuda.stream(stream):
                g.replay()
            stream.synchronize()
            self.lp_fn[("train", name)] = g.replay
            self.keep_graphs = getattr(self, "keep_graphs", []) + [g]
            return True
        except Exception as e:  # noqa: BLE001
            log(f"training graph capture on {name} failed: {type(e).__name__}: {e}")
            torch.cuda.synchronize()
            return False

    def probe_events(self, name, stream):
        torch = self.torch
        try:
            ev = torch.cuda.Event()
            with torch.cuda.stream(stream):
                self.jobs.bw()
                ev.record(stream)
            ev.synchronize()
            self.events_ok[name] = True
        except Exception as e:  # noqa: BLE001
            log(f"events on {name}: {type(e).__name__}: {e}")
            self.events_ok[name] = False

    def hp_run(self, hp_name, hp_stream, lp=None, mode="plain", lead=0.0):
        """Runs the HP requests at the arrival times; returns latencies (s) and per-request info."""
        req = self.req_fn[hp_name]
        torch = self.torch
        lat, info = [], []
        t0 = time.perf_counter() + 0.3
        late_drains = 0
        for a in self.arrivals:
            if time.perf_counter() - t0 > self.args.row_max_s:
                # Saturated: requests queue without end; the row stops here (n says how many ran).
                break
            ta = t0 + a
            if mode == "temporal" and lp is not None:
                sleep_until(ta - lead)
                lp.set_hold(True, wait_launch=True)
                lp.stream.synchronize()
                if time.perf_counter() > ta:
                    late_drains += 1
            sleep_until(max(ta, time.perf_counter()))
            if mode == "hold" and lp is not None:
                lp.set_hold(True)
            with torch.cuda.stream(hp_stream):
                req()
            hp_stream.synchronize()
            td = time.perf_counter()
            if mode in ("hold", "temporal") and lp is not None:
                lp.set_hold(False)
            lat.append(td - ta)
            info.append(self.sampler.at(ta) if self.sampler.ok else None)
        return lat, info, t0, time.perf_counter(), late_drains

    def lp_start(self, unit, lp_name, lp_stream, window):
        if unit == "train":
            window = min(window, self.args.train_ahead)
        fn = self.lp_fn.get((unit, lp_name), self.jobs.units[unit])
        lp = LpJob(self.torch, fn, lp_stream, window, self.events_ok.get(lp_name, False))
        lp.t.start()
        return lp

    def lp_stop(self, lp):
        lp.stop = True
        lp.set_hold(False)
        lp.t.join()
        return lp

    def lp_rate(self, lp, t0, t1):
        n = sum(1 for t in lp.done_times if t0 <= t <= t1)
        return n / (t1 - t0)

    def row(self, kind, config, hp_name=None, hp_stream=None, lp_unit=None, lp_name=None, lp_stream=None,
            window=None, mode="plain", lead=0.0, warm_before=None, extra=None):
        args = self.args
        torch = self.torch
        rec = {"lp": kind, "config": config, "hp_stream": hp_name, "lp_stream": lp_name, "mode": mode}
        if extra:
            rec.update(extra)
        try:
            if warm_before is not None:
                # Run the LP job alone first, so the GPU's clocks are where a busy GPU leaves them.
                w = self.lp_start(warm_before, "main-lp", self.main_lp, args.lp_ahead)
                time.sleep(args.warm_s)
                self.lp_stop(w)
            lp = None
            if lp_unit is not None:
                lp = self.lp_start(lp_unit, lp_name, lp_stream, window or args.lp_ahead)
                time.sleep(args.ramp_s)
            if hp_stream is not None:
                lat, clk, t0, t1, late = self.hp_run(hp_name, hp_stream, lp, mode, lead)
                rec["latency_ms"] = [x * 1e3 for x in lat]
                rec["sm_mhz_at_arrival"] = clk
                rec["late_drains"] = late
            else:
                t0 = time.perf_counter()
                time.sleep(args.lp_alone_s)
                t1 = time.perf_counter()
            if lp is not None:
                self.lp_stop(lp)
                rec["lp_units_per_s"] = self.lp_rate(lp, t0, t1)
                rec["lp_units"] = len(lp.done_times)
                rec["lp_error"] = lp.error
                rec["lp_window"] = lp.window
            rec["clocks"] = self.sampler.window(t0, t1) if self.sampler.ok else {}
            rec["seconds"] = t1 - t0
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"{type(e).__name__}: {e}"
            log(traceback.format_exc())
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001
                pass
        self.rows.append(rec)
        lat = rec.get("latency_ms")
        s = f"{kind:6} {config:16}"
        if lat:
            s += f" HP P50 {nearest_rank(lat, 0.5):7.2f} ms P99 {nearest_rank(lat, 0.99):7.2f} ms"
        if "lp_units_per_s" in rec:
            s += f" LP {rec['lp_units_per_s']:8.2f}/s"
        if "error" in rec:
            s += f" ERROR {rec['error']}"
        log(s)
        return rec

    def run(self, splits):
        args = self.args
        torch = self.torch
        self.main_hp = torch.cuda.Stream(priority=0)
        self.main_hp_high = torch.cuda.Stream(priority=-10)
        self.main_lp = torch.cuda.Stream(priority=0)
        streams = {"main-hp": self.main_hp, "main-hp-high": self.main_hp_high, "main-lp": self.main_lp}
        for n, sp in (splits.splits.items() if splits else []):
            streams[f"green{n}-hp"] = sp["hp"]
            streams[f"green{n}-lp"] = sp["lp"]
        modes = {}
        for name, s in streams.items():
            self.probe_events(name, s)
            if name.endswith("hp") or name.endswith("hp-high"):
                modes[name] = self.prepare_request(name, s)
        # One mode for every row: graphs only if every HP stream could capture one.
        if any(m != "graph" for m in modes.values()):
            for name in modes:
                self.req_fn[name] = self.jobs.request
            self.graph_mode = "eager"
        else:
            self.graph_mode = "graph"
        log(f"request mode: {self.graph_mode} ({modes}); events: {self.events_ok}")
        if "train" in args.lp_kinds and args.graphs:
            ok = [self.prepare_train(name, s) for name, s in streams.items() if name.endswith("-lp")]
            if not all(ok):
                self.lp_fn = {k: v for k, v in self.lp_fn.items() if k[0] != "train"}
            self.train_mode = "graph" if all(ok) else "eager"
        else:
            self.train_mode = "eager"
        log(f"training iteration mode: {self.train_mode}")
        # Each LP unit's time alone, for the temporal row's lead.
        unit_s = {}
        for unit in args.lp_kinds:
            fn = self.lp_fn.get((unit, "main-lp"), self.jobs.units[unit])
            with torch.cuda.stream(self.main_lp):
                fn()
            self.main_lp.synchronize()
            t = time.perf_counter()
            for _ in range(3):
                with torch.cuda.stream(self.main_lp):
                    fn()
            self.main_lp.synchronize()
            unit_s[unit] = (time.perf_counter() - t) / 3
        log(f"LP unit alone (s): {unit_s}")
        self.unit_s = unit_s

        time.sleep(args.idle_s)
        self.row("-", "hp-alone-cold", "main-hp", self.main_hp, extra={"after": f"{args.idle_s} s idle"})
        self.row("-", "hp-alone-warm", "main-hp", self.main_hp, warm_before="gemm",
                 extra={"after": f"{args.warm_s} s of the GEMM loop"})
        for n, sp in (splits.splits.items() if splits else []):
            self.row("-", f"hp-alone-split{n}", f"green{n}-hp", sp["hp"], extra={"sms": sp["hp_sms"]})
        for unit in args.lp_kinds:
            self.row(unit, "lp-alone", lp_unit=unit, lp_name="main-lp", lp_stream=self.main_lp)
            for n, sp in (splits.splits.items() if splits else []):
                self.row(unit, f"lp-alone-split{n}", lp_unit=unit, lp_name=f"green{n}-lp", lp_stream=sp["lp"],
                         extra={"sms": sp["lp_sms"]})
        for unit in args.lp_kinds:
            common = {"lp_unit": unit, "lp_name": "main-lp", "lp_stream": self.main_lp}
            self.row(unit, "native", "main-hp", self.main_hp, **common)
            self.row(unit, "priority", "main-hp-high", self.main_hp_high, **common)
            self.row(unit, "hold-w1", "main-hp-high", self.main_hp_high, window=1, mode="hold", **common)
            self.row(unit, "hold-unbounded", "main-hp-high", self.main_hp_high, window=args.lp_ahead, mode="hold",
                     **common)
            for n, sp in (splits.splits.items() if splits else []):
                self.row(unit, f"split{n}", f"green{n}-hp", sp["hp"], lp_unit=unit, lp_name=f"green{n}-lp",
                         lp_stream=sp["lp"], extra={"hp_sms": sp["hp_sms"], "lp_sms": sp["lp_sms"]})
            lead = 1.5 * unit_s[unit] + 0.001
            self.row(unit, "temporal", "main-hp", self.main_hp, window=1, mode="temporal", lead=lead,
                     extra={"lead_ms": lead * 1e3}, **common)
        self.summarise()

    def summarise(self):
        alone = {r["config"]: r.get("latency_ms") for r in self.rows if r["lp"] == "-"}
        lp_alone = {(r["lp"]): r.get("lp_units_per_s") for r in self.rows if r["config"] == "lp-alone"}
        for r in self.rows:
            lat = r.get("latency_ms")
            if lat:
                for base in ("hp-alone-cold", "hp-alone-warm"):
                    if alone.get(base):
                        s = row_stats(lat, alone[base])
                        r[f"vs_{base.split('-')[-1]}"] = {k: s[k] for k in ("p50_x", "p99_x")}
                s = row_stats([x / 1e3 for x in lat], None)
                r.update({k: s[k] for k in ("p50_ms", "p99_ms", "max_ms")})
            if r.get("lp_units_per_s") is not None and lp_alone.get(r["lp"]):
                r["lp_kept"] = r["lp_units_per_s"] / lp_alone[r["lp"]]


# ------------------------------------------------------------------ step 1: kernel shapes


def profile_kernels(torch, fn, warmup=3, reps=1):
    """Kernels of `reps` calls of fn after warm-up, from a Kineto trace: name, grid, block,
    registers, shared memory, duration."""
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    path = tempfile.mktemp(suffix=".json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        trace = json.load(f)
    os.unlink(path)
    ks = []
    for e in trace.get("traceEvents", []):
        if e.get("cat") != "kernel":
            continue
        a = e.get("args", {})
        grid = a.get("grid", [1, 1, 1])
        block = a.get("block", [1, 1, 1])
        threads = math.prod(block)
        regs = a.get("registers per thread", 0)
        smem = a.get("shared memory", 0)
        b, by = blocks_per_sm(threads, regs, smem)
        ks.append({
            "name": e.get("name", ""),
            "ts_us": e.get("ts"),
            "dur_us": e.get("dur"),
            "stream": a.get("stream"),
            "grid": grid,
            "block": block,
            "blocks": math.prod(grid),
            "threads_per_block": threads,
            "registers_per_thread": regs,
            "shared_memory": smem,
            "blocks_per_sm_limit": b,
            "limited_by": by,
            "warps_per_sm": a.get("warps per SM"),
            "est_achieved_occupancy_pct": a.get("est. achieved occupancy %"),
        })
    ks.sort(key=lambda k: k["ts_us"] or 0)
    return ks


def phase_shapes(args, out):
    import torch

    env_info(out)
    jobs = Jobs(args)
    res = {}

    def run(name, fn, note, reps=1, cudnn=False):
        torch.backends.cudnn.enabled = cudnn
        try:
            ks = profile_kernels(torch, fn, reps=reps)
            t = time.perf_counter()
            n = 3 if not args.quick else 1
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
            res[name] = {"note": note, "cudnn": cudnn, "reps": reps, "kernels": ks,
                         "wall_ms_per_call": (time.perf_counter() - t) / n * 1e3}
            log(f"{name}: {len(ks)} kernels, {sum(k['dur_us'] or 0 for k in ks) / reps / 1e3:.3f} ms of kernels per call")
        except Exception as e:  # noqa: BLE001
            res[name] = {"error": f"{type(e).__name__}: {e}"}
            log(traceback.format_exc())

    run("resnet18-b1", jobs.request, "ResNet-18 inference, batch 1, fp32, eager", cudnn=True)
    run("resnet18-b1-nocudnn", jobs.request, "ResNet-18 inference, batch 1, fp32, eager, cuDNN off (step 2's request)")
    run("resnet50-train-nocudnn", jobs.train_step,
        f"ResNet-50 training iteration, batch {args.train_batch}, fp32, SGD, cuDNN off (step 2's LP)")
    run("resnet50-train", jobs.train_step,
        f"ResNet-50 training iteration, batch {args.train_batch}, fp32, SGD, cuDNN on", cudnn=True)
    run("gemm", jobs.gemm, f"bf16 GEMM {args.gemm_n}^3", reps=3)
    run("bw", jobs.bw, f"fp32 elementwise add of {args.bw_elems} elements (3 x 4 B per element)", reps=3)
    run("llm-decode", jobs.decode, "decode step: 16 layers, d 2048, 16 heads, KV cache 512, bf16, batch 1")
    torch.backends.cudnn.enabled = False
    # The ceilings: a device-to-device copy, and the bandwidth loop's achieved rate.
    try:
        a = torch.empty(args.bw_elems, device="cuda")
        b = torch.empty_like(a)
        for _ in range(3):
            b.copy_(a)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(10):
            b.copy_(a)
        torch.cuda.synchronize()
        res["copy_bandwidth_gbs"] = 2 * a.numel() * 4 * 10 / (time.perf_counter() - t) / 1e9
        t = time.perf_counter()
        for _ in range(10):
            jobs.bw()
        torch.cuda.synchronize()
        res["bw_loop_gbs"] = jobs.bytes_estimate["bw"] * 10 / (time.perf_counter() - t) / 1e9
        log(f"copy {res['copy_bandwidth_gbs']:.0f} GB/s, bw loop {res['bw_loop_gbs']:.0f} GB/s")
    except Exception as e:  # noqa: BLE001
        res["bandwidth_error"] = str(e)
    res["bytes_estimate"] = jobs.bytes_estimate
    text = json.dumps(res, separators=(",", ":"))
    if len(text) > 12 << 20:
        import gzip

        with gzip.open(os.path.join(out, "shapes.json.gz"), "wt") as f:
            f.write(text)
    else:
        with open(os.path.join(out, "shapes.json"), "w") as f:
            f.write(text)


def phase_ncu_target(args):
    """One unit of `--workload` between cudaProfilerStart/Stop, after warm-up, eager."""
    import torch

    jobs = Jobs(args)
    torch.backends.cudnn.enabled = False
    fn = {"resnet18-b1-nocudnn": jobs.request, "resnet50-train-nocudnn": jobs.train_step, "gemm": jobs.gemm,
          "bw": jobs.bw, "llm-decode": jobs.decode}[args.workload]
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def env_info(out):
    import subprocess

    import torch

    p = torch.cuda.get_device_properties(0)
    info = {
        "gpu": p.name,
        "sms": p.multi_processor_count,
        "memory_gib": p.total_memory / 2**30,
        "l2_bytes": getattr(p, "L2_cache_size", None),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "argv": sys.argv,
    }
    try:
        info["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit,pstate",
             "--format=csv"], capture_output=True, text=True, timeout=20).stdout
    except Exception as e:  # noqa: BLE001
        info["nvidia_smi"] = str(e)
    with open(os.path.join(out, "env.json"), "w") as f:
        json.dump(info, f, indent=1)
    log(json.dumps({k: info[k] for k in ("gpu", "sms", "torch", "cuda", "cudnn")}))


def phase_coloc(args, out):
    import torch

    sys.setswitchinterval(1e-4)
    torch.backends.cudnn.enabled = False
    jobs = Jobs(args)
    sampler = Sampler()
    splits = None
    res = {"args": vars(args)}
    try:
        splits = GreenSplits(args.splits)
        res["green"] = {n: {"hp_sms": s["hp_sms"], "lp_sms": s["lp_sms"]} for n, s in splits.splits.items()}
        res["device_sms"] = splits.total
    except Exception as e:  # noqa: BLE001
        res["green_error"] = f"{type(e).__name__}: {e}"
        log(traceback.format_exc())
    if splits:
        try:
            st = {"main": torch.cuda.current_stream()}
            for n, s in splits.splits.items():
                st[f"green{n}-hp"] = s["hp"]
                st[f"green{n}-lp"] = s["lp"]
            res["smid_probe"] = smid_probe(st)
            log(f"smid probe: {res['smid_probe']}")
        except Exception as e:  # noqa: BLE001
            res["smid_probe_error"] = f"{type(e).__name__}: {e}"
            log(traceback.format_exc())
    c = Coloc(args, jobs, sampler)
    try:
        c.run(splits)
    finally:
        sampler.stop = True
        res["request_mode"] = c.graph_mode
        res["train_mode"] = c.train_mode
        res["events_ok"] = c.events_ok
        res["lp_unit_alone_s"] = getattr(c, "unit_s", None)
        res["arrivals_s"] = c.arrivals
        res["rows"] = c.rows
        with open(os.path.join(out, "coloc.json"), "w") as f:
            json.dump(res, f)
        cols = ["lp", "config", "p50_ms", "p99_ms", "max_ms", "lp_units_per_s", "lp_kept"]
        with open(os.path.join(out, "coloc.csv"), "w") as f:
            f.write(",".join(cols + ["p50_x_cold", "p99_x_cold", "p50_x_warm", "p99_x_warm", "sm_mhz_mean",
                                     "power_w_mean", "error"]) + "\n")
            for r in c.rows:
                vals = [r.get(k, "") for k in cols]
                for b in ("vs_cold", "vs_warm"):
                    v = r.get(b, {})
                    vals += [v.get("p50_x", ""), v.get("p99_x", "")]
                ck = r.get("clocks", {})
                vals += [ck.get("sm_mhz_mean", ""), ck.get("power_w_mean", ""), r.get("error", "")]
                f.write(",".join(str(v) for v in vals) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phase", choices=["shapes", "coloc", "ncu-target"], default=None)
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--self-test", action="store_true", help="check the pure helpers (no GPU, no PyTorch)")
    ap.add_argument("--quick", action="store_true", help="every code path with tiny counts")
    ap.add_argument("--workload", default="gemm")
    ap.add_argument("--rate", type=float, default=20.0, help="HP requests per second (Poisson)")
    ap.add_argument("--requests", type=int, default=200, help="HP requests per row")
    ap.add_argument("--row-max-s", type=float, default=14.0, help="a row stops issuing requests after this")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--train-batch", type=int, default=32)
    ap.add_argument("--gemm-n", type=int, default=8192)
    ap.add_argument("--bw-elems", type=int, default=1 << 28)
    ap.add_argument("--lp-kinds", default="train,gemm,bw")
    ap.add_argument("--splits", default="16,32,64")
    ap.add_argument("--lp-ahead", type=int, default=8, help="LP units in flight when unbounded")
    ap.add_argument("--train-ahead", type=int, default=2, help="training iterations in flight at most")
    ap.add_argument("--no-graphs", dest="graphs", action="store_false")
    ap.add_argument("--idle-s", type=float, default=3.0)
    ap.add_argument("--warm-s", type=float, default=3.0)
    ap.add_argument("--ramp-s", type=float, default=0.5)
    ap.add_argument("--lp-alone-s", type=float, default=3.0)
    args = ap.parse_args()
    args.lp_kinds = [k for k in args.lp_kinds.split(",") if k]
    args.splits = [int(x) for x in args.splits.split(",") if x]
    if args.self_test:
        self_test()
        return
    if args.quick:
        args.requests = min(args.requests, 12)
        args.row_max_s = 3.0
        args.train_batch = min(args.train_batch, 16)
        args.idle_s = args.warm_s = 0.5
        args.lp_alone_s = 0.5
        args.ramp_s = 0.1
    os.makedirs(args.out, exist_ok=True)
    if args.phase == "ncu-target":
        phase_ncu_target(args)
    elif args.phase == "shapes":
        phase_shapes(args, args.out)
    elif args.phase == "coloc":
        phase_coloc(args, args.out)
    else:
        ap.error("--phase or --self-test")


if __name__ == "__main__":
    main()
