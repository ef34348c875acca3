//! The kernel side: the KFD interface, amdgpu's scheduler parameters, the kernel release (does it
//! still program per-queue priority?) and Yama's ptrace scope (the tracer path).

use std::path::{Path, PathBuf};

use super::{Finding, Status};
use crate::kfd::{Kfd, Root};

/// amdgpu's `sched_policy` module parameter (`drivers/gpu/drm/amd/amdgpu/amdgpu_drv.c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SchedPolicy {
    /// 0: the hardware scheduler (HWS) with oversubscription (the default).
    Hws,
    /// 1: HWS without oversubscription: CREATE_QUEUE fails past the hardware slots.
    HwsNoOversubscription,
    /// 2: no HWS: the driver maps queues itself; the debugger API is refused.
    NoHws,
    /// Not readable (no amdgpu module parameters under the root).
    Unknown,
}

/// Whether the kernel writes the KFD queue priority into the MQD's `cp_hqd_queue_priority`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueuePriority {
    /// Kernels before upstream commit 73463e26f7e2 (Linux 7.0): priority 0..15 is programmed,
    /// and the CP prefers the higher queue among resident queues of a pipe.
    Programmed,
    /// Since that commit only the pipe priority remains (0-6 low, 7-10 medium, 11-15 high).
    PipeOnly,
    /// The kernel release could not be read.
    Unknown,
}

impl QueuePriority {
    /// Its name in node labels and docs: `queue`, `pipe` or `unknown`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            QueuePriority::Programmed => "queue",
            QueuePriority::PipeOnly => "pipe",
            QueuePriority::Unknown => "unknown",
        }
    }
}

/// What the kernel checks learnt, for the per-partition verdict.
#[derive(Debug)]
pub(crate) struct NodeFacts {
    /// The open KFD (none when /dev/kfd could not be opened).
    pub kfd: Option<Kfd>,
    pub sched_policy: SchedPolicy,
    /// `cwsr_enable`: waves are context-saved on preemption (None: not readable).
    pub cwsr: Option<bool>,
    pub queue_priority: QueuePriority,
    /// Yama's `ptrace_scope` (None: no Yama, classic ptrace rules).
    pub ptrace_scope: Option<u32>,
}

/// The first kernel release whose amdkfd no longer programs per-queue priority.
const PIPE_ONLY_SINCE: (u32, u32) = (7, 0);

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// `ROOT/rel` when it exists, else the host's `/rel` (facts of the running kernel that an
/// emulator may or may not model).
fn under_root_or_host(root: &Root, rel: &str) -> PathBuf {
    let p = root.path().join(rel);
    if p.exists() {
        p
    } else {
        Path::new("/").join(rel)
    }
}

fn amdgpu_param(root: &Root, name: &str) -> Option<String> {
    read_trimmed(&root.path().join("sys/module/amdgpu/parameters").join(name))
}

/// Parses `major.minor` from a kernel release string such as `6.12.48+deb13-amd64`.
pub(crate) fn release_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Whether the kernel under `root` programs per-queue priority, and what a priority buys there
/// (one sentence for `kfdq doctor` and `kfdq status`).
pub(crate) fn queue_priority(root: &Root) -> (QueuePriority, String) {
    let release_path = under_root_or_host(root, "proc/sys/kernel/osrelease");
    match read_trimmed(&release_path)
        .as_deref()
        .and_then(|r| Some((r.to_owned(), release_version(r)?)))
    {
        Some((release, v)) if v >= PIPE_ONLY_SINCE => (
            QueuePriority::PipeOnly,
            format!(
                "kernel {release}: amdkfd programs only the pipe priority (0-6 low, 7-10 medium, 11-15 high), not the queue priority (upstream 73463e26f7e2) — priority inside a band changes nothing; kfdq's guarantee is preemption (levels 1-3)"
            ),
        ),
        Some((release, _)) => (
            QueuePriority::Programmed,
            format!(
                "kernel {release}: amdkfd programs the queue priority 0..15 (before upstream 73463e26f7e2), unless the distribution backported that change; the CP prefers higher queues among resident ones, but never preempts"
            ),
        ),
        None => (
            QueuePriority::Unknown,
            format!(
                "{} is not readable: whether the kernel programs per-queue priority is unknown",
                release_path.display()
            ),
        ),
    }
}

