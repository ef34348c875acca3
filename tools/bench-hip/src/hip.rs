//! The node's HIP runtime, loaded at run time (`dlopen`): no link-time ROCm dependency, so the
//! packaged helper runs with whatever ROCm the node has. Only the entry points the helper calls,
//! with their C prototypes as in ROCm's `hip_runtime_api.h` (handles as opaque pointers).

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::path::Path;

/// An opaque HIP handle (module, function, stream, event).
type Handle = *mut c_void;

/// `hipErrorNotReady`: an event's work has not completed yet.
const NOT_READY: c_int = 600;
/// `hipEventDisableTiming`: the helper reads completion times on the host clock.
const EVENT_DISABLE_TIMING: c_uint = 0x2;

/// A failure of the HIP runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HipError {
    /// The library did not load.
    #[error("loading the HIP runtime {path}: {why}")]
    Load { path: String, why: String },
    /// The library lacks an entry point.
    #[error("the HIP runtime {path} has no {symbol}: it is not a HIP runtime kfdq knows")]
    Symbol { path: String, symbol: &'static str },
    /// A call returned an error code.
    #[error("{call} failed: {code} ({text})")]
    Call {
        call: &'static str,
        code: c_int,
        text: String,
    },
    /// A name had a NUL byte.
    #[error("{0:?} has a NUL byte")]
    Nul(String),
}

type LaunchFn = unsafe extern "C" fn(
    Handle,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    Handle,
    *mut *mut c_void,
    *mut *mut c_void,
) -> c_int;

type IntFn = unsafe extern "C" fn(c_int) -> c_int;
type LoadDataFn = unsafe extern "C" fn(*mut Handle, *const c_void) -> c_int;
type GetFunctionFn = unsafe extern "C" fn(*mut Handle, Handle, *const c_char) -> c_int;
type CreateFn = unsafe extern "C" fn(*mut Handle) -> c_int;
type HandleFn = unsafe extern "C" fn(Handle) -> c_int;
type CreateFlagsFn = unsafe extern "C" fn(*mut Handle, c_uint) -> c_int;
type RecordFn = unsafe extern "C" fn(Handle, Handle) -> c_int;
type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;
type VersionFn = unsafe extern "C" fn(*mut c_int) -> c_int;

/// The entry points, resolved once.
pub struct Hip {
    set_device: IntFn,
    module_load_data: LoadDataFn,
    module_get_function: GetFunctionFn,
    stream_create: CreateFn,
    module_launch_kernel: LaunchFn,
    stream_synchronize: HandleFn,
    event_create_with_flags: CreateFlagsFn,
    event_record: RecordFn,
    event_query: HandleFn,
    event_destroy: HandleFn,
    event_synchronize: HandleFn,
    get_error_string: ErrorStringFn,
    runtime_get_version: VersionFn,
    /// The file the runtime was loaded from (resolved: the versioned name).
    path: std::path::PathBuf,
}

/// A kernel of a loaded module.
#[derive(Debug, Clone, Copy)]
pub struct Function(Handle);
/// A stream.
#[derive(Debug, Clone, Copy)]
pub struct Stream(Handle);
/// An event (destroyed by [`Hip::destroy_event`]).
#[derive(Debug)]
pub struct Event(Handle);

// SAFETY: HIP's handles belong to the process, not to a thread: the runtime's API is
// thread-safe and takes them from any thread (the batch helper launches on one thread and
// queries events on another); the wrappers give no access to what they point to.
unsafe impl Send for Function {}
// SAFETY: as for Function: a process-wide HIP handle, used only through the runtime's API.
unsafe impl Send for Stream {}
// SAFETY: as for Function: a process-wide HIP handle, used only through the runtime's API.
unsafe impl Send for Event {}

