#!/usr/bin/env python3
"""Round trip of AMDKFD_IOC_GET_VERSION on <mount>/dev/kfd: ioctl_rt.py MOUNT CALLS (docs/performance.md)."""
import fcntl, os, sys, time
fd = os.open(sys.argv[1] + "/dev/kfd", os.O_RDWR)
buf = bytearray(8)
n = int(sys.argv[2])
for _ in range(500): fcntl.ioctl(fd, 0x80084b01, buf)
ts = []
for _ in range(n):
    t = time.perf_counter_ns(); fcntl.ioctl(fd, 0x80084b01, buf); ts.append(time.perf_counter_ns() - t)
ts.sort()
print(f"median {ts[n//2]/1000:.1f} us  p90 {ts[n*9//10]/1000:.1f} us  p99 {ts[n*99//100]/1000:.1f} us")
