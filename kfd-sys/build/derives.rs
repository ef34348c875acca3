//! Which generated structs derive zerocopy's byte conversions, and the bindgen callback that
//! adds the derives.
//!
//! The rule (documented for users in `src/lib.rs`, "Byte conversions"): a struct is listed when
//! some part of kfdq copies it to or from raw bytes, and it is fixed-size with no implicit
//! padding and no union. `IntoBytes` exposes every byte of a value, so zerocopy's derive refuses
//! a struct with padding at compile time: a wrong entry fails the build, never the program.
//! Listing names, rather than deriving on every struct and excluding some, keeps the build
//! working against newer headers, whose new structs may have padding (`kfd_ioctl_criu_args`),
//! unions of unequal members (`kfd_event_data`, `kfd_ioctl_dbg_trap_args`,
//! `kfd_ioctl_profiler_args`) or a flexible array (`kfd_ioctl_svm_args`), none of which can
//! derive all four traits. Every listed struct has had the same layout since KFD 1.17.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use bindgen::callbacks::{DeriveInfo, ParseCallbacks, TypeKind};

/// The derives every listed struct gets.
const DERIVES: [&str; 4] = [
    "zerocopy::FromBytes",
    "zerocopy::IntoBytes",
    "zerocopy::Immutable",
    "zerocopy::KnownLayout",
];

/// The structs that derive [`DERIVES`]: the ioctl arguments the emulator and the shim read
/// from and write to argument buffers, the records those arguments point at, and the
/// context-save-area header the safe layer writes into GPU memory.
const BYTE_STRUCTS: &[&str] = &[
    // queues
    "kfd_ioctl_get_version_args",
    "kfd_ioctl_create_queue_args",
    "kfd_ioctl_destroy_queue_args",
    "kfd_ioctl_update_queue_args",
    "kfd_ioctl_set_cu_mask_args",
    "kfd_ioctl_get_queue_wave_state_args",
    "kfd_context_save_area_header",
    "kfd_context_save_area_header__bindgen_ty_1",
    // memory
    "kfd_ioctl_acquire_vm_args",
    "kfd_ioctl_alloc_memory_of_gpu_args",
    "kfd_ioctl_free_memory_of_gpu_args",
    "kfd_ioctl_map_memory_to_gpu_args",
    "kfd_ioctl_unmap_memory_from_gpu_args",
    "kfd_ioctl_get_available_memory_args",
    "kfd_ioctl_set_scratch_backing_va_args",
    "kfd_ioctl_set_memory_policy_args",
    "kfd_ioctl_set_xnack_mode_args",
    // device
    "kfd_process_device_apertures",
    "kfd_ioctl_get_process_apertures_new_args",
    "kfd_ioctl_get_clock_counters_args",
    "kfd_ioctl_get_tile_config_args",
    "kfd_ioctl_set_trap_handler_args",
    // events
    "kfd_ioctl_create_event_args",
    "kfd_ioctl_destroy_event_args",
    "kfd_ioctl_wait_events_args",
    // debugger: the operations' argument structs, not the `kfd_ioctl_dbg_trap_args` union
    "kfd_ioctl_runtime_enable_args",
    "kfd_runtime_info",
    "kfd_ioctl_dbg_trap_enable_args",
    "kfd_ioctl_dbg_trap_set_exceptions_enabled_args",
    "kfd_ioctl_dbg_trap_suspend_queues_args",
    "kfd_ioctl_dbg_trap_resume_queues_args",
    "kfd_ioctl_dbg_trap_query_debug_event_args",
    "kfd_ioctl_dbg_trap_queue_snapshot_args",
    "kfd_ioctl_dbg_trap_device_snapshot_args",
    "kfd_queue_snapshot_entry",
];

/// Adds [`DERIVES`] to the structs of [`BYTE_STRUCTS`] and remembers which it met (clones share
/// the record, so the build script keeps one after handing bindgen another).
#[derive(Debug, Default, Clone)]
pub struct ByteDerives {
    derived: Arc<Mutex<BTreeSet<String>>>,
}

impl ByteDerives {
    /// Listed structs the header did not declare (all exist since KFD 1.17: a name here is a
    /// typo in the list).
    pub fn missing(&self) -> Vec<&'static str> {
        let derived = self.derived.lock().unwrap_or_else(PoisonError::into_inner);
        BYTE_STRUCTS
            .iter()
            .copied()
            .filter(|name| !derived.contains(*name))
            .collect()
    }
}

impl ParseCallbacks for ByteDerives {
    fn add_derives(&self, info: &DeriveInfo<'_>) -> Vec<String> {
        if info.kind != TypeKind::Struct || !BYTE_STRUCTS.contains(&info.name) {
            return Vec::new();
        }
        self.derived
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(info.name.to_string());
        DERIVES.iter().map(|d| d.to_string()).collect()
    }
}
