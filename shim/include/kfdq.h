/*
 * kfdq.h: request hints for applications under libkfdq_shim.so (docs/shim.md, "Request hints").
 *
 * A latency-critical service says "a request is starting" before its first GPU launch and
 * "it is done" after its last, so the node agent preempts the batch jobs before the first
 * kernel arrives instead of after:
 *
 *     #include "kfdq.h"                       // no library to link: header only
 *     ...
 *     kfdq_hint_begin();                      // request parsed; host work still to come
 *     decode(); copy_to_gpu(); launch(); hipStreamSynchronize(s);
 *     kfdq_hint_end();
 *
 * The shim exports `int kfdq_request_begin(void)` and `int kfdq_request_end(void)`. The
 * inline helpers below look them up at run time (`dlsym(RTLD_DEFAULT, ...)`), so the same
 * binary runs with and without the shim preloaded: without it they return KFDQ_NO_SHIM and
 * do nothing. Link with -ldl on glibc older than 2.34.
 *
 * Every call is safe from any thread, costs a few atomic operations (and at most one system
 * call), and never blocks. Hints nest: with N requests in flight, N begins and N ends; the
 * process counts as busy from the first begin to the last end. A hint with no GPU work for the
 * class's hint_timeout_ms (default 50 ms), begun and never followed by work or never ended,
 * expires: KFDQ_NOT_BEGUN from the end that comes after.
 */
#ifndef KFDQ_H
#define KFDQ_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_DEFAULT */
#endif
#include <dlfcn.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What kfdq_request_begin / kfdq_request_end return. Only KFDQ_OK changes anything. */
enum kfdq_status {
    KFDQ_OK = 0,           /* taken */
    KFDQ_NO_SHIM = -1,     /* libkfdq_shim.so is not loaded (the helpers below only) */
    KFDQ_NO_AGENT = -2,    /* no agent session: KFDQ_SOCKET unset or unreachable, or no HIP
                              call yet in this process; nothing to preempt */
    KFDQ_NOT_ALLOWED = -3, /* the agent does not let this class hint (it preempts nobody) */
    KFDQ_NOT_BEGUN = -4,   /* end without an open hint (never begun, ended, or expired) */
    KFDQ_TOO_MANY = -5     /* 65536 hints open already */
};

/* The shim's own entry points (defined only when it is loaded). */
typedef int (*kfdq_request_fn)(void);

/* The shim's function `name`, or NULL when it is not loaded. */
static inline kfdq_request_fn kfdq_lookup_(const char *name) {
    kfdq_request_fn f;
    void *p = dlsym(RTLD_DEFAULT, name);
    /* Object pointer to function pointer: what POSIX's dlsym requires to work. */
    __builtin_memcpy(&f, &p, sizeof f);
    return f;
}

/* kfdq_request_begin() if the shim is loaded, else KFDQ_NO_SHIM. */
static inline int kfdq_hint_begin(void) {
    kfdq_request_fn f = kfdq_lookup_("kfdq_request_begin");
    return f ? f() : KFDQ_NO_SHIM;
}

/* kfdq_request_end() if the shim is loaded, else KFDQ_NO_SHIM. */
static inline int kfdq_hint_end(void) {
    kfdq_request_fn f = kfdq_lookup_("kfdq_request_end");
    return f ? f() : KFDQ_NO_SHIM;
}

/* A short name for a status, for logs. */
static inline const char *kfdq_status_name(int s) {
    switch (s) {
    case KFDQ_OK: return "ok";
    case KFDQ_NO_SHIM: return "no shim";
    case KFDQ_NO_AGENT: return "no agent";
    case KFDQ_NOT_ALLOWED: return "not allowed for this class";
    case KFDQ_NOT_BEGUN: return "no hint open";
    case KFDQ_TOO_MANY: return "too many hints open";
    default: return "unknown";
    }
}

#ifdef __cplusplus
}
#endif

#endif /* KFDQ_H */
