/* The ROCm math libraries PyTorch reaches, driven as PyTorch drives them, on the real runtime:
 * rocBLAS (handle, SGEMM and HGEMM on the null stream and on a created stream), hipBLAS (handle,
 * SGEMM and HGEMM), hipBLASLt (handle, a matmul with its heuristic), MIOpen (handle, convolution
 * forward with its find step), then everything destroyed. Every library status is printed as
 * "status <step> <value>", so that a run under the shim can be compared line by line with a run
 * without it. Kernels do not execute on kfd-emu: results are not checked.
 *
 *   libs_check [--only rocblas|hipblas|hipblaslt|miopen] [--loop N] [--threads N]
 *              [--pause STEP] [--hold]
 *
 * --loop N     N GEMMs (rocBLAS SGEMM on the created stream) instead of one.
 * --threads N  N threads each run the workload with their own handles and streams.
 * --pause STEP print "libs_check: paused STEP" and wait for a line on stdin before STEP (create:
 *              before the first handle is created; gemm: before the GEMM loop); with several
 *              threads all of them wait there.
 * --hold       print "libs_check: holding" after the work, before anything is destroyed, and
 *              wait for a line on stdin.
 *
 * C-style C++ (hipblaslt.h is a C++ header), built with the root's hipcc; also built as a
 * CPython extension (libsext.cpp includes this file with LIBS_CHECK_NO_MAIN), so that the
 * libraries are reached from a module Python loads RTLD_LOCAL, as PyTorch's are.
 */
#define __HIP_PLATFORM_AMD__ 1
#include <hip/hip_runtime_api.h>
#include <hipblas/hipblas.h>
#include <hipblaslt/hipblaslt.h>
#include <miopen/miopen.h>
#include <pthread.h>
#include <rocblas/rocblas.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 128

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static int n_threads = 1;

/* One output line; with several threads each line carries the thread's index. */
static void say(int t, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&out_lock);
    if (n_threads > 1)
        printf("[%d] ", t);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
    pthread_mutex_unlock(&out_lock);
}

/* A control line (what the tests wait for), never prefixed. */
static void control(const char *line)
{
    pthread_mutex_lock(&out_lock);
    printf("%s\n", line);
    fflush(stdout);
    pthread_mutex_unlock(&out_lock);
}

static void wait_stdin(void)
{
    char line[64];
    if (!fgets(line, sizeof line, stdin)) {
        /* end of input: go on */
    }
}

/* --pause: every thread stops at the step; thread 0 prints the line and reads stdin, then
 * lets them all go. */
static pthread_mutex_t pause_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pause_cond = PTHREAD_COND_INITIALIZER;
static int pause_released = 0;

static void pause_at(int t, const char *line)
{
    if (t == 0) {
        control(line);
        wait_stdin();
        pthread_mutex_lock(&pause_lock);
        pause_released = 1;
        pthread_cond_broadcast(&pause_cond);
        pthread_mutex_unlock(&pause_lock);
        return;
    }
    pthread_mutex_lock(&pause_lock);
    while (!pause_released)
        pthread_cond_wait(&pause_cond, &pause_lock);
    pthread_mutex_unlock(&pause_lock);
}

struct opts {
    const char *only;
    int loop;
    const char *pause;
    int hold;
};

static int want(const struct opts *o, const char *lib)
{
    return o->only == NULL || strcmp(o->only, lib) == 0;
}

