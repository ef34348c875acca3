//! Every `AMDKFD_IOC_*` kfdq uses equals the number nix computes from 'K', the nr and the
//! argument struct's size (an encoding independent of bindgen's macro expansion).
// Casts are deliberate: constant types depend on which header kfd-sys bound.
#![allow(clippy::unnecessary_cast)]

use kfd_sys as sys;
use std::mem::size_of;

macro_rules! check {
    ($name:ident, $dir:ident, $nr:expr, $ty:ty) => {{
        let expected = nix::$dir!(b'K', $nr, size_of::<$ty>()) as u64;
        assert_eq!(
            sys::$name as u64,
            expected,
            "{} is {:#x}, nix computes {:#x}",
            stringify!($name),
            sys::$name as u64,
            expected
        );
    }};
}

#[test]
fn request_numbers_match_nix_encoding() {
    check!(
        AMDKFD_IOC_GET_VERSION,
        request_code_read,
        0x01,
        sys::kfd_ioctl_get_version_args
    );
    check!(
        AMDKFD_IOC_CREATE_QUEUE,
        request_code_readwrite,
        0x02,
        sys::kfd_ioctl_create_queue_args
    );
    check!(
        AMDKFD_IOC_DESTROY_QUEUE,
        request_code_readwrite,
        0x03,
        sys::kfd_ioctl_destroy_queue_args
    );
    check!(
        AMDKFD_IOC_UPDATE_QUEUE,
        request_code_write,
        0x07,
        sys::kfd_ioctl_update_queue_args
    );
    check!(
        AMDKFD_IOC_ACQUIRE_VM,
        request_code_write,
        0x15,
        sys::kfd_ioctl_acquire_vm_args
    );
    check!(
        AMDKFD_IOC_ALLOC_MEMORY_OF_GPU,
        request_code_readwrite,
        0x16,
        sys::kfd_ioctl_alloc_memory_of_gpu_args
    );
    check!(
        AMDKFD_IOC_FREE_MEMORY_OF_GPU,
        request_code_write,
        0x17,
        sys::kfd_ioctl_free_memory_of_gpu_args
    );
    check!(
        AMDKFD_IOC_MAP_MEMORY_TO_GPU,
        request_code_readwrite,
        0x18,
        sys::kfd_ioctl_map_memory_to_gpu_args
    );
    check!(
        AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU,
        request_code_readwrite,
        0x19,
        sys::kfd_ioctl_unmap_memory_from_gpu_args
    );
    check!(
        AMDKFD_IOC_SET_CU_MASK,
        request_code_write,
        0x1A,
        sys::kfd_ioctl_set_cu_mask_args
    );
    check!(
        AMDKFD_IOC_GET_QUEUE_WAVE_STATE,
        request_code_readwrite,
        0x1B,
        sys::kfd_ioctl_get_queue_wave_state_args
    );
    check!(
        AMDKFD_IOC_RUNTIME_ENABLE,
        request_code_readwrite,
        0x25,
        sys::kfd_ioctl_runtime_enable_args
    );
    check!(
        AMDKFD_IOC_DBG_TRAP,
        request_code_readwrite,
        0x26,
        sys::kfd_ioctl_dbg_trap_args
    );
}

#[test]
fn struct_sizes_are_the_documented_ones() {
    // docs/kernel-interface.md §1: sizes of the 1.17 layouts.
    assert_eq!(size_of::<sys::kfd_ioctl_create_queue_args>(), 96);
    assert_eq!(size_of::<sys::kfd_ioctl_update_queue_args>(), 24);
    assert_eq!(size_of::<sys::kfd_ioctl_set_cu_mask_args>(), 16);
    assert_eq!(size_of::<sys::kfd_ioctl_get_queue_wave_state_args>(), 24);
    assert_eq!(size_of::<sys::kfd_ioctl_dbg_trap_args>(), 32);
    assert_eq!(size_of::<sys::kfd_queue_snapshot_entry>(), 64);
    assert_eq!(size_of::<sys::kfd_context_save_area_header>(), 40);
    assert_eq!(size_of::<sys::kfd_runtime_info>(), 16);
}

#[test]
fn exception_mask_helper() {
    assert_eq!(sys::kfd_ec_mask(sys::EC_QUEUE_NEW as u32), 0x4000_0000);
    assert_eq!(sys::kfd_ec_mask(1), 1);
}

#[test]
fn bound_header_is_reported() {
    assert!(sys::BOUND_HEADER.ends_with(".h"), "{}", sys::BOUND_HEADER);
    let minor: u32 = sys::BOUND_HEADER_MINOR.parse().expect("numeric minor");
    assert!(
        minor >= 17,
        "kfd-sys supports KFD 1.17 and newer, got 1.{minor}"
    );
    assert_eq!(sys::KFD_IOCTL_MINOR_VERSION as u32, minor);
    assert_eq!(sys::KFD_IOCTL_MAJOR_VERSION as u32, 1);
}
