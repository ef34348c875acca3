"""A latency-critical HP workload for `kfdq demo --hp-command` / `preempt-lab run`: ResNet-18
inference at batch 1, like the field's service (docs/field-reports.md), printing the line
format of docs/demo.md ("Your own workloads"). Needs ROCm PyTorch and torchvision on a node
with an AMD GPU (PyTorch calls the HIP device "cuda"). Not run in kfdq's CI: no GPU there.
"""

import os
import time

import torch
import torchvision


def main():
    requests = int(os.environ.get("KFDQ_DEMO_REQUESTS", "60"))
    gap = 1.0 / float(os.environ.get("KFDQ_DEMO_RATE", "15"))
    go = os.environ.get("KFDQ_DEMO_GO")
    model = torchvision.models.resnet18().eval().to("cuda")
    x = torch.randn(1, 3, 224, 224, device="cuda")
    with torch.no_grad():
        # Warm-up: kernels selected, the streams' queues created before the first timed request.
        for _ in range(20):
            model(x)
        torch.cuda.synchronize()
        print("ready", flush=True)
        while go and not os.path.exists(go):
            time.sleep(0.005)
        # time.monotonic() is CLOCK_MONOTONIC on Linux, the clock of the `window` line.
        start = time.monotonic()
        for i in range(requests):
            due = start + i * gap  # open loop: request i is due at start + i / rate
            now = time.monotonic()
            if now < due:
                time.sleep(due - now)
            t0 = time.monotonic()
            model(x)
            torch.cuda.synchronize()
            print(f"request {i} {(time.monotonic() - t0) * 1e6:.0f}", flush=True)
        print(f"window {start * 1e6:.0f} {time.monotonic() * 1e6:.0f}", flush=True)


if __name__ == "__main__":
    main()
