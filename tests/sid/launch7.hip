// A HIP 7.2 program that launches through one of HIP 7's launch paths only (issue 52): built by
// hipcc 7.2.4 in the ROCm 7.2 root, run on kfd-emu under the shim by shim/tests/sid7_launch.rs.
//
//   launch7 PATH          one launch through PATH on a created stream, synchronized, then exit
//   launch7 PATH --busy   "launch7: busy", then launches through PATH on the created stream,
//                         round after round (4 launches, then hipStreamSynchronize), until a line
//                         (or EOF) arrives on stdin; "launch7: rounds N" at the end
//   launch7 PATH --hold   the one launch, then "launch7: holding" and wait for a line on stdin
//
// PATH: ex            the C++ template hipLaunchKernelEx (compiles to hipLaunchKernelExC)
//       drv-ex        hipDrvLaunchKernelEx with the hipFunction_t of the program's kernel
//       module        hipModuleLaunchKernel of kfdq_spin in the committed code object
//                     spin-gfx942.co (kernels/), loaded with hipModuleLoad
//       graph         hipGraphLaunch of a graph captured from the stream (one kernel)
//       entry-point   hipModuleLaunchKernel through the pointer hipGetDriverEntryPoint hands out
//       shared        hipLaunchKernel on the created stream and on the null stream in turn
//                     (two normal-priority streams: under HIP's dynamic queues with one
//                     hardware queue per priority they share one queue)
//       escape        no launch: hipMemset, hipDeviceSynchronize, then the synchronous
//                     hipMemcpyHtoD (4 KiB, a blit kernel on the null stream's queue), which
//                     the shim does not wrap
//
// Prints "ok ..." per step; the first failure prints "FAIL ..." and exits 1.
#include <hip/hip_runtime.h>

#include <poll.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

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

typedef hipError_t (*ModuleLaunch)(hipFunction_t, unsigned, unsigned, unsigned, unsigned,
                                   unsigned, unsigned, unsigned, hipStream_t, void**, void**);

static bool stdin_ready() {
    struct pollfd p = {0, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
}

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    if (argc < 2) {
        std::printf("FAIL usage: launch7 PATH [--busy]\n");
        return 1;
    }
    const char* path = argv[1];
    const bool busy = argc > 2 && std::strcmp(argv[2], "--busy") == 0;
    const bool hold = argc > 2 && std::strcmp(argv[2], "--hold") == 0;
    int version = 0;
    CHECK(hipRuntimeGetVersion(&version));
    std::printf("ok runtime %d\n", version);

    hipStream_t s;
    CHECK(hipStreamCreate(&s));
    const size_t n = 1 << 12;
    int* d = nullptr;
    CHECK(hipMalloc(&d, n * sizeof(int)));
    void* args[] = {&d, (void*)&n};

    hipFunction_t f = nullptr;
    unsigned long long iterations = 1;
    void* spin_args[] = {&iterations};
    ModuleLaunch launch_ptr = nullptr;
    hipGraphExec_t exec = nullptr;
    hipLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(n / 256);
    cfg.blockDim = dim3(256);
    cfg.stream = s;
    HIP_LAUNCH_CONFIG dcfg = {};
    dcfg.gridDimX = n / 256;
    dcfg.gridDimY = dcfg.gridDimZ = 1;
    dcfg.blockDimX = 256;
    dcfg.blockDimY = dcfg.blockDimZ = 1;
    dcfg.hStream = s;

    if (std::strcmp(path, "drv-ex") == 0) {
        CHECK(hipGetFuncBySymbol(&f, reinterpret_cast<const void*>(add_one)));
    } else if (std::strcmp(path, "module") == 0 || std::strcmp(path, "entry-point") == 0) {
        hipModule_t m;
        CHECK(hipModuleLoad(&m, "spin-gfx942.co"));
        CHECK(hipModuleGetFunction(&f, m, "kfdq_spin"));
        if (std::strcmp(path, "entry-point") == 0) {
            void* p = nullptr;
            hipDriverEntryPointQueryResult status;
            CHECK(hipGetDriverEntryPoint("hipModuleLaunchKernel", &p, hipEnableDefault, &status));
            if (p == nullptr || status != hipDriverEntryPointSuccess) {
                std::printf("FAIL hipGetDriverEntryPoint(hipModuleLaunchKernel): status %d\n",
                            (int)status);
                return 1;
            }
            launch_ptr = reinterpret_cast<ModuleLaunch>(p);
        }
    } else if (std::strcmp(path, "graph") == 0) {
        hipGraph_t g;
        CHECK(hipStreamBeginCapture(s, hipStreamCaptureModeGlobal));
        hipLaunchKernelGGL(add_one, dim3(n / 256), dim3(256), 0, s, d, n);
        CHECK(hipStreamEndCapture(s, &g));
        CHECK(hipGraphInstantiate(&exec, g, nullptr, nullptr, 0));
    } else if (std::strcmp(path, "ex") != 0 && std::strcmp(path, "escape") != 0 &&
               std::strcmp(path, "shared") != 0) {
        std::printf("FAIL unknown path %s\n", path);
        return 1;
    }

    auto once = [&]() {
        if (std::strcmp(path, "ex") == 0) {
            CHECK(hipLaunchKernelEx(&cfg, add_one, d, n));
        } else if (std::strcmp(path, "drv-ex") == 0) {
            CHECK(hipDrvLaunchKernelEx(&dcfg, f, args, nullptr));
        } else if (std::strcmp(path, "module") == 0) {
            CHECK(hipModuleLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, s, spin_args, nullptr));
        } else if (std::strcmp(path, "entry-point") == 0) {
            CHECK(launch_ptr(f, 1, 1, 1, 64, 1, 1, 0, s, spin_args, nullptr));
        } else if (std::strcmp(path, "shared") == 0) {
            hipLaunchKernelGGL(add_one, dim3(n / 256), dim3(256), 0, s, d, n);
            CHECK(hipGetLastError());
            hipLaunchKernelGGL(add_one, dim3(n / 256), dim3(256), 0, nullptr, d, n);
            CHECK(hipGetLastError());
        } else if (std::strcmp(path, "escape") == 0) {
            static int host[1024];
            CHECK(hipMemset(d, 0, n * sizeof(int)));
            CHECK(hipDeviceSynchronize());
            CHECK(hipMemcpyHtoD(reinterpret_cast<hipDeviceptr_t>(d), host, sizeof host));
        } else {
            CHECK(hipGraphLaunch(exec, s));
        }
    };
    once();
    CHECK(hipStreamSynchronize(s));
    std::printf("ok launch %s\n", path);
    if (hold) {
        std::printf("launch7: holding\n");
        char line[64];
        (void)!fgets(line, sizeof line, stdin);
    }
    if (busy) {
        std::printf("launch7: busy\n");
        long rounds = 0;
        while (!stdin_ready()) {
            for (int i = 0; i < 4; i++) once();
            CHECK(hipStreamSynchronize(s));
            rounds++;
        }
        std::printf("launch7: rounds %ld\n", rounds);
    }
    CHECK(hipFree(d));
    CHECK(hipStreamDestroy(s));
    std::printf("launch7: done\n");
    return 0;
}