pub(crate) fn inspect(root: &Root, out: &mut Vec<Finding>) -> NodeFacts {
    let kfd = open_kfd(root, out);

    let sched_policy = match amdgpu_param(root, "sched_policy").as_deref() {
        Some("0") | Some("-1") => {
            out.push(Finding::new(
                "sched-policy",
                Status::Ok,
                "amdgpu sched_policy 0: the hardware scheduler (HWS) maps queues, with oversubscription",
            ));
            SchedPolicy::Hws
        }
        Some("1") => {
            out.push(
                Finding::new(
                    "sched-policy",
                    Status::Warn,
                    "amdgpu sched_policy 1: HWS without oversubscription — CREATE_QUEUE fails (EPERM) once active queues reach the hardware slots",
                )
                .fix("use the default sched_policy=0 (amdgpu.sched_policy=0 on the kernel command line)"),
            );
            SchedPolicy::HwsNoOversubscription
        }
        Some("2") => {
            out.push(
                Finding::new(
                    "sched-policy",
                    Status::Fail,
                    "amdgpu sched_policy 2: no hardware scheduler — the kernel refuses the debugger API (DBG_TRAP: EINVAL), so level 3 and the tracer path cannot work",
                )
                .fix("boot with amdgpu.sched_policy=0 (the default)"),
            );
            SchedPolicy::NoHws
        }
        other => {
            out.push(Finding::new(
                "sched-policy",
                Status::Info,
                match other {
                    Some(v) => format!("amdgpu sched_policy reads {v:?}, which kfdq does not know"),
                    None => format!(
                        "{} is not readable; assuming the default (HWS)",
                        root.path()
                            .join("sys/module/amdgpu/parameters/sched_policy")
                            .display()
                    ),
                },
            ));
            SchedPolicy::Unknown
        }
    };

    let cwsr = match amdgpu_param(root, "cwsr_enable").as_deref() {
        Some("0") => {
            out.push(
                Finding::new(
                    "cwsr",
                    Status::Warn,
                    "amdgpu cwsr_enable 0: waves are not context-saved, so a preempt (levels 2 and 3) waits for running waves to finish",
                )
                .fix("boot with amdgpu.cwsr_enable=1 (the default)"),
            );
            Some(false)
        }
        Some(_) => {
            out.push(Finding::new(
                "cwsr",
                Status::Ok,
                "amdgpu cwsr_enable 1: preempted waves are saved (CWSR) and restored",
            ));
            Some(true)
        }
        None => {
            out.push(Finding::new(
                "cwsr",
                Status::Info,
                "amdgpu cwsr_enable is not readable; assuming the default (enabled)",
            ));
            None
        }
    };

    let (queue_priority, note) = queue_priority(root);
    out.push(Finding::new("queue-priority", Status::Info, note));

    let scope_path = under_root_or_host(root, "proc/sys/kernel/yama/ptrace_scope");
    let ptrace_scope = read_trimmed(&scope_path).and_then(|s| s.parse::<u32>().ok());
    out.push(match ptrace_scope {
        None => Finding::new(
            "ptrace-scope",
            Status::Ok,
            "no Yama ptrace restriction: kfdqd (root) may attach to shimless processes (tracer path)",
        ),
        Some(s @ 0..=2) => Finding::new(
            "ptrace-scope",
            Status::Ok,
            format!(
                "kernel.yama.ptrace_scope = {s}: a tracer with CAP_SYS_PTRACE (kfdqd as root) may attach to shimless processes"
            ),
        ),
        Some(s) => Finding::new(
            "ptrace-scope",
            Status::Fail,
            format!(
                "kernel.yama.ptrace_scope = {s}: nobody may attach with ptrace, so the tracer path (control of processes without the shim) cannot work"
            ),
        )
        .fix("set kernel.yama.ptrace_scope to 1 or 2 (it cannot be lowered from 3 without a reboot); processes under the shim are not affected"),
    });

    NodeFacts {
        kfd,
        sched_policy,
        cwsr,
        queue_priority,
        ptrace_scope,
    }
}

