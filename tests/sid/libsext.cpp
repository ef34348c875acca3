// CPython extension `libsext`: the libraries' workload of libs_check.cpp reached from a module
// Python loads with RTLD_LOCAL (PyTorch's shape: rocBLAS, hipBLAS, hipBLASLt and MIOpen are
// the extension's own dependencies, not the program's). `libsext.main(args)` runs it with
// libs_check's arguments and returns its exit status; the status lines go to stdout.
#include <Python.h>

#define LIBS_CHECK_NO_MAIN 1
#include "libs_check.cpp"

static PyObject *py_main(PyObject *, PyObject *args)
{
    PyObject *list;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &list))
        return NULL;
    Py_ssize_t n = PyList_Size(list);
    if (n > 32) {
        PyErr_SetString(PyExc_ValueError, "too many arguments");
        return NULL;
    }
    const char *argv[32];
    for (Py_ssize_t i = 0; i < n; i++) {
        argv[i] = PyUnicode_AsUTF8(PyList_GetItem(list, i));
        if (!argv[i])
            return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = libs_check_main((int)n, argv);
    Py_END_ALLOW_THREADS return PyLong_FromLong(rc);
}

static PyMethodDef methods[] = {
    {"main", py_main, METH_VARARGS, "run the libraries' workload with libs_check's arguments"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "libsext", NULL, -1, methods};

PyMODINIT_FUNC PyInit_libsext(void) { return PyModule_Create(&module); }
