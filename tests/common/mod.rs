//! The root crate's test harness: what tools/test-support shares (the privileged-test rule, a
//! private kfd-emu mount per test, waiting on conditions), and kfdq's view of a mount.
#![allow(dead_code, unused_imports)]

pub mod policy;

pub use kfd_emu::MountedEmu;
pub use test_support::bins::workspace_bin;
pub use test_support::emu::{Emu, EmuConfig, Preset, Stats, mount, mount_preset};
pub use test_support::hold::Holder;
pub use test_support::wait::WAIT_LIMIT;
pub use test_support::wait_for;

use kfdq::kfd::Root;

/// The emulator as kfdq's safe layer sees it.
pub trait KfdRoot {
    /// The mount point as a [`Root`].
    fn kfd_root(&self) -> Root;
}

impl KfdRoot for Emu {
    fn kfd_root(&self) -> Root {
        Root::new(self.root())
    }
}

/// Whether `addr` lies in a mapping of this process (`/proc/self/maps`).
pub fn mapped(addr: u64) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
    maps.lines().any(|l| {
        let range = l.split_whitespace().next().unwrap_or("");
        let mut ends = range.split('-').map(|x| u64::from_str_radix(x, 16));
        matches!((ends.next(), ends.next()), (Some(Ok(a)), Some(Ok(b))) if (a..b).contains(&addr))
    })
}

/// A real `kfdqd` on `root` with configuration file `conf` (which names its socket), its stderr
/// in `log`; returned once it answers on `sock`.
pub fn start_kfdqd(
    root: &std::path::Path,
    conf: &std::path::Path,
    sock: &std::path::Path,
    log: &std::path::Path,
) -> std::process::Child {
    let child = std::process::Command::new(workspace_bin("kfdqd"))
        .arg("--root")
        .arg(root)
        .arg("--config")
        .arg(conf)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(log).expect("create kfdqd's log"))
        .spawn()
        .expect("start kfdqd");
    test_support::wait::wait_value("kfdqd to answer", WAIT_LIMIT, || agent_status(sock));
    child
}

/// kfdqd's status over its socket (`None` until it answers).
pub fn agent_status(sock: &std::path::Path) -> Option<kfdq::proto::control::NodeStatus> {
    use kfdq::proto::{LineReader, Reply, Request, encode};
    use std::io::Write;
    let mut s = std::os::unix::net::UnixStream::connect(sock).ok()?;
    s.set_read_timeout(Some(WAIT_LIMIT)).ok()?;
    s.write_all(&encode(&Request::Status)).ok()?;
    match LineReader::new(std::io::BufReader::new(s))
        .next::<Reply>()
        .ok()?
    {
        Reply::Status(st) => Some(*st),
        _ => None,
    }
}

/// Sends `sig` to `child`.
pub fn signal(child: &std::process::Child, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig)
        .expect("signal the child");
}