fn open_kfd(root: &Root, out: &mut Vec<Finding>) -> Option<Kfd> {
    let path = root.kfd_device();
    if !path.exists() {
        out.push(
            Finding::new(
                "kfd",
                Status::Fail,
                format!("{} does not exist: no amdkfd on this node", path.display()),
            )
            .fix("load the amdgpu driver (modprobe amdgpu) on a node with an AMD Instinct GPU, or run kfd-emu and pass --root"),
        );
        return None;
    }
    match Kfd::open(root) {
        Ok(kfd) => {
            let v = kfd.version();
            let caps = kfd.capabilities();
            out.push(if v.minor >= 17 {
                Finding::new(
                    "kfd-version",
                    Status::Ok,
                    format!("amdkfd {}.{} at {}", v.major, v.minor, path.display()),
                )
            } else {
                Finding::new(
                    "kfd-version",
                    Status::Warn,
                    format!(
                        "amdkfd {}.{} at {}: older than 1.17, the version kfdq is built and tested against",
                        v.major,
                        v.minor,
                        path.display()
                    ),
                )
                .fix("use Linux 6.12 or newer")
            });
            out.push(if caps.debugger_api {
                Finding::new(
                    "debugger-api",
                    Status::Ok,
                    "the debugger API (RUNTIME_ENABLE, DBG_TRAP; KFD >= 1.13) is present: level 3 and the tracer path can work",
                )
            } else {
                Finding::new(
                    "debugger-api",
                    Status::Fail,
                    format!(
                        "amdkfd {}.{} has no debugger API (needs 1.13): level 3 and the tracer path cannot work; levels 0-2 still do",
                        v.major, v.minor
                    ),
                )
                .fix("use Linux 6.4 or newer (KFD 1.13 added RUNTIME_ENABLE and DBG_TRAP)")
            });
            out.push(if caps.buffer_rules {
                Finding::new(
                    "queue-buffers",
                    Status::Ok,
                    "the kernel validates queue buffers (Linux 6.12+: cwsr_size in sysfs)",
                )
            } else {
                Finding::new(
                    "queue-buffers",
                    Status::Info,
                    "no cwsr_size in sysfs: a kernel before 6.12, which does not validate queue buffers; kfdq computes the CWSR sizes itself",
                )
            });
            Some(kfd)
        }
        Err(e) => {
            let denied = matches!(&e, crate::kfd::Error::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied);
            out.push(if denied {
                Finding::new(
                    "kfd",
                    Status::Fail,
                    format!("{} is not readable and writable by this user: {e}", path.display()),
                )
                .fix("add the user to the group that owns /dev/kfd (usually 'render'), or run as root")
            } else {
                Finding::new("kfd", Status::Fail, format!("opening {} failed: {e}", path.display()))
            });
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::release_version;

    #[test]
    fn kernel_release_versions_parse() {
        assert_eq!(release_version("6.12.48+deb13-amd64"), Some((6, 12)));
        assert_eq!(release_version("7.0.0-rc3"), Some((7, 0)));
        assert_eq!(release_version("5.15"), Some((5, 15)));
        assert_eq!(release_version("garbage"), None);
        assert!(release_version("7.1.2").unwrap() >= super::PIPE_ONLY_SINCE);
        assert!(release_version("6.18.1").unwrap() < super::PIPE_ONLY_SINCE);
    }
}
