//! The zerocopy derives of the listed structs (build/derives.rs): bytes are the C layout in the
//! host's order, and reading and writing round-trip.

use core::mem::{offset_of, size_of};

use kfd_sys as sys;
use kfd_sys::zerocopy::{FromBytes, IntoBytes};

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
}

#[test]
fn context_save_area_header_bytes_are_its_fields_at_their_offsets() {
    type H = sys::kfd_context_save_area_header;
    let mut h = H {
        debug_offset: 0x1122_3344,
        debug_size: 0x5566_7788,
        err_payload_addr: 0x0102_0304_0506_0708,
        err_event_id: 9,
        reserved1: 10,
        ..Default::default()
    };
    h.wave_state.control_stack_offset = 1;
    h.wave_state.wave_state_size = 4;
    let b = h.as_bytes();
    assert_eq!(b.len(), size_of::<H>());
    assert_eq!(u32_at(b, offset_of!(H, wave_state)), 1);
    assert_eq!(u32_at(b, offset_of!(H, wave_state) + 12), 4);
    assert_eq!(u32_at(b, offset_of!(H, debug_offset)), 0x1122_3344);
    assert_eq!(u32_at(b, offset_of!(H, debug_size)), 0x5566_7788);
    assert_eq!(
        u64_at(b, offset_of!(H, err_payload_addr)),
        0x0102_0304_0506_0708
    );
    assert_eq!(u32_at(b, offset_of!(H, err_event_id)), 9);
    assert_eq!(u32_at(b, offset_of!(H, reserved1)), 10);
}

#[test]
fn create_queue_args_round_trip_through_bytes() {
    type A = sys::kfd_ioctl_create_queue_args;
    let a = A {
        ring_base_address: 0x7f00_0000_1000,
        ring_size: 4096,
        gpu_id: 0xb1a0,
        queue_priority: 15,
        ctl_stack_size: 12_288,
        ..Default::default()
    };
    let mut buf = a.as_bytes().to_vec();
    buf.extend_from_slice(&[0xee; 8]);
    let (back, rest) = A::read_from_prefix(&buf).unwrap();
    assert_eq!(back, a);
    assert_eq!(rest, [0xee; 8]);
    assert_eq!(u32_at(&buf, offset_of!(A, queue_priority)), 15);
    // Too short a buffer is an error, not a partial value.
    assert!(A::read_from_prefix(&buf[..size_of::<A>() - 1]).is_err());
}
