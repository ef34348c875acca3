// kfdq bench's busy work (docs/hardware.md): one wave per work-group that sleeps `iterations`
// times. It counts iterations, not time, so a wave that is context-saved and restored ends that
// much later — the delay `kfdq bench` reads as a preempt's stall. The bench scales `iterations`
// from a run alone. Built by scripts/kernels.sh in the Debian sid root; the code objects next to
// this file are committed and checked against it (`scripts/kernels.sh --check`).
#include <hip/hip_runtime.h>

extern "C" __global__ void kfdq_spin(unsigned long long iterations) {
    for (unsigned long long i = 0; i < iterations; ++i) {
        __builtin_amdgcn_s_sleep(1);
    }
}