impl Hip {
    /// Loads the runtime at `path` (it stays loaded for the life of the process).
    pub fn load(path: &Path) -> Result<Hip, HipError> {
        let shown = path.display().to_string();
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| HipError::Nul(shown.clone()))?;
        // SAFETY: `c` is a NUL-terminated path; dlopen runs the library's initialisers, which
        // is what loading the node's HIP runtime means.
        let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if lib.is_null() {
            // SAFETY: dlerror returns NULL or a NUL-terminated message valid until the next dl call.
            let why = unsafe { libc::dlerror() };
            let why = if why.is_null() {
                "unknown error".to_string()
            } else {
                // SAFETY: non-null, NUL-terminated (above), read before any other dl call.
                unsafe { CStr::from_ptr(why) }
                    .to_string_lossy()
                    .into_owned()
            };
            return Err(HipError::Load { path: shown, why });
        }
        let sym = |name: &'static str| -> Result<*mut c_void, HipError> {
            let c = CString::new(name).map_err(|_| HipError::Nul(name.into()))?;
            // SAFETY: `lib` is a live handle from dlopen (never closed), `c` NUL-terminated.
            let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
            if p.is_null() {
                Err(HipError::Symbol {
                    path: shown.clone(),
                    symbol: name,
                })
            } else {
                Ok(p)
            }
        };
        // Each pointer is the named HIP entry point; its type is that function's C prototype.
        macro_rules! entry {
            ($name:literal, $t:ty) => {{
                let p = sym($name)?;
                // SAFETY: `p` is the non-null address of the HIP function `$name`, whose C
                // prototype `$t` states; function and data pointers have one size.
                unsafe { std::mem::transmute::<*mut c_void, $t>(p) }
            }};
        }
        Ok(Hip {
            set_device: entry!("hipSetDevice", IntFn),
            module_load_data: entry!("hipModuleLoadData", LoadDataFn),
            module_get_function: entry!("hipModuleGetFunction", GetFunctionFn),
            stream_create: entry!("hipStreamCreate", CreateFn),
            module_launch_kernel: entry!("hipModuleLaunchKernel", LaunchFn),
            stream_synchronize: entry!("hipStreamSynchronize", HandleFn),
            event_create_with_flags: entry!("hipEventCreateWithFlags", CreateFlagsFn),
            event_record: entry!("hipEventRecord", RecordFn),
            event_query: entry!("hipEventQuery", HandleFn),
            event_destroy: entry!("hipEventDestroy", HandleFn),
            event_synchronize: entry!("hipEventSynchronize", HandleFn),
            get_error_string: entry!("hipGetErrorString", ErrorStringFn),
            runtime_get_version: entry!("hipRuntimeGetVersion", VersionFn),
            path: std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned()),
        })
    }

    /// The file the runtime was loaded from, links resolved (`libamdhip64.so.6.4.43483`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// hipRuntimeGetVersion: `HIP_VERSION`, major * 10^7 + minor * 10^5 + patch.
    pub fn runtime_version(&self) -> Result<u32, HipError> {
        let mut v: c_int = 0;
        // SAFETY: a valid out-pointer to a c_int.
        let code = unsafe { (self.runtime_get_version)(&mut v) };
        self.check("hipRuntimeGetVersion", code)?;
        Ok(u32::try_from(v).unwrap_or(0))
    }

    /// "HIP 6.4.43483 (libamdhip64.so.6.4.43483)": the runtime's name and version, as the
    /// demo's `runtime` field shows it.
    pub fn describe(&self) -> String {
        let file = self
            .path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        match self.runtime_version() {
            Ok(v) => format!(
                "HIP {}.{}.{} ({file})",
                v / 10_000_000,
                v / 100_000 % 100,
                v % 100_000
            ),
            Err(_) => format!("HIP ({file})"),
        }
    }

    fn check(&self, call: &'static str, code: c_int) -> Result<(), HipError> {
        if code == 0 {
            return Ok(());
        }
        // SAFETY: hipGetErrorString takes any code and returns a static NUL-terminated string
        // (or NULL, checked).
        let p = unsafe { (self.get_error_string)(code) };
        let text = if p.is_null() {
            String::new()
        } else {
            // SAFETY: non-null and NUL-terminated, static in the runtime.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        };
        Err(HipError::Call { call, code, text })
    }

    /// hipSetDevice.
    pub fn set_device(&self, ordinal: u32) -> Result<(), HipError> {
        let ordinal = c_int::try_from(ordinal).unwrap_or(c_int::MAX);
        // SAFETY: plain integer argument.
        self.check("hipSetDevice", unsafe { (self.set_device)(ordinal) })
    }

    /// hipModuleLoadData of `image` (an ELF code object; the runtime copies it), then
    /// hipModuleGetFunction of `kernel`.
    pub fn load_function(&self, image: &[u8], kernel: &str) -> Result<Function, HipError> {
        let mut module: Handle = std::ptr::null_mut();
        // SAFETY: `module` is a valid out-pointer; `image` is a whole code object, readable for
        // the call (the runtime reads its ELF headers for the sizes).
        let code = unsafe { (self.module_load_data)(&mut module, image.as_ptr().cast()) };
        self.check("hipModuleLoadData", code)?;
        let name = CString::new(kernel).map_err(|_| HipError::Nul(kernel.into()))?;
        let mut f: Handle = std::ptr::null_mut();
        // SAFETY: valid out-pointer, a module the runtime returned, a NUL-terminated name.
        let code = unsafe { (self.module_get_function)(&mut f, module, name.as_ptr()) };
        self.check("hipModuleGetFunction", code)?;
        Ok(Function(f))
    }

    /// The null stream (the device's default stream).
    pub fn null_stream(&self) -> Stream {
        Stream(std::ptr::null_mut())
    }

    /// hipStreamCreate.
    pub fn stream(&self) -> Result<Stream, HipError> {
        let mut s: Handle = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        let code = unsafe { (self.stream_create)(&mut s) };
        self.check("hipStreamCreate", code)?;
        Ok(Stream(s))
    }

    /// hipModuleLaunchKernel of `f` on `stream`: `groups` work-groups of `group_size` threads,
    /// with one u64 argument.
    pub fn launch(
        &self,
        f: Function,
        stream: Stream,
        groups: u32,
        group_size: u32,
        arg: u64,
    ) -> Result<(), HipError> {
        let mut arg = arg;
        let mut params = [(&raw mut arg).cast::<c_void>()];
        // SAFETY: `f` came from the runtime and `stream` too, or is the null stream (HIP's
        // default stream, a valid argument); `params` holds one pointer to a live
        // u64, the kernel's only explicit argument, read by the runtime during the call; no
        // `extra`.
        let code = unsafe {
            (self.module_launch_kernel)(
                f.0,
                groups,
                1,
                1,
                group_size,
                1,
                1,
                0,
                stream.0,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        self.check("hipModuleLaunchKernel", code)
    }

    /// hipStreamSynchronize.
    pub fn synchronize(&self, stream: Stream) -> Result<(), HipError> {
        // SAFETY: a stream the runtime returned, or the null stream (the default stream).
        self.check("hipStreamSynchronize", unsafe {
            (self.stream_synchronize)(stream.0)
        })
    }

    /// An event without timing, recorded on `stream` after its work so far.
    pub fn record(&self, stream: Stream) -> Result<Event, HipError> {
        let mut e: Handle = std::ptr::null_mut();
        // SAFETY: valid out-pointer, a documented flag.
        let code = unsafe { (self.event_create_with_flags)(&mut e, EVENT_DISABLE_TIMING) };
        self.check("hipEventCreateWithFlags", code)?;
        // SAFETY: an event the runtime returned, and a stream it returned or the null stream.
        let code = unsafe { (self.event_record)(e, stream.0) };
        self.check("hipEventRecord", code)?;
        Ok(Event(e))
    }

    /// Whether the work before `e` completed.
    pub fn done(&self, e: &Event) -> Result<bool, HipError> {
        // SAFETY: an event the runtime returned, not yet destroyed (destroy takes it by value).
        match unsafe { (self.event_query)(e.0) } {
            NOT_READY => Ok(false),
            code => self.check("hipEventQuery", code).map(|()| true),
        }
    }

    /// hipEventSynchronize: waits until the work before `e` completed.
    pub fn wait(&self, e: &Event) -> Result<(), HipError> {
        // SAFETY: an event the runtime returned, not yet destroyed (destroy takes it by value).
        self.check("hipEventSynchronize", unsafe {
            (self.event_synchronize)(e.0)
        })
    }

    /// hipEventDestroy.
    pub fn destroy_event(&self, e: Event) {
        // SAFETY: an event the runtime returned, destroyed once (taken by value).
        let _ = unsafe { (self.event_destroy)(e.0) };
    }
}
