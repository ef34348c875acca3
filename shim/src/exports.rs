//! The exported entry points: HIP functions under HIP's own version nodes, and `ioctl`.
//!
//! Each HIP wrapper is an `extern "C" fn shim_<name>`; the exported symbol `<name>@@<node>` is a
//! one-jump assembly stub bound with a `.symver` directive; `build.rs` declares the node chain. The real
//! function is found with `dlvsym(RTLD_NEXT, name, node)` (then `dlsym`), never inside the shim,
//! and cached. When the real library lacks the symbol the wrapper returns
//! `hipErrorNotSupported` (801) and warns once.

use std::ffi::{c_char, c_int, c_ulong, c_void};

use crate::launch::{StreamRef, create, destroy, launch, launch_each, sync, work};
use crate::real::Real;

/// `hipError_t`.
type HipError = c_int;
/// `hipStream_t`, `hipEvent_t`, `hipFunction_t`, `hipGraphExec_t`: opaque pointers.
type Handle = *mut c_void;

/// `dim3`, passed by value (12 bytes: two integer registers in the SysV ABI, as in C).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Dim3 {
    x: u32,
    y: u32,
    z: u32,
}

/// `hipPitchedPtr`, passed by value (32 bytes: in memory in the SysV ABI, as in C).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PitchedPtr {
    ptr: *mut c_void,
    pitch: usize,
    xsize: usize,
    ysize: usize,
}

/// `hipExtent`, passed by value (24 bytes: in memory in the SysV ABI, as in C).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Extent {
    width: usize,
    height: usize,
    depth: usize,
}

/// `hipMemLocation`, passed by value (8 bytes: one integer register in the SysV ABI, as in C).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemLocation {
    kind: c_int,
    id: c_int,
}

/// `hipMemcpyKind` (a C enum: `int`).
type Kind = c_int;

/// The address of an exported wrapper.
pub struct Wrapper(*const ());
// SAFETY: a function address, immutable and valid for the process's life.
unsafe impl Sync for Wrapper {}

