#!/usr/bin/env python3
"""Turns colocate.py's raw results into preempt-lab trace files and the tables of
docs/experiments.md ("The model against an H100"). Plain Python, no GPU:

  to_traces.py traces RESULTS_DIR TRACES_DIR   write h100-*.csv trace files
  to_traces.py table RESULTS_DIR               print the co-location table (markdown)
  to_traces.py --self-test

A trace line is one kernel: `workgroups` (its blocks), `waves_per_wg` (its wave-slot footprint
on an SM in units of 64 threads: its own threads, or more where registers or shared memory let
fewer blocks share an SM; an H100 SM has 2048 threads = 32 such slots), `wg_us` (the time of one
block alone on an SM), `stream`, `barrier` (the last kernel of a request or iteration), then
`cu_util` (the share of an SM's issue rate one block uses: ncu's SM throughput over the blocks
that ran at once) and `dram_bytes` (DRAM bytes per block: ncu's read + write over the blocks).
Kernels ncu did not profile (the training iteration beyond its first 400) take the mean rate
and SM share of kernels of the same name, else of all profiled kernels: named estimates.
"""

import csv
import gzip
import io
import json
import math
import os
import sys

SMS = 132
SLOTS = 32  # 64-thread slots per SM: 2048 threads
UNITS = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "ns": 1e-3, "us": 1.0, "usecond": 1.0,
         "ms": 1e3, "msecond": 1e3, "nsecond": 1e-3, "%": 1.0, "block": 1.0, "": 1.0}

# Workload -> (trace file, what it is). The co-location rows use the cuDNN-off ones.
TRACES = {
    "resnet18-b1-nocudnn": ("h100-resnet18-b1.csv", "ResNet-18 inference, batch 1, fp32, cuDNN off"),
    "resnet18-b1": ("h100-resnet18-b1-cudnn.csv", "ResNet-18 inference, batch 1, fp32, cuDNN on"),
    "resnet50-train-nocudnn": ("h100-resnet50-train.csv", "one ResNet-50 training iteration, batch 32, fp32, cuDNN off"),
    "resnet50-train": ("h100-resnet50-train-cudnn.csv", "one ResNet-50 training iteration, batch 32, fp32, cuDNN on"),
    "gemm": ("h100-gemm.csv", "one bf16 GEMM 8192^3 (cuBLAS)"),
    "bw": ("h100-bw.csv", "one fp32 elementwise add of 2^28 elements (3 x 1 GiB moved)"),
    "llm-decode": ("h100-llm-decode.csv", "one decode step of a 16-layer, d 2048 transformer, bf16, batch 1"),
}


def key(name):
    """A kernel's function name without namespaces, template or argument lists: the profiler
    and ncu spell the rest differently."""
    n = name.removeprefix("void ")
    for stop in "<(":
        n = n.split(stop, 1)[0]
    return n.rsplit("::", 1)[-1].strip()