#define HIP(t, step, call)                                                                     \
    do {                                                                                       \
        hipError_t e_ = (call);                                                                \
        say(t, "status %s %d", step, (int)e_);                                                 \
        if (e_ != hipSuccess) {                                                                \
            say(t, "FAIL %s: %s", step, hipGetErrorString(e_));                                \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

/* A library status: printed, and the run stops at the first failure. */
#define LIB(t, step, call, ok)                                                                 \
    do {                                                                                       \
        int s_ = (int)(call);                                                                  \
        say(t, "status %s %d", step, s_);                                                      \
        if (s_ != (ok)) {                                                                      \
            say(t, "FAIL %s: status %d", step, s_);                                            \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

/* The whole workload of one thread (index t); returns 0 when every status was the expected one. */
static int workload(int t, const struct opts *o)
{
    float *a, *b, *c;
    uint16_t *ha, *hb, *hc;
    hipStream_t s;
    float one = 1.0f, zero = 0.0f;
    uint16_t hone = 0x3c00, hzero = 0;
    rocblas_handle rh = NULL;
    hipblasHandle_t bh = NULL;
    hipblasLtHandle_t lh = NULL;
    miopenHandle_t mh = NULL;
    int i;

    HIP(t, "hipSetDevice", hipSetDevice(0));
    HIP(t, "hipMalloc", hipMalloc((void **)&a, N * N * sizeof(float)));
    HIP(t, "hipMalloc", hipMalloc((void **)&b, N * N * sizeof(float)));
    HIP(t, "hipMalloc", hipMalloc((void **)&c, N * N * sizeof(float)));
    HIP(t, "hipMalloc", hipMalloc((void **)&ha, N * N * 2));
    HIP(t, "hipMalloc", hipMalloc((void **)&hb, N * N * 2));
    HIP(t, "hipMalloc", hipMalloc((void **)&hc, N * N * 2));
    HIP(t, "hipMemset", hipMemset(a, 0, N * N * sizeof(float)));
    HIP(t, "hipMemset", hipMemset(b, 0, N * N * sizeof(float)));
    HIP(t, "hipStreamCreate", hipStreamCreate(&s));
    if (o->pause && strcmp(o->pause, "create") == 0)
        pause_at(t, "libs_check: paused create");

    if (want(o, "rocblas")) {
        LIB(t, "rocblas_create_handle", rocblas_create_handle(&rh), rocblas_status_success);
        LIB(t, "rocblas_sgemm_null",
            rocblas_sgemm(rh, rocblas_operation_none, rocblas_operation_none, N, N, N, &one, a, N,
                          b, N, &zero, c, N),
            rocblas_status_success);
        LIB(t, "rocblas_hgemm_null",
            rocblas_hgemm(rh, rocblas_operation_none, rocblas_operation_none, N, N, N,
                          (const rocblas_half *)&hone, (const rocblas_half *)ha, N,
                          (const rocblas_half *)hb, N, (const rocblas_half *)&hzero,
                          (rocblas_half *)hc, N),
            rocblas_status_success);
        HIP(t, "hipDeviceSynchronize", hipDeviceSynchronize());
        LIB(t, "rocblas_set_stream", rocblas_set_stream(rh, s), rocblas_status_success);
        if (o->pause && strcmp(o->pause, "gemm") == 0)
            pause_at(t, "libs_check: paused gemm");
        for (i = 0; i < o->loop; i++) {
            rocblas_status st = rocblas_sgemm(rh, rocblas_operation_none, rocblas_operation_none,
                                              N, N, N, &one, a, N, b, N, &zero, c, N);
            if (st != rocblas_status_success) {
                say(t, "FAIL rocblas_sgemm_stream %d: status %d", i, (int)st);
                return 1;
            }
        }
        say(t, "status rocblas_sgemm_stream x%d 0", o->loop);
        LIB(t, "rocblas_hgemm_stream",
            rocblas_hgemm(rh, rocblas_operation_none, rocblas_operation_none, N, N, N,
                          (const rocblas_half *)&hone, (const rocblas_half *)ha, N,
                          (const rocblas_half *)hb, N, (const rocblas_half *)&hzero,
                          (rocblas_half *)hc, N),
            rocblas_status_success);
        HIP(t, "hipStreamSynchronize", hipStreamSynchronize(s));
    }

    if (want(o, "hipblas")) {
        LIB(t, "hipblasCreate", hipblasCreate(&bh), HIPBLAS_STATUS_SUCCESS);
        LIB(t, "hipblasSgemm_null",
            hipblasSgemm(bh, HIPBLAS_OP_N, HIPBLAS_OP_N, N, N, N, &one, a, N, b, N, &zero, c, N),
            HIPBLAS_STATUS_SUCCESS);
        LIB(t, "hipblasSetStream", hipblasSetStream(bh, s), HIPBLAS_STATUS_SUCCESS);
        LIB(t, "hipblasSgemm_stream",
            hipblasSgemm(bh, HIPBLAS_OP_N, HIPBLAS_OP_N, N, N, N, &one, a, N, b, N, &zero, c, N),
            HIPBLAS_STATUS_SUCCESS);
        LIB(t, "hipblasHgemm_stream",
            hipblasHgemm(bh, HIPBLAS_OP_N, HIPBLAS_OP_N, N, N, N, (const hipblasHalf *)&hone,
                         (const hipblasHalf *)ha, N, (const hipblasHalf *)hb, N,
                         (const hipblasHalf *)&hzero, (hipblasHalf *)hc, N),
            HIPBLAS_STATUS_SUCCESS);
        HIP(t, "hipStreamSynchronize", hipStreamSynchronize(s));
    }

    if (want(o, "hipblaslt")) {
        hipblasLtMatmulDesc_t md;
        hipblasLtMatrixLayout_t la, lb, lc;
        hipblasLtMatmulPreference_t pref;
        hipblasLtMatmulHeuristicResult_t heur[4];
        int found = 0;
        size_t ws_size = 1 << 20;
        void *ws;
        HIP(t, "hipMalloc", hipMalloc(&ws, ws_size));
        LIB(t, "hipblasLtCreate", hipblasLtCreate(&lh), HIPBLAS_STATUS_SUCCESS);
        LIB(t, "hipblasLtMatmulDescCreate",
            hipblasLtMatmulDescCreate(&md, HIPBLAS_COMPUTE_32F, HIP_R_32F),
            HIPBLAS_STATUS_SUCCESS);
        LIB(t, "hipblasLtMatrixLayoutCreate",
            hipblasLtMatrixLayoutCreate(&la, HIP_R_32F, N, N, N), HIPBLAS_STATUS_SUCCESS);
        LIB(t, "hipblasLtMatrixLayoutCreate",
            hipblasLtMatrixLayoutCreate(&lb, HIP_R_32F, N, N, N), HIPBLAS_STATUS_SUCCESS);
        LIB(t, "hipblasLtMatrixLayoutCreate",
            hipblasLtMatrixLayoutCreate(&lc, HIP_R_32F, N, N, N), HIPBLAS_STATUS_SUCCESS);
        LIB(t, "hipblasLtMatmulPreferenceCreate", hipblasLtMatmulPreferenceCreate(&pref),
            HIPBLAS_STATUS_SUCCESS);
        LIB(t, "hipblasLtMatmulPreferenceSetAttribute",
            hipblasLtMatmulPreferenceSetAttribute(pref,
                                                  HIPBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &ws_size, sizeof ws_size),
            HIPBLAS_STATUS_SUCCESS);
        LIB(t, "hipblasLtMatmulAlgoGetHeuristic",
            hipblasLtMatmulAlgoGetHeuristic(lh, md, la, lb, lc, lc, pref, 4, heur, &found),
            HIPBLAS_STATUS_SUCCESS);
        say(t, "hipblaslt: %s", found > 0 ? "algorithms found" : "no algorithm");
        if (found == 0) {
            say(t, "FAIL hipblasLtMatmulAlgoGetHeuristic found none");
            return 1;
        }
        LIB(t, "hipblasLtMatmul",
            hipblasLtMatmul(lh, md, &one, a, la, b, lb, &zero, c, lc, c, lc, &heur[0].algo, ws,
                            ws_size, s),
            HIPBLAS_STATUS_SUCCESS);
        HIP(t, "hipStreamSynchronize", hipStreamSynchronize(s));
        LIB(t, "hipblasLtMatmulPreferenceDestroy", hipblasLtMatmulPreferenceDestroy(pref),
            HIPBLAS_STATUS_SUCCESS);
        LIB(t, "hipblasLtMatrixLayoutDestroy", hipblasLtMatrixLayoutDestroy(la),
            HIPBLAS_STATUS_SUCCESS);
        LIB(t, "hipblasLtMatrixLayoutDestroy", hipblasLtMatrixLayoutDestroy(lb),
            HIPBLAS_STATUS_SUCCESS);
        LIB(t, "hipblasLtMatrixLayoutDestroy", hipblasLtMatrixLayoutDestroy(lc),
            HIPBLAS_STATUS_SUCCESS);
        LIB(t, "hipblasLtMatmulDescDestroy", hipblasLtMatmulDescDestroy(md),
            HIPBLAS_STATUS_SUCCESS);
        HIP(t, "hipFree", hipFree(ws));
    }

    if (want(o, "miopen")) {
        /* A 1x1 convolution: Debian's MIOpen 6.4.3 cannot build the kernels of the other
         * solvers at run time (its HIP kernels fail to compile: `-isystem /usr/include` hides
         * math.h from libstdc++'s <cmath>; its OpenCL compiler is the build tree's clang-21
         * path), so find succeeds only through the rocBLAS GEMM solver, which 1x1 reaches
         * without an im2col kernel (the test disables the other solver families). */
        miopenTensorDescriptor_t xd, wd, yd;
        miopenConvolutionDescriptor_t cd;
        miopenConvAlgoPerf_t perf[4];
        int found = 0, on, oc, oh, ow;
        size_t ws_size = 0;
        void *ws = NULL, *x, *w, *y;
        /* PyTorch's order: a handle of its own (MIOpen creates a stream for it), then the
         * caller's stream set on it. */
        LIB(t, "miopenCreate", miopenCreate(&mh), miopenStatusSuccess);
        LIB(t, "miopenSetStream", miopenSetStream(mh, s), miopenStatusSuccess);
        LIB(t, "miopenCreateTensorDescriptor", miopenCreateTensorDescriptor(&xd),
            miopenStatusSuccess);
        LIB(t, "miopenCreateTensorDescriptor", miopenCreateTensorDescriptor(&wd),
            miopenStatusSuccess);
        LIB(t, "miopenCreateTensorDescriptor", miopenCreateTensorDescriptor(&yd),
            miopenStatusSuccess);
        LIB(t, "miopenSet4dTensorDescriptor",
            miopenSet4dTensorDescriptor(xd, miopenFloat, 1, 8, 16, 16), miopenStatusSuccess);
        LIB(t, "miopenSet4dTensorDescriptor",
            miopenSet4dTensorDescriptor(wd, miopenFloat, 8, 8, 1, 1), miopenStatusSuccess);
        LIB(t, "miopenCreateConvolutionDescriptor", miopenCreateConvolutionDescriptor(&cd),
            miopenStatusSuccess);
        LIB(t, "miopenInitConvolutionDescriptor",
            miopenInitConvolutionDescriptor(cd, miopenConvolution, 0, 0, 1, 1, 1, 1),
            miopenStatusSuccess);
        LIB(t, "miopenGetConvolutionForwardOutputDim",
            miopenGetConvolutionForwardOutputDim(cd, xd, wd, &on, &oc, &oh, &ow),
            miopenStatusSuccess);
        LIB(t, "miopenSet4dTensorDescriptor",
            miopenSet4dTensorDescriptor(yd, miopenFloat, on, oc, oh, ow), miopenStatusSuccess);
        HIP(t, "hipMalloc", hipMalloc(&x, 8 * 16 * 16 * sizeof(float)));
        HIP(t, "hipMalloc", hipMalloc(&w, 8 * 8 * sizeof(float)));
        HIP(t, "hipMalloc", hipMalloc(&y, (size_t)on * oc * oh * ow * sizeof(float)));
        LIB(t, "miopenConvolutionForwardGetWorkSpaceSize",
            miopenConvolutionForwardGetWorkSpaceSize(mh, wd, xd, cd, yd, &ws_size),
            miopenStatusSuccess);
        if (ws_size > 0)
            HIP(t, "hipMalloc", hipMalloc(&ws, ws_size));
        LIB(t, "miopenFindConvolutionForwardAlgorithm",
            miopenFindConvolutionForwardAlgorithm(mh, xd, x, wd, w, cd, yd, y, 4, &found, perf,
                                                  ws, ws_size, 0),
            miopenStatusSuccess);
        say(t, "miopen: %s", found > 0 ? "algorithms found" : "no algorithm");
        if (found == 0) {
            say(t, "FAIL miopenFindConvolutionForwardAlgorithm found none");
            return 1;
        }
        LIB(t, "miopenConvolutionForward",
            miopenConvolutionForward(mh, &one, xd, x, wd, w, cd, perf[0].fwd_algo, &zero, yd, y,
                                     ws, ws_size),
            miopenStatusSuccess);
        HIP(t, "hipStreamSynchronize", hipStreamSynchronize(s));
        LIB(t, "miopenDestroyConvolutionDescriptor", miopenDestroyConvolutionDescriptor(cd),
            miopenStatusSuccess);
        LIB(t, "miopenDestroyTensorDescriptor", miopenDestroyTensorDescriptor(xd),
            miopenStatusSuccess);
        LIB(t, "miopenDestroyTensorDescriptor", miopenDestroyTensorDescriptor(wd),
            miopenStatusSuccess);
        LIB(t, "miopenDestroyTensorDescriptor", miopenDestroyTensorDescriptor(yd),
            miopenStatusSuccess);
        if (ws)
            HIP(t, "hipFree", hipFree(ws));
        HIP(t, "hipFree", hipFree(x));
        HIP(t, "hipFree", hipFree(w));
        HIP(t, "hipFree", hipFree(y));
    }

    HIP(t, "hipDeviceSynchronize", hipDeviceSynchronize());
    if (o->hold && t == 0) {
        control("libs_check: holding");
        wait_stdin();
    }
    if (mh)
        LIB(t, "miopenDestroy", miopenDestroy(mh), miopenStatusSuccess);
    if (lh)
        LIB(t, "hipblasLtDestroy", hipblasLtDestroy(lh), HIPBLAS_STATUS_SUCCESS);
    if (bh)
        LIB(t, "hipblasDestroy", hipblasDestroy(bh), HIPBLAS_STATUS_SUCCESS);
    if (rh)
        LIB(t, "rocblas_destroy_handle", rocblas_destroy_handle(rh), rocblas_status_success);
    HIP(t, "hipStreamDestroy", hipStreamDestroy(s));
    HIP(t, "hipFree", hipFree(a));
    HIP(t, "hipFree", hipFree(b));
    HIP(t, "hipFree", hipFree(c));
    HIP(t, "hipFree", hipFree(ha));
    HIP(t, "hipFree", hipFree(hb));
    HIP(t, "hipFree", hipFree(hc));
    return 0;
}

struct thread_arg {
    int t;
    const struct opts *o;
    int rc;
};

static void *thread_main(void *p)
{
    struct thread_arg *a = (struct thread_arg *)p;
    a->rc = workload(a->t, a->o);
    return NULL;
}

/* Runs the workload on n threads; returns the number that failed. */
static int run_all(int n, const struct opts *o)
{
    struct thread_arg args[8];
    pthread_t th[8];
    int i, failed = 0;
    if (n < 1 || n > 8)
        n = 1;
    n_threads = n;
    if (n == 1)
        return workload(0, o) != 0;
    for (i = 0; i < n; i++) {
        args[i].t = i;
        args[i].o = o;
        args[i].rc = 1;
        pthread_create(&th[i], NULL, thread_main, &args[i]);
    }
    for (i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        failed += args[i].rc != 0;
    }
    return failed;
}

/* The program's entry with its arguments (argv[0] is not an argument); 0 when every status was
 * the expected one. Prints "libs_check: done" at the end. */
static int libs_check_main(int argc, const char *const *argv)
{
    struct opts o = {NULL, 1, NULL, 0};
    int threads = 1, i;
    for (i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            o.only = argv[++i];
        else if (strcmp(argv[i], "--loop") == 0 && i + 1 < argc)
            o.loop = atoi(argv[++i]);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--pause") == 0 && i + 1 < argc)
            o.pause = argv[++i];
        else if (strcmp(argv[i], "--hold") == 0)
            o.hold = 1;
        else {
            fprintf(stderr, "libs_check: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (run_all(threads, &o) != 0) {
        printf("FAIL libs_check\n");
        fflush(stdout);
        return 1;
    }
    printf("libs_check: done\n");
    fflush(stdout);
    return 0;
}

#ifndef LIBS_CHECK_NO_MAIN
int main(int argc, char **argv)
{
    return libs_check_main(argc - 1, argv + 1);
}
#endif
