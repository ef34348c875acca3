//! Argument structs as bytes: the plain-old-data kfd uapi structs the handlers read from and
//! write to the raw argument buffers FUSE passes.

/// Plain-old-data argument structs that may be read from and written to raw bytes.
///
/// # Safety
/// Implementors must be `repr(C)` structs made only of integers (possibly in
/// unions of such structs), so that every byte pattern is a valid value.
pub(crate) unsafe trait Pod: Copy + Default {}

macro_rules! pod {
    ($($t:ty),* $(,)?) => {
        // SAFETY: bindgen-generated repr(C) structs of __u32/__u64 fields only.
        $(unsafe impl Pod for $t {})*
    };
}

pod!(
    kfd_sys::kfd_ioctl_get_version_args,
    kfd_sys::kfd_ioctl_create_queue_args,
    kfd_sys::kfd_ioctl_destroy_queue_args,
    kfd_sys::kfd_ioctl_update_queue_args,
    kfd_sys::kfd_ioctl_set_cu_mask_args,
    kfd_sys::kfd_ioctl_get_queue_wave_state_args,
    kfd_sys::kfd_ioctl_acquire_vm_args,
    kfd_sys::kfd_ioctl_alloc_memory_of_gpu_args,
    kfd_sys::kfd_ioctl_free_memory_of_gpu_args,
    kfd_sys::kfd_ioctl_map_memory_to_gpu_args,
    kfd_sys::kfd_ioctl_unmap_memory_from_gpu_args,
    kfd_sys::kfd_ioctl_runtime_enable_args,
    kfd_sys::kfd_runtime_info,
    kfd_sys::kfd_ioctl_dbg_trap_args,
    kfd_sys::kfd_ioctl_dbg_trap_enable_args,
    kfd_sys::kfd_ioctl_dbg_trap_set_exceptions_enabled_args,
    kfd_sys::kfd_ioctl_dbg_trap_suspend_queues_args,
    kfd_sys::kfd_ioctl_dbg_trap_resume_queues_args,
    kfd_sys::kfd_ioctl_dbg_trap_query_debug_event_args,
    kfd_sys::kfd_ioctl_dbg_trap_queue_snapshot_args,
    kfd_sys::kfd_ioctl_dbg_trap_device_snapshot_args,
    kfd_sys::kfd_queue_snapshot_entry,
    kfd_sys::kfd_process_device_apertures,
    kfd_sys::kfd_ioctl_get_process_apertures_new_args,
    kfd_sys::kfd_ioctl_set_memory_policy_args,
    kfd_sys::kfd_ioctl_get_clock_counters_args,
    kfd_sys::kfd_ioctl_set_scratch_backing_va_args,
    kfd_sys::kfd_ioctl_get_available_memory_args,
    kfd_sys::kfd_ioctl_set_trap_handler_args,
    kfd_sys::kfd_ioctl_set_xnack_mode_args,
    kfd_sys::kfd_ioctl_create_event_args,
    kfd_sys::kfd_ioctl_destroy_event_args,
    kfd_sys::kfd_ioctl_wait_events_args,
);

/// Reads a `T` from the front of `buf` (missing trailing bytes read as zero).
pub(crate) fn load<T: Pod>(buf: &[u8]) -> T {
    let mut v = T::default();
    let n = buf.len().min(size_of::<T>());
    // SAFETY: `v` is a valid T of size_of::<T>() bytes, n <= that size and <= buf.len();
    // T is Pod, so any bytes form a valid value.
    unsafe {
        std::ptr::copy_nonoverlapping(buf.as_ptr(), (&raw mut v).cast::<u8>(), n);
    }
    v
}

/// Writes `v` to the front of `buf` (truncated to `buf.len()`).
pub(crate) fn store<T: Pod>(buf: &mut [u8], v: &T) {
    let n = buf.len().min(size_of::<T>());
    // SAFETY: reads n <= size_of::<T>() bytes of `*v` and writes n <= buf.len() bytes;
    // Pod types have no padding-dependent invariants and the regions do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping((&raw const *v).cast::<u8>(), buf.as_mut_ptr(), n);
    }
}

/// The bytes of a Pod value.
pub(crate) fn bytes_of<T: Pod>(v: &T) -> Vec<u8> {
    let mut b = vec![0u8; size_of::<T>()];
    store(&mut b, v);
    b
}

/// `_IOC_SIZE` of an ioctl request number: the argument size it encodes.
pub(crate) const fn ioc_size(cmd: u32) -> usize {
    ((cmd >> 16) & 0x3fff) as usize
}

// Fixed-width fields of byte buffers (uapi and DRM structs, AQL packets, kernel arguments, code
// objects) in the host's byte order: the emulator serves x86-64 clients, whose order is also the
// GPU's and the AMDGPU ELF format's (little-endian). `None` past the end of the buffer.

/// The `u16` at byte `at` of `b`.
pub(crate) fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

/// The `u32` at byte `at` of `b`.
pub(crate) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// The `u64` at byte `at` of `b`.
pub(crate) fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// Writes `v` at byte `at` of `b` (nothing past the end).
pub(crate) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    if let Some(d) = b.get_mut(at..at.saturating_add(4)) {
        d.copy_from_slice(&v.to_ne_bytes());
    }
}

/// Writes `v` at byte `at` of `b` (nothing past the end).
pub(crate) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    if let Some(d) = b.get_mut(at..at.saturating_add(8)) {
        d.copy_from_slice(&v.to_ne_bytes());
    }
}
