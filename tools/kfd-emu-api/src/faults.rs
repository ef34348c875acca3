//! The failures a test injects and what the mount's `kfd-emu/faults` file shows of them
//! (kfd-emu applies them: its `faults.rs` and `faults_file.rs`).

use serde::{Deserialize, Serialize};

use crate::fault_spec::{Failure, FaultSpec, When};

/// One injected failure: every `every`-th call of `ioctl` (1 = every call) on `dev/kfd` fails
/// with `errno` instead of running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// The request, as the kernel header names it (`kfd_sys::AMDKFD_IOC_DESTROY_QUEUE`);
    /// matched by its number (`_IOC_NR`), as the kernel dispatches.
    pub ioctl: u32,
    /// The errno the call fails with (`libc::EBUSY`).
    pub errno: i32,
    /// Fail one call in `every` (the `every`-th, `2 * every`-th, ...); 0 and 1 fail every call.
    pub every: u32,
}

impl Fault {
    /// `ioctl` fails with `errno` on every call.
    pub fn always(ioctl: u32, errno: i32) -> Fault {
        Fault {
            ioctl,
            errno,
            every: 1,
        }
    }
}

impl From<Fault> for FaultSpec {
    fn from(f: Fault) -> FaultSpec {
        FaultSpec {
            ioctl: f.ioctl,
            dbg_op: None,
            failure: Failure::Errno(f.errno),
            when: When::Every(f.every),
            times: None,
        }
    }
}

/// What `kfd-emu/faults` shows of one failure in effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultStats {
    /// The spec, in its text form.
    pub spec: String,
    /// Matching calls seen.
    pub calls: u64,
    /// Calls it failed.
    pub failed: u64,
}

/// What reading `kfd-emu/faults` gives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultsFile {
    /// The failures in effect, in the order they were added.
    pub faults: Vec<FaultStats>,
    /// Why the last refused write was refused (the rule and the fix); `None` after a good one.
    pub refused: Option<String>,
}
