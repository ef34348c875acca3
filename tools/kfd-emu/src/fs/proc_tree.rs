//! The live `sys/class/kfd/kfd/proc/<pid>/...` subtree: its inode numbers encode (pid, queue
//! id, file), so that nothing is allocated per process or queue.

use super::PROC_BASE;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum QField {
    Size,
    Type,
    GpuId,
}

/// A node of the live `proc` subtree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dyn {
    Pid(u32),
    Pasid(u32),
    Queues(u32),
    Queue(u32, u32),
    QFile(u32, u32, QField),
}

impl Dyn {
    pub(super) fn ino(self) -> u64 {
        let (pid, code) = match self {
            Dyn::Pid(p) => (p, 0),
            Dyn::Pasid(p) => (p, 1),
            Dyn::Queues(p) => (p, 2),
            Dyn::Queue(p, q) => (p, 0x100 + q * 4),
            Dyn::QFile(p, q, f) => (
                p,
                0x100
                    + q * 4
                    + match f {
                        QField::Size => 1,
                        QField::Type => 2,
                        QField::GpuId => 3,
                    },
            ),
        };
        PROC_BASE | (u64::from(pid) << 16) | u64::from(code)
    }

    pub(super) fn from_ino(ino: u64) -> Option<Dyn> {
        if ino < PROC_BASE {
            return None;
        }
        let pid = u32::try_from((ino - PROC_BASE) >> 16).ok()?;
        let code = (ino & 0xffff) as u32;
        Some(match code {
            0 => Dyn::Pid(pid),
            1 => Dyn::Pasid(pid),
            2 => Dyn::Queues(pid),
            c if c >= 0x100 => {
                let q = (c - 0x100) / 4;
                match (c - 0x100) % 4 {
                    0 => Dyn::Queue(pid, q),
                    1 => Dyn::QFile(pid, q, QField::Size),
                    2 => Dyn::QFile(pid, q, QField::Type),
                    _ => Dyn::QFile(pid, q, QField::GpuId),
                }
            }
            _ => return None,
        })
    }

    pub(super) fn is_dir(self) -> bool {
        matches!(self, Dyn::Pid(_) | Dyn::Queues(_) | Dyn::Queue(..))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dyn_inodes_round_trip() {
        for d in [
            Dyn::Pid(4_194_303),
            Dyn::Pasid(1),
            Dyn::Queues(77),
            Dyn::Queue(77, 1023),
            Dyn::QFile(77, 1023, QField::GpuId),
            Dyn::QFile(5, 0, QField::Size),
            Dyn::QFile(5, 3, QField::Type),
        ] {
            assert_eq!(Dyn::from_ino(d.ino()), Some(d));
        }
        assert_eq!(Dyn::from_ino(5), None);
    }
}
