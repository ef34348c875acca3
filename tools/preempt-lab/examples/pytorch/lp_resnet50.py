"""A best-effort LP workload for `kfdq demo --lp-command` / `preempt-lab run`: a ResNet-50
training loop, like the field's batch job (docs/field-reports.md), printing the line format of
docs/demo.md ("Your own workloads"): `ready` after its first step, `done <t_us>` per training
step (CLOCK_MONOTONIC), and it stops once $KFDQ_DEMO_STOP exists. Needs ROCm PyTorch and
torchvision on a node with an AMD GPU. Not run in kfdq's CI: no GPU there.
"""

import os
import time

import torch
import torchvision


def main():
    batch = int(os.environ.get("LP_BATCH", "64"))
    stop = os.environ.get("KFDQ_DEMO_STOP")
    model = torchvision.models.resnet50().train().to("cuda")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    step = 0
    while not (stop and os.path.exists(stop)):
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        # A step counts when the GPU has finished it (training loops sync on the loss anyway).
        torch.cuda.synchronize()
        print(f"done {time.monotonic() * 1e6:.0f}", flush=True)
        if step == 0:
            print("ready", flush=True)
        step += 1


if __name__ == "__main__":
    main()
