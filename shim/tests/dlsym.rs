//! `dlsym`/`dlvsym` under the shim: HIP functions looked up on a handle of the runtime (ctypes
//! attribute access, `dlvsym` through ctypes) are the shim's wrappers, so the streams created
//! through them are managed; and `RTLD_NEXT` lookups of other libraries still resolve relative
//! to the library that asks (the exported `dlsym` keeps its caller's return address).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

const PYTHON: &str = "/usr/bin/python3";

/// Python creates three streams on a runtime it loaded `RTLD_LOCAL`: through ctypes attribute
/// access (`dlsym` on the handle), through `dlvsym` on the handle, and through `dlsym` of
/// libc on the handle; prints each handle.
fn script() -> String {
    format!(
        r#"import ctypes, os, sys, time
rt = ctypes.CDLL({lib:?})
libc = ctypes.CDLL(None)
libc.dlsym.restype = ctypes.c_void_p
libc.dlsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
libc.dlvsym.restype = ctypes.c_void_p
libc.dlvsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
create_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))
n = ctypes.c_int()
print('count', rt.hipGetDeviceCount(ctypes.byref(n)), flush=True)
a = ctypes.c_void_p()
print('attr', rt.hipStreamCreate(ctypes.byref(a)), a.value, flush=True)
b = ctypes.c_void_p()
f = create_t(libc.dlvsym(rt._handle, b'hipStreamCreate', b'hip_4.2'))
print('dlvsym', f(ctypes.byref(b)), b.value, flush=True)
c = ctypes.c_void_p()
g = create_t(libc.dlsym(rt._handle, b'hipStreamCreate'))
print('dlsym', g(ctypes.byref(c)), c.value, flush=True)
print('CHECKPOINT end', os.getpid(), flush=True)
go = os.environ.get('KFDQ_TEST_GO')
while go and not os.path.exists(go):
    time.sleep(0.005)
"#,
        lib = fakehip::LIB_PATH
    )
}

/// (code, stream handle) of the line starting with `what`.
fn created(lines: &[String], what: &str) -> (i32, u64) {
    let l = lines
        .iter()
        .find(|l| l.starts_with(&format!("{what} ")))
        .unwrap_or_else(|| panic!("no {what} line in {lines:?}"));
    let f: Vec<&str> = l.split_whitespace().collect();
    (f[1].parse().unwrap(), f[2].parse().unwrap())
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn functions_looked_up_on_the_runtime_handle_are_the_shim_s_wrappers() {
    let emu = mount();
    let mut app = Launch::new(PathBuf::from(PYTHON))
        .args(["-c", &script()])
        .env("KFDQ_CLASS", "latency")
        .start(&emu);
    app.wait_line("CHECKPOINT end");
    let pid = app.pid;
    let lines = app.seen.clone();
    let handles: Vec<(&str, u64)> = ["attr", "dlvsym", "dlsym"]
        .into_iter()
        .map(|w| {
            let (code, h) = created(&lines, w);
            assert_eq!(code, 0, "{w}: {lines:?}");
            (w, h)
        })
        .collect();
    let reg = app.wait_registry(pid, "the three created streams", |r| {
        handles
            .iter()
            .all(|(_, h)| r.streams.iter().any(|s| s.handle == *h))
    });
    for (how, h) in &handles {
        let s = stream_by_handle(&reg, *h);
        assert_eq!(
            s.kind,
            StreamKind::Created,
            "the stream created through {how} is the shim's: {s:?}"
        );
    }
    app.go();
    let (_, stderr) = app.finish();
    assert!(!stderr.contains("panic"), "{stderr}");
}

fn cc(args: &[&str]) {
    let out = Command::new("cc").args(args).output().expect("cc");
    assert!(
        out.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `liba` and `libb` both define `twice`; `liba`'s `next_twice` asks `dlsym(RTLD_NEXT)` for it,
/// which must be `libb`'s (the next object after the caller). If the shim's `dlsym` made the
/// lookup relative to itself (it precedes both in the search order), `liba`'s would come back.
#[test]
fn rtld_next_stays_relative_to_the_calling_library() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let p = |n: &str| d.join(n).display().to_string();
    std::fs::write(
        d.join("a.c"),
        "#define _GNU_SOURCE\n#include <dlfcn.h>\nint twice(void) { return 1; }\n\
         int next_twice(void) { int (*f)(void) = (int (*)(void))dlsym(RTLD_NEXT, \"twice\"); return f ? f() : -1; }\n\
         int next_twice_v(void) { int (*f)(void) = (int (*)(void))dlvsym(RTLD_NEXT, \"twice\", \"KFDQ_B\"); return f ? f() : -1; }\n",
    )
    .unwrap();
    std::fs::write(d.join("b.c"), "int twice(void) { return 2; }\n").unwrap();
    std::fs::write(d.join("b.map"), "KFDQ_B { global: twice; local: *; };\n").unwrap();
    std::fs::write(
        d.join("main.c"),
        "#include <stdio.h>\nint next_twice(void);\nint next_twice_v(void);\n\
         int main(void) { printf(\"%d %d\\n\", next_twice(), next_twice_v()); return 0; }\n",
    )
    .unwrap();
    cc(&[
        "-shared",
        "-fPIC",
        "-o",
        &p("libb.so"),
        &p("b.c"),
        &format!("-Wl,--version-script={}", p("b.map")),
    ]);
    cc(&["-shared", "-fPIC", "-o", &p("liba.so"), &p("a.c"), "-ldl"]);
    cc(&[
        "-o",
        &p("main"),
        &p("main.c"),
        &format!("-L{}", d.display()),
        "-Wl,--no-as-needed",
        "-la",
        "-lb",
        &format!("-Wl,-rpath,{}", d.display()),
    ]);
    let run = |preload: Option<&Path>| {
        let mut c = Command::new(d.join("main"));
        if let Some(s) = preload {
            c.env("LD_PRELOAD", s);
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    assert_eq!(
        run(None),
        "2 2",
        "the test's own expectation, without the shim"
    );
    assert_eq!(
        run(Some(&shim_path())),
        "2 2",
        "under the shim, RTLD_NEXT from liba must still find libb's twice"
    );
}
