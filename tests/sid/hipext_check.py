"""Imports the hipext extension (HIP, real runtime) and prints what it computes: the device,
then a null-stream round trip of 1 Mi floats. With --hold it then waits for a line on stdin."""
import sys

import hipext

print("device", *hipext.device(), flush=True)
launches, checksum = hipext.roundtrip(1 << 20)
print(f"roundtrip launches={launches} checksum={checksum:.1f}", flush=True)
if "--hold" in sys.argv:
    print("hipext: holding", flush=True)
    sys.stdin.readline()
print("hipext: done", flush=True)
