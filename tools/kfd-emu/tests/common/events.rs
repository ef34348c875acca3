//! WAIT_EVENTS as the thunk calls it, for the event tests: one `struct kfd_event_data` per
//! event, and what the call writes back (the result, the timeout left, each event's age).

use kfd_sys::*;

use super::Kfd;

/// One `struct kfd_event_data` (48 bytes): the age at 0, the id at 40.
pub fn event_data(id: u32, age: u64) -> [u8; 48] {
    assert_eq!(size_of::<kfd_event_data>(), 48);
    assert_eq!(std::mem::offset_of!(kfd_event_data, event_id), 40);
    let mut d = [0u8; 48];
    d[..8].copy_from_slice(&age.to_ne_bytes());
    d[40..44].copy_from_slice(&id.to_ne_bytes());
    d
}

/// What one WAIT_EVENTS returned and wrote back.
#[derive(Debug)]
pub struct Waited {
    /// The ioctl's result.
    pub result: Result<i32, i32>,
    /// `wait_result`.
    pub wait_result: u32,
    /// `timeout` as written back (the time left after an interrupted wait), ms.
    pub timeout_left: u32,
    /// Each event's age as written back, in the order given.
    pub ages: Vec<u64>,
}

/// WAIT_EVENTS on `events` (see [`event_data`]).
pub fn wait_events(kfd: &Kfd, events: &[[u8; 48]], all: bool, timeout_ms: u32) -> Waited {
    let mut data: Vec<u8> = events.iter().flatten().copied().collect();
    let mut a = kfd_ioctl_wait_events_args {
        events_ptr: data.as_mut_ptr() as u64,
        num_events: events.len() as u32,
        wait_for_all: u32::from(all),
        timeout: timeout_ms,
        wait_result: 99,
    };
    let result = kfd.ioctl(AMDKFD_IOC_WAIT_EVENTS, &mut a);
    let ages = data
        .chunks_exact(48)
        .map(|c| u64::from_ne_bytes(c[..8].try_into().unwrap()))
        .collect();
    Waited {
        result,
        wait_result: a.wait_result,
        timeout_left: a.timeout,
        ages,
    }
}
