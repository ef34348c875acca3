//! The FUSE operations of [`KfdFs`]: each request answered from the inode table, the `proc`
//! subtree, or the emulator (opens, reads and writes of its files, ioctls on `/dev/kfd` and the
//! render nodes).

use super::*;

impl Filesystem for KfdFs {
    /// The session ended (unmounted by us, by `kfd-emu unmount` or by anyone): whoever waits
    /// in [`crate::MountedEmu::session_end`] learns it.
    fn destroy(&mut self) {
        let (over, cv) = &self.emu.session_over;
        *crate::locks::lock(over, "session over") = true;
        cv.notify_all();
    }

    fn init(&mut self, _req: &Request, config: &mut fuser::KernelConfig) -> std::io::Result<()> {
        crate::fuse_proxy::limit_messages(config);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let found = name
            .to_str()
            .and_then(|n| self.child(parent.0, n))
            .and_then(|ino| self.lookup_attr(ino));
        match found {
            Some((attr, ttl)) => reply.entry(&ttl, &attr, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.node(ino.0).map(|n| &n.kind) {
            Some(Kind::Link(target)) => reply.data(target.as_bytes()),
            _ => reply.error(Errno::EINVAL),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.lookup_attr(ino.0) {
            Some((attr, ttl)) => reply.attr(&ttl, &attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // Nothing is settable; report the unchanged attributes (O_TRUNC opens work).
        self.getattr(_req, ino, None, reply);
    }

    fn open(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let ino = ino.0;
        if let Some(d) = Dyn::from_ino(ino) {
            return match self.dyn_content(d) {
                Some(c) => reply.opened(
                    self.new_handle(Handle::Text(c)),
                    FopenFlags::FOPEN_DIRECT_IO,
                ),
                None if d.is_dir() => reply.error(Errno::EISDIR),
                None => reply.error(Errno::ENOENT),
            };
        }
        let Some(node) = self.node(ino) else {
            return reply.error(Errno::ENOENT);
        };
        match &node.kind {
            Kind::Dir | Kind::ProcDir => reply.error(Errno::EISDIR),
            Kind::Link(_) => reply.error(Errno::ELOOP),
            Kind::MemUsed(gpu, vram) => {
                let used = self.emu.lock().bo_bytes(*gpu, *vram);
                reply.opened(
                    self.new_handle(Handle::Text(format!("{used}\n").into_bytes())),
                    FopenFlags::FOPEN_DIRECT_IO,
                )
            }
            Kind::Kfd => match process::tgid_of(&self.emu, req.pid()) {
                Some(tgid) => {
                    ioctl::lifecycle::open_kfd(&self.emu, tgid);
                    reply.opened(
                        self.new_handle(Handle::Kfd { tgid }),
                        FopenFlags::FOPEN_KEEP_CACHE,
                    );
                }
                None => reply.error(Errno::ESRCH),
            },
            Kind::Render(gpu) => reply.opened(
                self.new_handle(Handle::Render(*gpu)),
                FopenFlags::FOPEN_KEEP_CACHE,
            ),
            Kind::Text(t) => reply.opened(
                self.new_handle(Handle::Text(t.to_vec())),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Kind::Stats => {
                let mut out =
                    serde_json::to_vec_pretty(&stats::snapshot(&self.emu)).unwrap_or_default();
                out.push(b'\n');
                reply.opened(
                    self.new_handle(Handle::Text(out)),
                    FopenFlags::FOPEN_DIRECT_IO,
                )
            }
            Kind::Config => reply.opened(
                self.new_handle(Handle::Text(self.config_json())),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Kind::Faults => reply.opened(
                self.new_handle(Handle::Faults(crate::faults_file::render(&self.emu))),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Kind::Unplug => reply.opened(
                self.new_handle(Handle::Unplug(crate::unplug::render(&self.emu.unplugged))),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let handles = self.emu.handles.lock();
        match handles.get(&fh.0) {
            Some(Handle::Kfd { .. }) => {
                drop(handles);
                // Doorbell and MMIO pages read as zeros; any other offset is one the kernel's
                // kfd_mmap refuses, and the mapping faults.
                if kfd_mmap::valid(&self.emu.topo, offset, PAGE) {
                    reply.data(&vec![0u8; size as usize]);
                } else {
                    reply.error(Errno::EIO);
                }
            }
            Some(Handle::Render(_)) => {
                drop(handles);
                reply.data(&self.emu.bos.read(offset, size as usize));
            }
            Some(Handle::Text(t) | Handle::Faults(t) | Handle::Unplug(t)) => {
                let start = usize::try_from(offset).unwrap_or(usize::MAX).min(t.len());
                let end = start.saturating_add(size as usize).min(t.len());
                reply.data(&t[start..end]);
            }
            None => reply.error(Errno::EBADF),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let is_render = {
            let handles = self.emu.handles.lock();
            match handles.get(&fh.0) {
                Some(Handle::Kfd { .. }) => Some(false),
                Some(Handle::Render(_)) => Some(true),
                Some(Handle::Text(_)) => None,
                Some(Handle::Faults(_)) => {
                    return match crate::faults_file::write(&self.emu, data) {
                        Ok(()) => reply.written(data.len() as u32),
                        Err(_) => reply.error(Errno::EINVAL),
                    };
                }
                Some(Handle::Unplug(_)) => {
                    return match crate::unplug::write(&self.emu.unplugged, &self.emu.topo, data) {
                        Ok(()) => reply.written(data.len() as u32),
                        Err(_) => reply.error(Errno::EINVAL),
                    };
                }
                None => return reply.error(Errno::EBADF),
            }
        };
        match is_render {
            // Doorbell page writeback: accepted and ignored (the CP polls write pointers).
            Some(false) => reply.written(data.len() as u32),
            Some(true) => {
                self.emu.bos.write(offset, data);
                reply.written(data.len() as u32);
            }
            None => reply.error(Errno::EACCES),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let h = self.emu.handles.lock().remove(&fh.0);
        if let Some(Handle::Kfd { tgid }) = h {
            ioctl::lifecycle::release_kfd(&self.emu, tgid);
        }
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(entries) = self.entries(ino.0) else {
            return reply.error(Errno::ENOTDIR);
        };
        let parent = match Dyn::from_ino(ino.0) {
            Some(Dyn::Pid(_)) => self.child_parent_proc(),
            Some(Dyn::Queues(p)) => Dyn::Pid(p).ino(),
            Some(Dyn::Queue(p, _)) => Dyn::Queues(p).ino(),
            Some(_) => ino.0,
            None => self.node(ino.0).map_or(1, |n| n.parent),
        };
        let all = [
            (ino.0, FileType::Directory, ".".to_string()),
            (parent, FileType::Directory, "..".to_string()),
        ]
        .into_iter()
        .chain(entries);
        for (i, (child, kind, name)) in all.enumerate().skip(offset as usize) {
            if reply.add(INodeNo(child), i as u64 + 1, kind, &name) {
                break;
            }
        }
        reply.ok();
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: fuser::ReplyXattr,
    ) {
        // No extended attributes; ENOSYS makes the kernel stop asking.
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: fuser::ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn ioctl(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        let target = match self.emu.handles.lock().get(&fh.0) {
            Some(Handle::Kfd { tgid }) => Some(Ok(*tgid)),
            Some(Handle::Render(gpu)) => Some(Err(*gpu)),
            _ => None,
        };
        match target {
            Some(Err(gpu)) => drm::dispatch(&self.emu, req.pid(), gpu, cmd, in_data, reply),
            Some(Ok(tgid)) => {
                // A bug must not take the FUSE loop down: an unsent reply answers EIO
                // when it is dropped during unwinding.
                let call = ioctl::Call {
                    unique: req.unique().0,
                    tid: req.pid(),
                    opener: tgid,
                    cmd,
                    in_data,
                    out_size,
                };
                let run = std::panic::AssertUnwindSafe(|| ioctl::dispatch(&self.emu, &call, reply));
                if std::panic::catch_unwind(run).is_err() {
                    tracing::error!(cmd, "ioctl handler panicked");
                }
            }
            None => ioctl::send_reply(reply, &[], Err(libc::ENOTTY)),
        }
    }
}
