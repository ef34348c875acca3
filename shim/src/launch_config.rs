//! Streams named inside the structures a launch passes by pointer: HIP 7's launch
//! configurations (`hipLaunchConfig_t`, `HIP_LAUNCH_CONFIG`) and the multi-device launches'
//! parameter lists (`hipLaunchParams`, `hipFunctionLaunchParams`), and the upload stream of
//! `hipGraphInstantiateParams`. The offsets are the C
//! layouts of HIP 7.2.4's `hip_runtime_api.h` (docs/shim.md, "HIP 7.2").

/// The most parameter structs read from one multi-device list (no node has more GPUs; a
/// larger count gates on the first ones, and the real function judges the rest).
const MAX_DEVICES: usize = 64;

/// The `hipStream_t` at byte `offset` of the structure at `p`; the null stream for a null `p`.
///
/// # Safety
/// `p` is null or points at a structure of at least `offset + 8` bytes (the caller's argument,
/// which the real function reads the same way).
pub unsafe fn stream_at(p: *const u8, offset: usize) -> usize {
    if p.is_null() {
        return 0;
    }
    // SAFETY: caller contract; the field may be unaligned in a packed caller structure.
    unsafe { p.add(offset).cast::<usize>().read_unaligned() }
}

/// The streams of the first `n` (at most [`MAX_DEVICES`]) structures of `size` bytes at `list`,
/// each at byte `offset`.
///
/// # Safety
/// `list` is null or points at `n` structures of `size` bytes, each holding a stream at
/// `offset` (the caller's argument, which the real function reads the same way).
pub unsafe fn streams_of(
    list: *const u8,
    n: usize,
    size: usize,
    offset: usize,
) -> Vec<crate::launch::StreamRef> {
    if list.is_null() {
        return Vec::new();
    }
    (0..n.min(MAX_DEVICES))
        .map(|i| {
            // SAFETY: caller contract: structure i of the list.
            let s = unsafe { stream_at(list.add(i * size), offset) };
            crate::launch::StreamRef::new(s, false)
        })
        .collect()
}

/// `hipGraphInstantiateFlagUpload`.
const INSTANTIATE_FLAG_UPLOAD: u64 = 2;

/// The upload stream of a `hipGraphInstantiateParams` (flags at byte 8, `uploadStream` at 24)
/// when its flags ask for the upload; `None` when they do not (nothing is enqueued) or `p` is
/// null.
///
/// # Safety
/// `p` is null or points at a `hipGraphInstantiateParams` (32 bytes).
pub unsafe fn upload_stream(p: *const u8) -> Option<usize> {
    if p.is_null() {
        return None;
    }
    // SAFETY: caller contract: the flags field of the structure.
    let flags = unsafe { p.add(8).cast::<u64>().read_unaligned() };
    // SAFETY: caller contract.
    (flags & INSTANTIATE_FLAG_UPLOAD != 0).then(|| unsafe { stream_at(p, 24) })
}
