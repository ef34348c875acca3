// A CPython extension module built with hipcc against the real HIP runtime, the way PyTorch's
// extensions are: everything on the null stream (stream 0). `hipext.device()` names the GPU;
// `hipext.roundtrip(n)` copies n floats to the device, launches a kernel on the null stream,
// synchronizes and copies them back, returning (launches, checksum of what came back).
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <hip/hip_runtime.h>

#include <vector>

__global__ void scale(float* p, int n, float f) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] *= f;
}

static PyObject* fail(const char* what, hipError_t e) {
    PyErr_Format(PyExc_RuntimeError, "%s: %s (%d)", what, hipGetErrorString(e), (int)e);
    return nullptr;
}

static PyObject* device(PyObject*, PyObject*) {
    hipDeviceProp_t p;
    hipError_t e = hipGetDeviceProperties(&p, 0);
    if (e != hipSuccess) return fail("hipGetDeviceProperties", e);
    return Py_BuildValue("(ss)", p.name, p.gcnArchName);
}

static PyObject* roundtrip(PyObject*, PyObject* args) {
    int n = 0;
    if (!PyArg_ParseTuple(args, "i", &n) || n <= 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "n must be positive");
        return nullptr;
    }
    std::vector<float> host(n), back(n);
    for (int i = 0; i < n; i++) host[i] = (float)(i % 1000) * 0.5f;
    float* dev = nullptr;
    hipError_t e = hipMalloc(&dev, n * sizeof(float));
    if (e != hipSuccess) return fail("hipMalloc", e);
    e = hipMemcpy(dev, host.data(), n * sizeof(float), hipMemcpyHostToDevice);
    if (e != hipSuccess) return fail("hipMemcpy H2D", e);
    const int launches = 4;
    for (int k = 0; k < launches; k++) {
        hipLaunchKernelGGL(scale, dim3((n + 255) / 256), dim3(256), 0, 0, dev, n, 1.0f);
        if ((e = hipGetLastError()) != hipSuccess) return fail("launch", e);
    }
    if ((e = hipDeviceSynchronize()) != hipSuccess) return fail("hipDeviceSynchronize", e);
    e = hipMemcpy(back.data(), dev, n * sizeof(float), hipMemcpyDeviceToHost);
    if (e != hipSuccess) return fail("hipMemcpy D2H", e);
    hipFree(dev);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += back[i];
    return Py_BuildValue("(id)", launches, sum);
}

static PyMethodDef methods[] = {
    {"device", device, METH_NOARGS, "the GPU's name and architecture"},
    {"roundtrip", roundtrip, METH_VARARGS, "copy n floats through the GPU on the null stream"},
    {nullptr, nullptr, 0, nullptr},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "hipext", nullptr, -1, methods};

PyMODINIT_FUNC PyInit_hipext(void) { return PyModule_Create(&module); }