const fn cstr(s: &'static str) -> &'static std::ffi::CStr {
    match std::ffi::CStr::from_bytes_with_nul(s.as_bytes()) {
        Ok(c) => c,
        Err(_) => panic!("symbol names are NUL-terminated literals"),
    }
}

macro_rules! exports {
    ($( $real:ident $shim:ident $sym:literal $node:literal [$($how:tt)*] ($($a:ident : $t:ty),*); )*) => {
        $(
            static $real: Real = Real::new(cstr(concat!($sym, "\0")), cstr(concat!($node, "\0")));

            #[doc = concat!("`", $sym, "@@", $node, "` (through the stub below)")]
            #[allow(non_snake_case)]
            unsafe extern "C" fn $shim($($a: $t),*) -> HipError {
                type RealFn = unsafe extern "C" fn($($t),*) -> HipError;
                let Some(p) = $real.get() else { return $real.missing() };
                // SAFETY: `p` is the real library's definition of this very symbol and
                // version, whose C prototype is `RealFn`.
                let real = unsafe { std::mem::transmute::<usize, RealFn>(p) };
                exports!(@how [$($how)*] real ($($a),*))
            }

            // The exported, versioned symbol is a one-instruction stub defined in the same
            // assembly block as its `.symver` (the assembler needs the definition of a `@@`
            // default version in the same unit; rustc may place the Rust function in another
            // codegen unit). It tail-jumps to the wrapper, so the caller's frame is untouched.
            core::arch::global_asm!(
                ".pushsection .text.kfdq_shim_stubs,\"ax\",@progbits",
                concat!(".globl kfdq_stub_", stringify!($shim)),
                concat!(".type kfdq_stub_", stringify!($shim), ",@function"),
                concat!(".p2align 4"),
                concat!("kfdq_stub_", stringify!($shim), ":"),
                "jmp {wrapper}",
                concat!(".size kfdq_stub_", stringify!($shim), ", . - kfdq_stub_", stringify!($shim)),
                concat!(".symver kfdq_stub_", stringify!($shim), ", ", $sym, "@@", $node),
                ".popsection",
                wrapper = sym $shim,
            );
        )*

        /// Every wrapper with its real function (hipGetProcAddress hands out the wrappers).
        pub static WRAPPERS: &[(&Real, Wrapper)] = &[$( (&$real, Wrapper($shim as *const ())) ),*];
    };
    (@how [launch $s:ident $spt:literal] $real:ident ($($a:ident),*)) => {
        launch(StreamRef::new($s as usize, $spt), move || {
            // SAFETY: the caller's arguments, forwarded unchanged to the real function.
            unsafe { $real($($a),*) }
        })
    };
    (@how [launch_cfg $cfg:ident $off:literal] $real:ident ($($a:ident),*)) => {
        // SAFETY: `cfg` is the launch configuration the caller passes the real function, which
        // reads the same field; null stays null (the real function rejects it).
        launch(StreamRef::new(unsafe { crate::launch_config::stream_at($cfg.cast(), $off) }, false), move || {
            // SAFETY: the caller's arguments, forwarded unchanged to the real function.
            unsafe { $real($($a),*) }
        })
    };
    (@how [launch_list $list:ident $n:ident $size:literal $off:literal] $real:ident ($($a:ident),*)) => {{
        // SAFETY: `list` holds `n` launch parameter structs of `size` bytes, as the caller
        // passes them to the real function, which reads the same fields.
        let streams = unsafe { crate::launch_config::streams_of($list.cast(), $n as usize, $size, $off) };
        launch_each(&streams, &mut move || {
            // SAFETY: the caller's arguments, forwarded unchanged to the real function.
            unsafe { $real($($a),*) }
        })
    }};
    (@how [upload_params $params:ident] $real:ident ($($a:ident),*)) => {{
        // SAFETY: `params` is the caller's `hipGraphInstantiateParams` (or null), which the real
        // function reads the same way.
        match unsafe { crate::launch_config::upload_stream($params.cast()) } {
            Some(s) => work(StreamRef::new(s, false), move || {
                // SAFETY: the caller's arguments, forwarded unchanged to the real function.
                unsafe { $real($($a),*) }
            }),
            // SAFETY: the caller's arguments, forwarded unchanged to the real function.
            None => unsafe { $real($($a),*) },
        }
    }};
    (@how [work $s:ident $spt:literal] $real:ident ($($a:ident),*)) => {
        work(StreamRef::new($s as usize, $spt), move || {
            // SAFETY: the caller's arguments, forwarded unchanged to the real function.
            unsafe { $real($($a),*) }
        })
    };
    (@how [work_null $spt:literal] $real:ident ($($a:ident),*)) => {
        work(StreamRef::new(0, $spt), move || {
            // SAFETY: the caller's arguments, forwarded unchanged to the real function.
            unsafe { $real($($a),*) }
        })
    };
    (@how [sync $s:ident $spt:literal] $real:ident ($($a:ident),*)) => {
        sync(StreamRef::new($s as usize, $spt), move || {
            // SAFETY: the caller's arguments, forwarded unchanged to the real function.
            unsafe { $real($($a),*) }
        })
    };
    (@how [device_sync] $real:ident ()) => {
        // Synchronises every stream of the device; the only stream the runtime may create a
        // queue for meanwhile is the null stream.
        sync(StreamRef::new(0, false), move || {
            // SAFETY: no arguments; the real function.
            unsafe { $real() }
        })
    };
    (@how [forward] $real:ident ($($a:ident),*)) => {
        // SAFETY: the caller's arguments, forwarded unchanged to the real function.
        unsafe { $real($($a),*) }
    };
    (@how [create $out:ident $prio:expr] $real:ident ($($a:ident),*)) => {
        create($out as *mut usize, $prio, || {
            // SAFETY: the caller's arguments, forwarded unchanged to the real function.
            unsafe { $real($($a),*) }
        })
    };
    (@how [destroy $s:ident] $real:ident ($($a:ident),*)) => {
        destroy($s as usize, || {
            // SAFETY: the caller's arguments, forwarded unchanged to the real function.
            unsafe { $real($($a),*) }
        })
    };
    (@how [procaddr $pfn:ident] $real:ident ($($a:ident),*)) => {{
        // SAFETY: the caller's arguments, forwarded unchanged to the real function.
        let r = unsafe { $real($($a),*) };
        // SAFETY: on success the real function stored a function address at `pfn`, a pointer
        // the caller passed for exactly that.
        unsafe { substitute_wrapper(r, $pfn) };
        r
    }};
}

exports! {
    R_LAUNCH_KERNEL shim_hipLaunchKernel "hipLaunchKernel" "hip_4.2" [launch stream false]
        (f: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: Handle);
    R_LAUNCH_KERNEL_SPT shim_hipLaunchKernel_spt "hipLaunchKernel_spt" "hip_5.2" [launch stream true]
        (f: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: Handle);
    R_EXT_LAUNCH_KERNEL shim_hipExtLaunchKernel "hipExtLaunchKernel" "hip_4.2" [launch stream false]
        (f: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: Handle,
         start: Handle, stop: Handle, flags: c_int);
    R_COOP shim_hipLaunchCooperativeKernel "hipLaunchCooperativeKernel" "hip_4.2" [launch stream false]
        (f: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: u32, stream: Handle);
    R_COOP_SPT shim_hipLaunchCooperativeKernel_spt "hipLaunchCooperativeKernel_spt" "hip_5.2" [launch stream true]
        (f: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: u32, stream: Handle);
    R_MODULE_LAUNCH shim_hipModuleLaunchKernel "hipModuleLaunchKernel" "hip_4.2" [launch stream false]
        (f: Handle, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32, shared: u32, stream: Handle,
         params: *mut *mut c_void, extra: *mut *mut c_void);
    R_MODULE_COOP shim_hipModuleLaunchCooperativeKernel "hipModuleLaunchCooperativeKernel" "hip_5.5" [launch stream false]
        (f: Handle, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32, shared: u32, stream: Handle,
         params: *mut *mut c_void);
    R_EXT_MODULE_LAUNCH shim_hipExtModuleLaunchKernel
        "_Z24hipExtModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_j" "hip_4.2"
        [launch stream false]
        (f: Handle, gx: u32, gy: u32, gz: u32, lx: u32, ly: u32, lz: u32, shared: usize, stream: Handle,
         params: *mut *mut c_void, extra: *mut *mut c_void, start: Handle, stop: Handle, flags: u32);
    // The C names of the same launches (ROCm 6.x exports both): rocBLAS, hipBLASLt and MIOpen
    // import the C `hipExtModuleLaunchKernel` for their GEMM and convolution kernels
    // (docs/real-rocm.md, "The libraries' root").
    R_EXT_MODULE_LAUNCH_C shim_hipExtModuleLaunchKernel_c "hipExtModuleLaunchKernel" "hip_4.2"
        [launch stream false]
        (f: Handle, gx: u32, gy: u32, gz: u32, lx: u32, ly: u32, lz: u32, shared: usize, stream: Handle,
         params: *mut *mut c_void, extra: *mut *mut c_void, start: Handle, stop: Handle, flags: u32);
    R_HCC_MODULE_LAUNCH shim_hipHccModuleLaunchKernel "hipHccModuleLaunchKernel" "hip_4.2"
        [launch stream false]
        (f: Handle, gx: u32, gy: u32, gz: u32, lx: u32, ly: u32, lz: u32, shared: usize, stream: Handle,
         params: *mut *mut c_void, extra: *mut *mut c_void, start: Handle, stop: Handle);
    R_HCC_MODULE_LAUNCH_CXX shim_hipHccModuleLaunchKernel_cxx
        "_Z24hipHccModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_" "hip_4.2"
        [launch stream false]
        (f: Handle, gx: u32, gy: u32, gz: u32, lx: u32, ly: u32, lz: u32, shared: usize, stream: Handle,
         params: *mut *mut c_void, extra: *mut *mut c_void, start: Handle, stop: Handle);
    R_GRAPH_LAUNCH shim_hipGraphLaunch "hipGraphLaunch" "hip_4.3" [launch stream false]
        (exec: Handle, stream: Handle);
    R_GRAPH_LAUNCH_SPT shim_hipGraphLaunch_spt "hipGraphLaunch_spt" "hip_5.3" [launch stream true]
        (exec: Handle, stream: Handle);
    R_STREAM_CREATE shim_hipStreamCreate "hipStreamCreate" "hip_4.2" [create out None]
        (out: *mut Handle);
    R_STREAM_CREATE_FLAGS shim_hipStreamCreateWithFlags "hipStreamCreateWithFlags" "hip_4.2" [create out None]
        (out: *mut Handle, flags: u32);
    R_STREAM_CREATE_PRIO shim_hipStreamCreateWithPriority "hipStreamCreateWithPriority" "hip_4.2" [create out Some(priority)]
        (out: *mut Handle, flags: u32, priority: c_int);
    R_STREAM_CREATE_CU shim_hipExtStreamCreateWithCUMask "hipExtStreamCreateWithCUMask" "hip_4.2" [create out None]
        (out: *mut Handle, cu_mask_size: u32, cu_mask: *const u32);
    R_STREAM_DESTROY shim_hipStreamDestroy "hipStreamDestroy" "hip_4.2" [destroy stream]
        (stream: Handle);
    R_GET_PROC_ADDRESS shim_hipGetProcAddress "hipGetProcAddress" "hip_6.1" [procaddr pfn]
        (symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64, status: *mut c_int);

    // ---- HIP 7.x (libamdhip64.so.7; with .so.6 these return hipErrorNotSupported, which no
    // program linked against .so.6 calls) ----
    // `hipLaunchKernelEx` (the C++ template of HIP's headers) compiles to hipLaunchKernelExC;
    // the stream is a field of the configuration (`hipLaunchConfig_t::stream` and
    // `HIP_LAUNCH_CONFIG::hStream`, both at byte 32: docs/shim.md, "HIP 7.2").
    R_LAUNCH_KERNEL_EX_C shim_hipLaunchKernelExC "hipLaunchKernelExC" "hip_6.5" [launch_cfg config 32]
        (config: *const c_void, f: *const c_void, args: *mut *mut c_void);
    R_DRV_LAUNCH_KERNEL_EX shim_hipDrvLaunchKernelEx "hipDrvLaunchKernelEx" "hip_6.5" [launch_cfg config 32]
        (config: *const c_void, f: Handle, params: *mut *mut c_void, extra: *mut *mut c_void);
    // Hand out function pointers as hipGetProcAddress does.
    R_GET_DRIVER_ENTRY_POINT shim_hipGetDriverEntryPoint "hipGetDriverEntryPoint" "hip_7.1" [procaddr pfn]
        (symbol: *const c_char, pfn: *mut *mut c_void, flags: u64, status: *mut c_int);
    R_GET_DRIVER_ENTRY_POINT_SPT shim_hipGetDriverEntryPoint_spt "hipGetDriverEntryPoint_spt" "hip_7.1"
        [procaddr pfn]
        (symbol: *const c_char, pfn: *mut *mut c_void, flags: u64, status: *mut c_int);
    // Multi-device launches: a `hipLaunchParams` (56 bytes, stream at 48) or
    // `hipFunctionLaunchParams` (56 bytes, stream at 40) per device; gated on every stream.
    R_COOP_MULTI shim_hipLaunchCooperativeKernelMultiDevice "hipLaunchCooperativeKernelMultiDevice" "hip_4.2"
        [launch_list list n 56 48]
        (list: *mut c_void, n: c_int, flags: u32);
    R_EXT_MULTI shim_hipExtLaunchMultiKernelMultiDevice "hipExtLaunchMultiKernelMultiDevice" "hip_4.2"
        [launch_list list n 56 48]
        (list: *mut c_void, n: c_int, flags: u32);
    R_MODULE_COOP_MULTI shim_hipModuleLaunchCooperativeKernelMultiDevice
        "hipModuleLaunchCooperativeKernelMultiDevice" "hip_5.5" [launch_list list n 56 40]
        (list: *mut c_void, n: u32, flags: u32);
    // The legacy launch after hipConfigureCall: its stream is in the runtime's per-thread
    // configuration, so it is gated on the null stream (held whenever the process is).
    R_LAUNCH_BY_PTR shim_hipLaunchByPtr "hipLaunchByPtr" "hip_4.2" [work_null false]
        (f: *const c_void);

    // ---- stream-ordered work: held on a held stream, attributed like a launch ----
    R_MEMCPY_ASYNC shim_hipMemcpyAsync "hipMemcpyAsync" "hip_4.2" [work stream false]
        (dst: *mut c_void, src: *const c_void, n: usize, kind: Kind, stream: Handle);
    R_MEMCPY_ASYNC_SPT shim_hipMemcpyAsync_spt "hipMemcpyAsync_spt" "hip_5.2" [work stream true]
        (dst: *mut c_void, src: *const c_void, n: usize, kind: Kind, stream: Handle);
    R_MEMSET_ASYNC shim_hipMemsetAsync "hipMemsetAsync" "hip_4.2" [work stream false]
        (dst: *mut c_void, value: c_int, n: usize, stream: Handle);
    R_MEMSET_ASYNC_SPT shim_hipMemsetAsync_spt "hipMemsetAsync_spt" "hip_5.3" [work stream true]
        (dst: *mut c_void, value: c_int, n: usize, stream: Handle);
    // Synchronous copies/fills on the null stream (per-thread stream for `_spt`): the usual
    // first operation of a plain HIP program.
    R_MEMCPY shim_hipMemcpy "hipMemcpy" "hip_4.2" [work_null false]
        (dst: *mut c_void, src: *const c_void, n: usize, kind: Kind);
    R_MEMCPY_SPT shim_hipMemcpy_spt "hipMemcpy_spt" "hip_5.2" [work_null true]
        (dst: *mut c_void, src: *const c_void, n: usize, kind: Kind);
    R_MEMSET shim_hipMemset "hipMemset" "hip_4.2" [work_null false]
        (dst: *mut c_void, value: c_int, n: usize);
    R_MEMSET_SPT shim_hipMemset_spt "hipMemset_spt" "hip_5.2" [work_null true]
        (dst: *mut c_void, value: c_int, n: usize);
    R_MEMCPY_WITH_STREAM shim_hipMemcpyWithStream "hipMemcpyWithStream" "hip_4.2" [work stream false]
        (dst: *mut c_void, src: *const c_void, n: usize, kind: Kind, stream: Handle);
    R_MEMCPY_HTOD_ASYNC shim_hipMemcpyHtoDAsync "hipMemcpyHtoDAsync" "hip_4.2" [work stream false]
        (dst: *mut c_void, src: *const c_void, n: usize, stream: Handle);
    R_MEMCPY_DTOH_ASYNC shim_hipMemcpyDtoHAsync "hipMemcpyDtoHAsync" "hip_4.2" [work stream false]
        (dst: *mut c_void, src: *mut c_void, n: usize, stream: Handle);
    R_MEMCPY_DTOD_ASYNC shim_hipMemcpyDtoDAsync "hipMemcpyDtoDAsync" "hip_4.2" [work stream false]
        (dst: *mut c_void, src: *mut c_void, n: usize, stream: Handle);
    R_MEMCPY_PEER_ASYNC shim_hipMemcpyPeerAsync "hipMemcpyPeerAsync" "hip_4.2" [work stream false]
        (dst: *mut c_void, dst_device: c_int, src: *const c_void, src_device: c_int, n: usize,
         stream: Handle);
    R_MEMCPY_2D_ASYNC shim_hipMemcpy2DAsync "hipMemcpy2DAsync" "hip_4.2" [work stream false]
        (dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize,
         height: usize, kind: Kind, stream: Handle);
    R_MEMCPY_2D_ASYNC_SPT shim_hipMemcpy2DAsync_spt "hipMemcpy2DAsync_spt" "hip_5.3" [work stream true]
        (dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize,
         height: usize, kind: Kind, stream: Handle);
    R_MEMCPY_2D_TO_ARRAY_ASYNC shim_hipMemcpy2DToArrayAsync "hipMemcpy2DToArrayAsync" "hip_4.3"
        [work stream false]
        (dst: Handle, w_offset: usize, h_offset: usize, src: *const c_void, spitch: usize,
         width: usize, height: usize, kind: Kind, stream: Handle);
    R_MEMCPY_2D_TO_ARRAY_ASYNC_SPT shim_hipMemcpy2DToArrayAsync_spt "hipMemcpy2DToArrayAsync_spt" "hip_5.3"
        [work stream true]
        (dst: Handle, w_offset: usize, h_offset: usize, src: *const c_void, spitch: usize,
         width: usize, height: usize, kind: Kind, stream: Handle);
    R_MEMCPY_2D_FROM_ARRAY_ASYNC shim_hipMemcpy2DFromArrayAsync "hipMemcpy2DFromArrayAsync" "hip_4.2"
        [work stream false]
        (dst: *mut c_void, dpitch: usize, src: Handle, w_offset: usize, h_offset: usize,
         width: usize, height: usize, kind: Kind, stream: Handle);
    R_MEMCPY_2D_FROM_ARRAY_ASYNC_SPT shim_hipMemcpy2DFromArrayAsync_spt "hipMemcpy2DFromArrayAsync_spt"
        "hip_5.3" [work stream true]
        (dst: *mut c_void, dpitch: usize, src: Handle, w_offset: usize, h_offset: usize,
         width: usize, height: usize, kind: Kind, stream: Handle);
    R_MEMCPY_PARAM_2D_ASYNC shim_hipMemcpyParam2DAsync "hipMemcpyParam2DAsync" "hip_4.2" [work stream false]
        (copy: *const c_void, stream: Handle);
    R_MEMCPY_3D_ASYNC shim_hipMemcpy3DAsync "hipMemcpy3DAsync" "hip_4.2" [work stream false]
        (params: *const c_void, stream: Handle);
    R_MEMCPY_3D_ASYNC_SPT shim_hipMemcpy3DAsync_spt "hipMemcpy3DAsync_spt" "hip_5.3" [work stream true]
        (params: *const c_void, stream: Handle);
    R_DRV_MEMCPY_3D_ASYNC shim_hipDrvMemcpy3DAsync "hipDrvMemcpy3DAsync" "hip_4.2" [work stream false]
        (copy: *const c_void, stream: Handle);
    R_MEMCPY_TO_SYMBOL_ASYNC shim_hipMemcpyToSymbolAsync "hipMemcpyToSymbolAsync" "hip_4.2" [work stream false]
        (symbol: *const c_void, src: *const c_void, n: usize, offset: usize, kind: Kind, stream: Handle);
    R_MEMCPY_TO_SYMBOL_ASYNC_SPT shim_hipMemcpyToSymbolAsync_spt "hipMemcpyToSymbolAsync_spt" "hip_5.3"
        [work stream true]
        (symbol: *const c_void, src: *const c_void, n: usize, offset: usize, kind: Kind, stream: Handle);
    R_MEMCPY_FROM_SYMBOL_ASYNC shim_hipMemcpyFromSymbolAsync "hipMemcpyFromSymbolAsync" "hip_4.2"
        [work stream false]
        (dst: *mut c_void, symbol: *const c_void, n: usize, offset: usize, kind: Kind, stream: Handle);
    R_MEMCPY_FROM_SYMBOL_ASYNC_SPT shim_hipMemcpyFromSymbolAsync_spt "hipMemcpyFromSymbolAsync_spt" "hip_5.3"
        [work stream true]
        (dst: *mut c_void, symbol: *const c_void, n: usize, offset: usize, kind: Kind, stream: Handle);
    R_MEMCPY_ATOH_ASYNC shim_hipMemcpyAtoHAsync "hipMemcpyAtoHAsync" "hip_6.2" [work stream false]
        (dst: *mut c_void, src: Handle, src_offset: usize, n: usize, stream: Handle);
    R_MEMCPY_HTOA_ASYNC shim_hipMemcpyHtoAAsync "hipMemcpyHtoAAsync" "hip_6.2" [work stream false]
        (dst: Handle, dst_offset: usize, src: *const c_void, n: usize, stream: Handle);
    R_MEMSET_D8_ASYNC shim_hipMemsetD8Async "hipMemsetD8Async" "hip_4.2" [work stream false]
        (dst: *mut c_void, value: u8, count: usize, stream: Handle);
    R_MEMSET_D16_ASYNC shim_hipMemsetD16Async "hipMemsetD16Async" "hip_4.2" [work stream false]
        (dst: *mut c_void, value: u16, count: usize, stream: Handle);
    R_MEMSET_D32_ASYNC shim_hipMemsetD32Async "hipMemsetD32Async" "hip_4.2" [work stream false]
        (dst: *mut c_void, value: c_int, count: usize, stream: Handle);
    R_MEMSET_2D_ASYNC shim_hipMemset2DAsync "hipMemset2DAsync" "hip_4.2" [work stream false]
        (dst: *mut c_void, pitch: usize, value: c_int, width: usize, height: usize, stream: Handle);
    R_MEMSET_2D_ASYNC_SPT shim_hipMemset2DAsync_spt "hipMemset2DAsync_spt" "hip_5.3" [work stream true]
        (dst: *mut c_void, pitch: usize, value: c_int, width: usize, height: usize, stream: Handle);
    R_MEMSET_3D_ASYNC shim_hipMemset3DAsync "hipMemset3DAsync" "hip_4.2" [work stream false]
        (ptr: PitchedPtr, value: c_int, extent: Extent, stream: Handle);
    R_MEMSET_3D_ASYNC_SPT shim_hipMemset3DAsync_spt "hipMemset3DAsync_spt" "hip_5.3" [work stream true]
        (ptr: PitchedPtr, value: c_int, extent: Extent, stream: Handle);
    R_LAUNCH_HOST_FUNC shim_hipLaunchHostFunc "hipLaunchHostFunc" "hip_5.3" [work stream false]
        (stream: Handle, f: *const c_void, data: *mut c_void);
    R_LAUNCH_HOST_FUNC_SPT shim_hipLaunchHostFunc_spt "hipLaunchHostFunc_spt" "hip_5.3" [work stream true]
        (stream: Handle, f: *const c_void, data: *mut c_void);
    R_STREAM_ADD_CALLBACK shim_hipStreamAddCallback "hipStreamAddCallback" "hip_4.2" [work stream false]
        (stream: Handle, callback: *const c_void, data: *mut c_void, flags: u32);
    R_STREAM_ADD_CALLBACK_SPT shim_hipStreamAddCallback_spt "hipStreamAddCallback_spt" "hip_5.3"
        [work stream true]
        (stream: Handle, callback: *const c_void, data: *mut c_void, flags: u32);
    R_EVENT_RECORD shim_hipEventRecord "hipEventRecord" "hip_4.2" [work stream false]
        (event: Handle, stream: Handle);
    R_EVENT_RECORD_SPT shim_hipEventRecord_spt "hipEventRecord_spt" "hip_5.2" [work stream true]
        (event: Handle, stream: Handle);
    R_EVENT_RECORD_WITH_FLAGS shim_hipEventRecordWithFlags "hipEventRecordWithFlags" "hip_6.4"
        [work stream false]
        (event: Handle, stream: Handle, flags: u32);
    R_STREAM_BATCH_MEM_OP shim_hipStreamBatchMemOp "hipStreamBatchMemOp" "hip_6.4" [work stream false]
        (stream: Handle, count: u32, params: *mut c_void, flags: u32);
    R_STREAM_WAIT_EVENT shim_hipStreamWaitEvent "hipStreamWaitEvent" "hip_4.2" [work stream false]
        (stream: Handle, event: Handle, flags: u32);
    R_STREAM_WAIT_EVENT_SPT shim_hipStreamWaitEvent_spt "hipStreamWaitEvent_spt" "hip_5.2" [work stream true]
        (stream: Handle, event: Handle, flags: u32);

    // HIP 7.1's stream-ordered copies and fills.
    R_MEMCPY_BATCH_ASYNC shim_hipMemcpyBatchAsync "hipMemcpyBatchAsync" "hip_7.1" [work stream false]
        (dsts: *mut *mut c_void, srcs: *mut *mut c_void, sizes: *mut usize, count: usize,
         attrs: *mut c_void, attrs_idxs: *mut usize, num_attrs: usize, fail_idx: *mut usize,
         stream: Handle);
    R_MEMCPY_3D_BATCH_ASYNC shim_hipMemcpy3DBatchAsync "hipMemcpy3DBatchAsync" "hip_7.1" [work stream false]
        (num_ops: usize, ops: *mut c_void, fail_idx: *mut usize, flags: u64, stream: Handle);
    R_MEMCPY_3D_PEER_ASYNC shim_hipMemcpy3DPeerAsync "hipMemcpy3DPeerAsync" "hip_7.1" [work stream false]
        (p: *mut c_void, stream: Handle);
    R_MEMSET_D2D8_ASYNC shim_hipMemsetD2D8Async "hipMemsetD2D8Async" "hip_7.1" [work stream false]
        (dst: *mut c_void, pitch: usize, value: u8, width: usize, height: usize, stream: Handle);
    R_MEMSET_D2D16_ASYNC shim_hipMemsetD2D16Async "hipMemsetD2D16Async" "hip_7.1" [work stream false]
        (dst: *mut c_void, pitch: usize, value: u16, width: usize, height: usize, stream: Handle);
    R_MEMSET_D2D32_ASYNC shim_hipMemsetD2D32Async "hipMemsetD2D32Async" "hip_7.1" [work stream false]
        (dst: *mut c_void, pitch: usize, value: u32, width: usize, height: usize, stream: Handle);
    R_MEM_PREFETCH_ASYNC_V2 shim_hipMemPrefetchAsync_v2 "hipMemPrefetchAsync_v2" "hip_7.1" [work stream false]
        (ptr: *const c_void, count: usize, location: MemLocation, flags: u32, stream: Handle);
    // Older stream-ordered calls the export check found unwrapped (shim/tests/sid7_exports.rs).
    R_MEM_PREFETCH_ASYNC shim_hipMemPrefetchAsync "hipMemPrefetchAsync" "hip_4.2" [work stream false]
        (ptr: *const c_void, count: usize, device: c_int, stream: Handle);
    R_STREAM_WAIT_VALUE32 shim_hipStreamWaitValue32 "hipStreamWaitValue32" "hip_4.4" [work stream false]
        (stream: Handle, ptr: *mut c_void, value: u32, flags: u32, mask: u32);
    R_STREAM_WAIT_VALUE64 shim_hipStreamWaitValue64 "hipStreamWaitValue64" "hip_4.4" [work stream false]
        (stream: Handle, ptr: *mut c_void, value: u64, flags: u32, mask: u64);
    R_STREAM_WRITE_VALUE32 shim_hipStreamWriteValue32 "hipStreamWriteValue32" "hip_4.4" [work stream false]
        (stream: Handle, ptr: *mut c_void, value: u32, flags: u32);
    R_STREAM_WRITE_VALUE64 shim_hipStreamWriteValue64 "hipStreamWriteValue64" "hip_4.4" [work stream false]
        (stream: Handle, ptr: *mut c_void, value: u64, flags: u32);
    R_SIGNAL_EXT_SEM_ASYNC shim_hipSignalExternalSemaphoresAsync "hipSignalExternalSemaphoresAsync" "hip_4.3"
        [work stream false]
        (sems: *const c_void, params: *const c_void, n: u32, stream: Handle);
    R_WAIT_EXT_SEM_ASYNC shim_hipWaitExternalSemaphoresAsync "hipWaitExternalSemaphoresAsync" "hip_4.3"
        [work stream false]
        (sems: *const c_void, params: *const c_void, n: u32, stream: Handle);
    R_MALLOC_ASYNC shim_hipMallocAsync "hipMallocAsync" "hip_5.1" [work stream false]
        (ptr: *mut *mut c_void, size: usize, stream: Handle);
    R_FREE_ASYNC shim_hipFreeAsync "hipFreeAsync" "hip_5.1" [work stream false]
        (ptr: *mut c_void, stream: Handle);
    R_MALLOC_FROM_POOL_ASYNC shim_hipMallocFromPoolAsync "hipMallocFromPoolAsync" "hip_5.1" [work stream false]
        (ptr: *mut *mut c_void, size: usize, pool: Handle, stream: Handle);
    R_MEM_MAP_ARRAY_ASYNC shim_hipMemMapArrayAsync "hipMemMapArrayAsync" "hip_5.1" [work stream false]
        (list: *mut c_void, count: u32, stream: Handle);
    // With hipGraphInstantiateFlagUpload the graph is uploaded on `params->uploadStream`.
    R_GRAPH_INSTANTIATE_WITH_PARAMS shim_hipGraphInstantiateWithParams "hipGraphInstantiateWithParams"
        "hip_6.1" [upload_params params]
        (exec: *mut Handle, graph: Handle, params: *mut c_void);
    R_GRAPH_UPLOAD shim_hipGraphUpload "hipGraphUpload" "hip_5.3" [work stream false]
        (exec: Handle, stream: Handle);
    R_GRAPHICS_MAP shim_hipGraphicsMapResources "hipGraphicsMapResources" "hip_4.3" [work stream false]
        (count: c_int, resources: *mut Handle, stream: Handle);
    R_GRAPHICS_UNMAP shim_hipGraphicsUnmapResources "hipGraphicsUnmapResources" "hip_4.3" [work stream false]
        (count: c_int, resources: *mut Handle, stream: Handle);
    // Synchronous copies and fills on the per-thread stream (their default-stream forms other
    // than hipMemcpy/hipMemset are not wrapped; docs/shim.md, "HIP 7.2").
    R_MEMCPY_2D_SPT shim_hipMemcpy2D_spt "hipMemcpy2D_spt" "hip_5.2" [work_null true]
        (dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize,
         height: usize, kind: Kind);
    R_MEMCPY_3D_SPT shim_hipMemcpy3D_spt "hipMemcpy3D_spt" "hip_5.2" [work_null true]
        (p: *const c_void);
    R_MEMCPY_FROM_ARRAY_SPT shim_hipMemcpyFromArray_spt "hipMemcpyFromArray_spt" "hip_5.3" [work_null true]
        (dst: *mut c_void, src: Handle, w_offset: usize, h_offset: usize, count: usize, kind: Kind);
    R_MEMCPY_FROM_SYMBOL_SPT shim_hipMemcpyFromSymbol_spt "hipMemcpyFromSymbol_spt" "hip_5.2" [work_null true]
        (dst: *mut c_void, symbol: *const c_void, n: usize, offset: usize, kind: Kind);
    R_MEMCPY_TO_SYMBOL_SPT shim_hipMemcpyToSymbol_spt "hipMemcpyToSymbol_spt" "hip_5.2" [work_null true]
        (symbol: *const c_void, src: *const c_void, n: usize, offset: usize, kind: Kind);
    R_MEMSET_2D_SPT shim_hipMemset2D_spt "hipMemset2D_spt" "hip_5.2" [work_null true]
        (dst: *mut c_void, pitch: usize, value: c_int, width: usize, height: usize);
    R_MEMSET_3D_SPT shim_hipMemset3D_spt "hipMemset3D_spt" "hip_5.2" [work_null true]
        (ptr: PitchedPtr, value: c_int, extent: Extent);
    R_MEMCPY_2D_TO_ARRAY_SPT shim_hipMemcpy2DToArray_spt "hipMemcpy2DToArray_spt" "hip_5.2" [work_null true]
        (dst: Handle, w_offset: usize, h_offset: usize, src: *const c_void, spitch: usize,
         width: usize, height: usize, kind: Kind);
    R_MEMCPY_2D_FROM_ARRAY_SPT shim_hipMemcpy2DFromArray_spt "hipMemcpy2DFromArray_spt" "hip_5.2"
        [work_null true]
        (dst: *mut c_void, dpitch: usize, src: Handle, w_offset: usize, h_offset: usize,
         width: usize, height: usize, kind: Kind);

    // ---- synchronisation and queries: never held ----
    R_STREAM_SYNC shim_hipStreamSynchronize "hipStreamSynchronize" "hip_4.2" [sync stream false]
        (stream: Handle);
    R_STREAM_SYNC_SPT shim_hipStreamSynchronize_spt "hipStreamSynchronize_spt" "hip_5.2" [sync stream true]
        (stream: Handle);
    R_STREAM_QUERY shim_hipStreamQuery "hipStreamQuery" "hip_4.2" [sync stream false]
        (stream: Handle);
    R_STREAM_QUERY_SPT shim_hipStreamQuery_spt "hipStreamQuery_spt" "hip_5.2" [sync stream true]
        (stream: Handle);
    R_EVENT_SYNC shim_hipEventSynchronize "hipEventSynchronize" "hip_4.2" [forward]
        (event: Handle);
    R_DEVICE_SYNC shim_hipDeviceSynchronize "hipDeviceSynchronize" "hip_4.2" [device_sync] ();
    R_CTX_SYNC shim_hipCtxSynchronize "hipCtxSynchronize" "hip_4.2" [device_sync] ();
}

/// The wrapper of `name` if `got` is the real function the shim resolved for it (a lookup of a
/// wrapped function on a handle of the runtime).
pub fn wrapper_for(name: &std::ffi::CStr, got: usize) -> Option<*const ()> {
    let name = name.to_str().ok()?;
    WRAPPERS
        .iter()
        .find(|(real, _)| real.name() == name)
        .filter(|(real, _)| real.get() == Some(got))
        .map(|(_, w)| w.0)
}

/// After a successful `hipGetProcAddress`: if the runtime handed out one of the functions the
/// shim wraps, hand out the wrapper instead (the runtime looks symbols up in itself, which
/// would bypass the preload).
///
/// # Safety
/// `pfn` is null or points at the function pointer the real call wrote.
unsafe fn substitute_wrapper(r: HipError, pfn: *mut *mut c_void) {
    if r != 0 || pfn.is_null() {
        return;
    }
    // SAFETY: caller contract.
    let got = unsafe { pfn.read() } as usize;
    if got == 0 {
        return;
    }
    let found = crate::guard::guarded(|| {
        WRAPPERS
            .iter()
            .find(|(real, _)| real.get() == Some(got))
            .map(|(real, w)| (real.name(), w.0))
    })
    .flatten();
    if let Some((name, w)) = found {
        crate::log::debug(|| format!("hipGetProcAddress: {name} -> shim wrapper"));
        // SAFETY: caller contract; we store a function of the same prototype.
        unsafe { pfn.write(w as *mut c_void) };
    }
}

/// `ioctl(2)`, interposed on libc's.
///
/// In C `ioctl` is variadic (`int ioctl(int, unsigned long, ...)`); defining C-variadic
/// functions is unstable in Rust, so it is declared with one pointer-sized third argument.
/// On x86-64 SysV that is ABI-identical for every real ioctl (the single optional argument
/// travels in `rdx` either way, and the callee ignores `al`), which is what every ioctl
/// interposer relies on. Non-amdkfd requests cost one compare before libc's `ioctl`.
///
/// # Safety
/// As for `ioctl(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    if !crate::hook::is_kfd(request) {
        // SAFETY: forwarded unchanged.
        return unsafe { crate::libc_ioctl::forward(fd, request, arg) };
    }
    // SAFETY: the caller's amdkfd request.
    unsafe { crate::hook::kfd_ioctl(fd, request, arg) }
}

/// `int kfdq_request_begin(void)`: a request is starting (docs/shim.md, "Request hints";
/// shim/include/kfdq.h). Unversioned: the shim's own symbol, looked up by applications with
/// `dlsym(RTLD_DEFAULT, ...)`.
#[unsafe(no_mangle)]
pub extern "C" fn kfdq_request_begin() -> c_int {
    crate::hint::begin()
}

/// `int kfdq_request_end(void)`: the request begun last is done (docs/shim.md, "Request
/// hints").
#[unsafe(no_mangle)]
pub extern "C" fn kfdq_request_end() -> c_int {
    crate::hint::end()
}
