// A HIP program for the real ROCm runtime on kfd-emu: device query, streams with priorities,
// memory copies both ways (small and 64 MiB, verified byte for byte), kernel launches on the
// null stream and on created streams, synchronisation. Prints one "ok ..." line per step and
// "hip_check: ok" at the end; the first failure prints "FAIL ..." and exits 1.
//
//   hip_check          the checks, then exit
//   hip_check --hold   the checks, then "hip_check: holding" and wait for a line on stdin
//   hip_check --busy   the checks, then "hip_check: busy" and launch on all three streams,
//                      round after round, until a line (or EOF) arrives on stdin; prints
//                      "hip_check: rounds N" at the end
//
// The emulator runs no shader code: a kernel launch completes (its packet is consumed and its
// completion signal fires) but does not change memory. Copies move bytes.
#include <hip/hip_runtime.h>

#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(call)                                                                    \
    do {                                                                               \
        hipError_t e_ = (call);                                                        \
        if (e_ != hipSuccess) {                                                        \
            std::printf("FAIL %s: %s (%d)\n", #call, hipGetErrorString(e_), (int)e_);  \
            std::exit(1);                                                              \
        }                                                                              \
    } while (0)

__global__ void add_one(int* p, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1;
}

// Copies `bytes` of a pattern to the device and back and compares.
static void round_trip(size_t bytes, hipStream_t stream, const char* what) {
    std::vector<unsigned char> src(bytes), back(bytes, 0);
    for (size_t i = 0; i < bytes; i++) src[i] = (unsigned char)(i * 131 + bytes);
    void* dev = nullptr;
    CHECK(hipMalloc(&dev, bytes));
    CHECK(hipMemcpyAsync(dev, src.data(), bytes, hipMemcpyHostToDevice, stream));
    CHECK(hipMemcpyAsync(back.data(), dev, bytes, hipMemcpyDeviceToHost, stream));
    CHECK(hipStreamSynchronize(stream));
    if (std::memcmp(src.data(), back.data(), bytes) != 0) {
        size_t i = 0;
        while (src[i] == back[i]) i++;
        std::printf("FAIL %s: %zu-byte round trip differs at byte %zu (%u != %u)\n", what, bytes,
                    i, back[i], src[i]);
        std::exit(1);
    }
    CHECK(hipFree(dev));
    std::printf("ok memcpy %s %zu bytes both ways, verified\n", what, bytes);
}

// Whether a line (or EOF) is waiting on stdin.
static bool stdin_ready() {
    struct pollfd p = {0, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
}

int main(int argc, char** argv) {
    const bool hold = argc > 1 && std::strcmp(argv[1], "--hold") == 0;
    const bool busy = argc > 1 && std::strcmp(argv[1], "--busy") == 0;
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    int count = 0;
    CHECK(hipGetDeviceCount(&count));
    hipDeviceProp_t prop;
    CHECK(hipGetDeviceProperties(&prop, 0));
    std::printf("ok device count=%d name=\"%s\" arch=%s cus=%d\n", count, prop.name,
                prop.gcnArchName, prop.multiProcessorCount);

    int least = 0, greatest = 0;
    CHECK(hipDeviceGetStreamPriorityRange(&least, &greatest));
    hipStream_t high, low;
    CHECK(hipStreamCreateWithPriority(&high, hipStreamDefault, greatest));
    CHECK(hipStreamCreateWithPriority(&low, hipStreamDefault, least));
    int ph = 0, pl = 0;
    CHECK(hipStreamGetPriority(high, &ph));
    CHECK(hipStreamGetPriority(low, &pl));
    std::printf("ok streams priority range [%d, %d] high=%d low=%d\n", least, greatest, ph, pl);

    round_trip(4096, nullptr, "null-stream");
    round_trip(4096, high, "high-stream");
    round_trip(64 << 20, low, "low-stream");

    const size_t n = 1 << 16;
    int* d = nullptr;
    CHECK(hipMalloc(&d, n * sizeof(int)));
    CHECK(hipMemset(d, 0, n * sizeof(int)));
    const int launches = 8;
    for (int i = 0; i < launches; i++) {
        hipLaunchKernelGGL(add_one, dim3(n / 256), dim3(256), 0, nullptr, d, n);
        CHECK(hipGetLastError());
        hipLaunchKernelGGL(add_one, dim3(n / 256), dim3(256), 0, high, d, n);
        CHECK(hipGetLastError());
        hipLaunchKernelGGL(add_one, dim3(n / 256), dim3(256), 0, low, d, n);
        CHECK(hipGetLastError());
    }
    CHECK(hipStreamSynchronize(high));
    CHECK(hipStreamSynchronize(low));
    CHECK(hipDeviceSynchronize());
    std::printf("ok launches %d each on the null, high and low streams, synchronized\n", launches);
    std::printf("hip_check: ok\n");
    if (hold) {
        std::printf("hip_check: holding\n");
        char line[64];
        (void)!fgets(line, sizeof line, stdin);
    }
    if (busy) {
        std::printf("hip_check: busy\n");
        long rounds = 0;
        while (!stdin_ready()) {
            for (int i = 0; i < 4; i++) {
                hipLaunchKernelGGL(add_one, dim3(n / 256), dim3(256), 0, nullptr, d, n);
                hipLaunchKernelGGL(add_one, dim3(n / 256), dim3(256), 0, high, d, n);
                hipLaunchKernelGGL(add_one, dim3(n / 256), dim3(256), 0, low, d, n);
            }
            CHECK(hipGetLastError());
            CHECK(hipDeviceSynchronize());
            rounds++;
        }
        std::printf("hip_check: rounds %ld\n", rounds);
    }
    CHECK(hipFree(d));
    CHECK(hipStreamDestroy(high));
    CHECK(hipStreamDestroy(low));
    std::printf("hip_check: done\n");
    return 0;
}