def footprint(k):
    """Wave-slot footprint of one block (64-thread units) so that the model fits as many blocks
    on an SM as the kernel's occupancy limit allows."""
    own = max(1, math.ceil(k["threads_per_block"] / 64))
    b = max(1, k["blocks_per_sm_limit"])
    return min(SLOTS, max(own, SLOTS // b))


def first_round(blocks, f):
    """Blocks of a kernel that run at once on an idle H100, and their mean number per SM as the
    model places them (the first round's CUs share)."""
    cap = SLOTS // f
    live = min(blocks, SMS * cap)
    q, r = divmod(live, SMS)
    per_sm = (r * (q + 1) ** 2 + (SMS - r) * q * q) / live
    rounds = math.ceil(blocks / (SMS * cap))
    return live, per_sm, rounds


def read_ncu(path):
    """ncu.csv (sections "### workload"): per workload, per kernel: name, duration us, DRAM
    bytes, SM throughput fraction."""
    out = {}
    if not os.path.exists(path):
        return out
    for sec in open(path).read().split("### ")[1:]:
        name, body = sec.split("\n", 1)
        rows = list(csv.reader(io.StringIO(body)))
        rows = [r for r in rows if r]
        if len(rows) < 3:
            continue
        h, units = rows[0], rows[1]

        def val(r, k):
            i = h.index(k)
            return float(r[i].replace(",", "")) * UNITS.get(units[i], 1.0)

        out[name.strip()] = [{
            "name": r[h.index("Kernel Name")],
            "us": val(r, "gpu__time_duration.sum"),
            "bytes": val(r, "dram__bytes_read.sum") + val(r, "dram__bytes_write.sum"),
            "sm": val(r, "sm__throughput.avg.pct_of_peak_sustained_elapsed") / 100,
        } for r in rows[2:]]
    return out


def load(results):
    p = os.path.join(results, "shapes.json")
    if os.path.exists(p):
        return json.load(open(p))
    return json.load(gzip.open(p + ".gz", "rt"))


def kernels_for(shapes, ncu, w):
    """The kernels of one call of workload w with their model fields."""
    s = shapes[w]
    ks = s["kernels"]
    reps = s.get("reps", 1)
    if reps > 1:  # one call's kernels, each timed as the median of the repetitions
        n = len(ks) // reps
        calls = [ks[i * n:(i + 1) * n] for i in range(reps)]
        ks = [dict(calls[0][j], dur_us=sorted(c[j]["dur_us"] for c in calls)[reps // 2]) for j in range(n)]
    prof = ncu.get(w.replace("-cudnn", ""), [])
    matched = len(prof) >= len(ks) and all(key(p["name"]) == key(k["name"]) for p, k in zip(prof, ks))
    by_name = {}
    for p in prof:
        by_name.setdefault(key(p["name"]), []).append(p)
    all_rate = sum(p["bytes"] for p in prof) / max(1e-9, sum(p["us"] for p in prof)) if prof else 0.0
    all_sm = sum(p["sm"] for p in prof) / len(prof) if prof else 0.0
    out = []
    for i, k in enumerate(ks):
        f = footprint(k)
        live, per_sm, rounds = first_round(k["blocks"], f)
        if matched or (i < len(prof) and key(prof[i]["name"]) == key(k["name"])):
            p = prof[i]
            nbytes, sm, src = p["bytes"], p["sm"], "ncu"
        elif key(k["name"]) in by_name:
            same = by_name[key(k["name"])]
            rate = sum(p["bytes"] for p in same) / max(1e-9, sum(p["us"] for p in same))
            nbytes, sm, src = rate * k["dur_us"], sum(p["sm"] for p in same) / len(same), "ncu-name"
        elif prof:
            nbytes, sm, src = all_rate * k["dur_us"], all_sm, "ncu-mean"
        else:
            nbytes, sm, src = 0.0, 0.0, "none"
        # One block's share of its SM: the SM throughput over the SMs the first round used,
        # spread over the blocks each of them held.
        used_sms = min(SMS, live)
        util = min(1.0, sm * SMS / used_sms / max(1.0, per_sm))
        per_round = k["dur_us"] / rounds
        wg_us = per_round / max(1.0, per_sm * util)
        out.append({
            "workgroups": k["blocks"],
            "waves_per_wg": f,
            "wg_us": max(wg_us, 0.001),
            "cu_util": util,
            "dram_bytes": nbytes / k["blocks"],
            "src": src,
            "name": k["name"],
        })
    return out, matched


def write_traces(results, traces_dir):
    shapes = load(results)
    ncu = read_ncu(os.path.join(results, "ncu.csv"))
    env = json.load(open(os.path.join(results, "env.json")))
    for w, (fname, what) in TRACES.items():
        if w not in shapes or "kernels" not in shapes[w]:
            continue
        ks, matched = kernels_for(shapes, ncu, w)
        srcs = {s: sum(1 for k in ks if k["src"] == s) for s in ("ncu", "ncu-name", "ncu-mean", "none")}
        with open(os.path.join(traces_dir, fname), "w") as f:
            f.write(f"# preempt-lab trace (docs/experiments.md, \"The model against an H100\"): {what}.\n")
            f.write(f"# Measured on {env['gpu']} ({env['sms']} SMs), PyTorch {env['torch']}, CUDA {env['cuda']}, by\n")
            f.write("# tools/preempt-lab/real-gpu/run.sh profile; written by to_traces.py traces (kernel order kept).\n")
            f.write(f"# {len(ks)} kernels, {sum(k['wg_us'] for k in ks):.0f} us of block time; DRAM bytes and SM share: "
                    f"{srcs['ncu']} from ncu, {srcs['ncu-name']} by kernel name, {srcs['ncu-mean']} by the mean (estimates),\n"
                    f"# {srcs['none']} not measured (0: ncu did not profile this workload).\n")
            f.write("workgroups,waves_per_wg,wg_us,stream,barrier,cu_util,dram_bytes\n")
            for i, k in enumerate(ks):
                last = int(i == len(ks) - 1)
                f.write(f"{k['workgroups']},{k['waves_per_wg']},{k['wg_us']:.4f},0,{last},"
                        f"{k['cu_util']:.4f},{k['dram_bytes']:.0f}\n")
        print(f"{fname}: {len(ks)} kernels ({srcs})")


def nearest_rank(xs, q):
    s = sorted(xs)
    return s[max(1, math.ceil(q * len(s))) - 1]


def table(results):
    d = json.load(open(os.path.join(results, "coloc.json")))
    rows = d["rows"]
    alone = {r["config"]: r["latency_ms"] for r in rows if r["lp"] == "-"}
    lp_alone = {r["lp"]: r["lp_units_per_s"] for r in rows if r["config"] == "lp-alone"}
    cold = alone["hp-alone-cold"]
    print("| LP | config | HP P50 ms | HP P99 ms | P50 x | P99 x | LP /s | LP kept | SM MHz | W |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lat = r.get("latency_ms")
        c = r.get("clocks", {})
        cells = [r["lp"], r["config"]]
        if lat:
            p50, p99 = nearest_rank(lat, 0.5), nearest_rank(lat, 0.99)
            n = f" ({len(lat)} req.)" if len(lat) < d["args"]["requests"] else ""
            cells += [f"{p50:.2f}", f"{p99:.2f}{n}", f"{p50 / nearest_rank(cold, 0.5):.2f}",
                      f"{p99 / nearest_rank(cold, 0.99):.2f}"]
        else:
            cells += ["", "", "", ""]
        lp = r.get("lp_units_per_s")
        cells += [f"{lp:.1f}" if lp else "", f"{lp / lp_alone[r['lp']]:.2f}" if lp and r["lp"] in lp_alone else ""]
        cells += [f"{c.get('sm_mhz_mean', 0):.0f}", f"{c.get('power_w_mean', 0):.0f}"]
        print("| " + " | ".join(cells) + " |")


def self_test():
    assert key("void at::native::im2col_kernel<float>(long)") == key("void at::im2col_kernel<float>(long, T1 *)")
    assert key("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT") == "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"
    assert footprint({"threads_per_block": 256, "blocks_per_sm_limit": 8}) == 4
    assert footprint({"threads_per_block": 384, "blocks_per_sm_limit": 1}) == 32
    assert footprint({"threads_per_block": 128, "blocks_per_sm_limit": 3}) == 10
    live, per_sm, rounds = first_round(200, 4)
    assert (live, rounds) == (200, 1) and abs(per_sm - (68 * 4 + 64) / 200) < 1e-9
    assert first_round(132 * 8 * 3, 4)[2] == 3
    print("self-test: ok")


if __name__ == "__main__":
    a = sys.argv[1:]
    if a == ["--self-test"]:
        self_test()
    elif len(a) == 3 and a[0] == "traces":
        write_traces(a[1], a[2])
    elif len(a) == 2 and a[0] == "table":
        table(a[1])
    else:
        sys.exit(__doc__)
