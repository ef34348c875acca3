//! Work a handler queues while it holds the state lock, done after the lock is released:
//! deferred ioctl replies, debugger notifications, waking the CP.

use fuser::ReplyIoctl;

use crate::state::Emu;

/// Work queued under the state lock and done after it is released.
#[derive(Default)]
pub(crate) struct Effects {
    /// Deferred ioctl replies: (reply, argument bytes to copy out, result).
    pub replies: Vec<(ReplyIoctl, Vec<u8>, Result<i32, i32>)>,
    /// Debugger notifications: (process owning the fd, fd).
    pub notify: Vec<(u32, u32)>,
    pub wake_cp: bool,
}

impl Effects {
    pub fn run(self, emu: &Emu) {
        if self.wake_cp {
            emu.cp_wake.notify_all();
        }
        for (reply, data, res) in self.replies {
            crate::reply::send_reply(reply, &data, res);
        }
        for (owner, fd) in self.notify {
            crate::notify::notify_fd(owner, fd);
        }
    }
}
