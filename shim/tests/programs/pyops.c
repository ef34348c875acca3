/*
 * pyops.c: HIP work reached from Python. Built twice by shim/tests/python.rs:
 *   libkfdqtest_ops.so   a plain library ctypes loads (RTLD_LOCAL, ctypes' default)
 *   kfdqtest_ext.so      a CPython extension module (-DKFDQ_PY_EXT), imported normally
 * Both link fakehip's libamdhip64.so.6, which therefore is not in the global scope. The first
 * HIP call is hipGetDeviceCount, which the shim does not wrap (PyTorch starts the same way).
 * kfdq_ops_run() prints "<call> <code>" per call, then which queue backs the null stream and
 * the created streams (fakehip's view), and returns the number of non-zero codes.
 */
#ifdef KFDQ_PY_EXT
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#endif
#include "common.h"

static struct fakehip_kernel kern = FAKEHIP_KERNEL(200000);
static const dim3 grid = {4, 1, 1}, block = {64, 1, 1};

#define CALL(name, expr)                                                                         \
	do {                                                                                     \
		int c_ = (int)(expr);                                                            \
		printf("%s %d\n", name, c_);                                                     \
		bad += c_ != 0;                                                                  \
	} while (0)

int kfdq_ops_run(void)
{
	int bad = 0, n = 0;
	hipStream_t s = NULL, hi = NULL;
	char host[256] = {1}, back[256];
	void *dev = NULL;

	CALL("hipGetDeviceCount", hipGetDeviceCount(&n));
	CALL("hipStreamCreate", hipStreamCreate(&s));
	CALL("hipStreamCreateWithPriority", hipStreamCreateWithPriority(&hi, hipStreamDefault, -1));
	CALL("hipMalloc", hipMalloc(&dev, sizeof(host)));
	CALL("hipLaunchKernel(null)", hipLaunchKernel(&kern, grid, block, NULL, 0, NULL));
	CALL("hipLaunchKernel(s)", hipLaunchKernel(&kern, grid, block, NULL, 0, s));
	CALL("hipLaunchKernel(hi)", hipLaunchKernel(&kern, grid, block, NULL, 0, hi));
	CALL("hipMemcpyAsync", hipMemcpyAsync(dev, host, sizeof(host), hipMemcpyHostToDevice, s));
	CALL("hipMemcpy", hipMemcpy(back, dev, sizeof(back), hipMemcpyDeviceToHost));
	CALL("hipStreamSynchronize", hipStreamSynchronize(s));
	CALL("hipDeviceSynchronize", hipDeviceSynchronize());
	CALL("hipStreamQuery", hipStreamQuery(hi));
	print_queue("null", NULL);
	print_queue("s", s);
	print_queue("hi", hi);
	/* Five more default-priority streams: more than fakehip's (and ROCclr's) default pool of 4,
	 * so each gets a queue of its own only if GPU_MAX_HW_QUEUES was in place at the first call. */
	for (int i = 0; i < 5; i++) {
		hipStream_t x;
		char name[8];

		CHECK(hipStreamCreate(&x));
		CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, x));
		snprintf(name, sizeof(name), "x%d", i);
		print_queue(name, x);
	}
	CHECK(hipDeviceSynchronize());
	fflush(stdout);
	return bad;
}

#ifdef KFDQ_PY_EXT
static PyObject *run(PyObject *self, PyObject *args)
{
	(void)self;
	(void)args;
	return PyLong_FromLong(kfdq_ops_run());
}

static PyMethodDef methods[] = {{"run", run, METH_NOARGS, "run the HIP calls"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "kfdqtest_ext", NULL, -1, methods,
				    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_kfdqtest_ext(void)
{
	return PyModule_Create(&module);
}
#endif
