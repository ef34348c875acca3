//! The FUSE tree: a static inode table built at mount time (devices, topology,
//! emulator files) plus the live `sys/class/kfd/kfd/proc/<pid>/...` subtree whose
//! inode numbers encode (pid, queue id, file).
//!
//! * `mod.rs` — the inode table, built at mount time, and what each inode holds.
//! * `proc_tree.rs` — the live `proc` subtree's inode numbers.
//! * `ops.rs` — the FUSE operations.

use std::ffi::OsStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, IoctlFlags,
    LockOwner, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyIoctl,
    ReplyOpen, ReplyWrite, Request, WriteFlags,
};
use serde::Serialize;

use crate::config::EmuConfig;
use crate::handles::Handle;
use crate::state::Emu;
use crate::state::PAGE;
use crate::sysfs_drm::{self, Entry};
use crate::{drm, ioctl, kfd_mmap, process, stats, sysfs_topology};

/// Attribute/entry cache time of the static tree.
const STATIC_TTL: Duration = Duration::from_secs(60);
/// The `proc` subtree changes at any time: never cached.
const DYN_TTL: Duration = Duration::ZERO;
/// First inode number of the `proc` subtree.
const PROC_BASE: u64 = 1 << 40;
/// Size reported for device files, so mmap at large offsets does not SIGBUS.
const DEVICE_SIZE: u64 = i64::MAX as u64;
/// Size reported for generated text files (served with direct I/O; size is a hint).
const TEXT_SIZE: u64 = 4096;
/// Size of the loaded amdgpu module in `proc/modules` and `sys/module/amdgpu/coresize`
/// (synthetic: about what a Linux 6.x amdgpu.ko occupies).
const AMDGPU_MODULE_SIZE: u64 = 19_427_328;

#[derive(Clone)]
enum Kind {
    Dir,
    /// `sys/class/kfd/kfd/proc`: children are the live processes.
    ProcDir,
    Kfd,
    /// A render node: the index of its GPU node.
    Render(usize),
    Text(Arc<[u8]>),
    /// A symbolic link with this target.
    Link(Arc<str>),
    /// `mem_info_{vram,gtt}_used` of a GPU node: (node index, VRAM).
    MemUsed(usize, bool),
    Stats,
    Config,
    /// `kfd-emu/faults`: read the injected failures, write to add or clear them.
    Faults,
    /// `kfd-emu/unplug`: take partitions out of the topology and back (`crate::unplug`).
    Unplug,
}

struct Node {
    kind: Kind,
    parent: u64,
    children: Vec<(String, u64)>,
}

mod ops;
mod proc_tree;

use proc_tree::{Dyn, QField};

/// The filesystem served over FUSE.
pub(crate) struct KfdFs {
    emu: Arc<Emu>,
    nodes: Vec<Node>,
    /// The topology's `nodes/<N>` directories of GPU nodes: (inode, gpu_id), hidden while
    /// the partition is unplugged.
    gpu_dirs: Vec<(u64, u32)>,
    next_fh: AtomicU64,
    mounted_at: SystemTime,
}

/// What `kfd-emu/config.json` contains.
#[derive(Serialize)]
struct ConfigDoc<'a> {
    config: &'a EmuConfig,
    nodes: Vec<NodeDoc>,
}

/// Per-node facts a client may want without parsing sysfs (e.g. `debug_memory_size`,
/// which the kernel does not export).
#[derive(Serialize)]
struct NodeDoc {
    node: u32,
    gpu_id: u32,
    drm_render_minor: u32,
    num_xcc: u32,
    num_cp_queues: u32,
    cwsr_size: u32,
    ctl_stack_size: u32,
    debug_memory_size: u32,
    eop_buffer_size: u32,
    cwsr_total_per_queue: u64,
}

struct Builder {
    nodes: Vec<Node>,
}

impl Builder {
    fn add(&mut self, parent: u64, name: &str, kind: Kind) -> u64 {
        let ino = self.nodes.len() as u64 + 1;
        self.nodes.push(Node {
            kind,
            parent,
            children: Vec::new(),
        });
        self.nodes[(parent - 1) as usize]
            .children
            .push((name.to_string(), ino));
        ino
    }

    /// The directory `name` under `parent`, created if missing.
    fn dir(&mut self, parent: u64, name: &str) -> u64 {
        let existing = self.nodes[(parent - 1) as usize]
            .children
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, i)| *i);
        existing.unwrap_or_else(|| self.add(parent, name, Kind::Dir))
    }
}

/// The `nodes/<N>` directories under the topology directory `topo` whose `gpu_id` is not 0.
fn gpu_dirs(nodes: &[Node], topo: u64) -> Vec<(u64, u32)> {
    let child = |dir: u64, name: &str| {
        nodes[(dir - 1) as usize]
            .children
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, i)| *i)
    };
    let Some(list) = child(topo, "nodes") else {
        return Vec::new();
    };
    nodes[(list - 1) as usize]
        .children
        .iter()
        .filter_map(|(_, dir)| {
            let f = child(*dir, "gpu_id")?;
            let Kind::Text(t) = &nodes[(f - 1) as usize].kind else {
                return None;
            };
            let g: u32 = std::str::from_utf8(t).ok()?.trim().parse().ok()?;
            (g != 0).then_some((*dir, g))
        })
        .collect()
}

fn text(s: String) -> Kind {
    Kind::Text(Arc::from(s.into_bytes().into_boxed_slice()))
}

impl KfdFs {
    pub(crate) fn new(emu: Arc<Emu>) -> KfdFs {
        let mut b = Builder {
            nodes: vec![Node {
                kind: Kind::Dir,
                parent: 1,
                children: Vec::new(),
            }],
        };
        let root = 1;
        let dev = b.dir(root, "dev");
        let _ = emu.kfd_ino.set(b.add(dev, "kfd", Kind::Kfd));
        let dri = b.dir(dev, "dri");
        let render_inos = emu
            .topo
            .gpus
            .iter()
            .enumerate()
            .map(|(i, g)| b.add(dri, &format!("renderD{}", g.render_minor), Kind::Render(i)))
            .collect();
        let _ = emu.render_inos.set(render_inos);
        let sys = b.dir(root, "sys");
        let class = b.dir(sys, "class");
        let kfd_class = b.dir(class, "kfd");
        let kfd = b.dir(kfd_class, "kfd");
        let topo = b.dir(kfd, "topology");
        for f in sysfs_topology::topology_files(&emu.topo, emu.config.buffer_checks) {
            let mut parent = topo;
            let (last, dirs) = f.path.split_last().expect("topology paths are never empty");
            for d in dirs {
                parent = b.dir(parent, d);
            }
            match f.text {
                Some(t) => {
                    b.add(parent, last, text(t));
                }
                None => {
                    b.dir(parent, last);
                }
            }
        }
        b.add(kfd, "proc", Kind::ProcDir);
        for (path, entry) in sysfs_drm::drm_entries(&emu.topo) {
            let (last, dirs) = path.split_last().expect("sysfs paths are never empty");
            let mut parent = root;
            for d in dirs {
                parent = b.dir(parent, d);
            }
            let kind = match entry {
                Entry::Dir => {
                    b.dir(parent, last);
                    continue;
                }
                Entry::Text(t) => text(t),
                Entry::Link(target) => Kind::Link(Arc::from(target)),
                Entry::VramUsed(gpu) => Kind::MemUsed(gpu, true),
                Entry::GttUsed(gpu) => Kind::MemUsed(gpu, false),
            };
            b.add(parent, last, kind);
        }
        // The running kernel as amdgpu's module parameters and procfs show it (`kfdq doctor`
        // reads them): the HWS with CWSR, and a release that stands for the kernel mode.
        let module = b.dir(sys, "module");
        let amdgpu = b.dir(module, "amdgpu");
        b.add(amdgpu, "initstate", text("live\n".into()));
        // What lsmod reads besides /proc/modules (a loaded module nobody holds).
        b.add(amdgpu, "refcnt", text("0\n".into()));
        b.add(amdgpu, "coresize", text(format!("{AMDGPU_MODULE_SIZE}\n")));
        b.dir(amdgpu, "holders");
        let params = b.dir(amdgpu, "parameters");
        b.add(params, "sched_policy", text("0\n".into()));
        b.add(params, "cwsr_enable", text("1\n".into()));
        let proc_dir = b.dir(root, "proc");
        // The loaded-module line older ROCm looks for (rocminfo 5.x runs `lsmod | grep amdgpu`),
        // as the kernel's `m_show` prints it: name, size, references, users, state, address
        // (zeros, as for a reader without CAP_SYSLOG). `kfd-emu run` shows it at /proc/modules.
        b.add(
            proc_dir,
            "modules",
            text(format!(
                "amdgpu {AMDGPU_MODULE_SIZE} 0 - Live 0x0000000000000000\n"
            )),
        );
        let proc_sys = b.dir(proc_dir, "sys");
        let kernel = b.dir(proc_sys, "kernel");
        b.add(
            kernel,
            "osrelease",
            text(format!("{}\n", emu.config.kernel_release())),
        );
        let own = b.dir(root, "kfd-emu");
        b.add(own, "stats.json", Kind::Stats);
        b.add(own, "config.json", Kind::Config);
        b.add(own, "faults", Kind::Faults);
        b.add(own, "unplug", Kind::Unplug);
        let gpu_dirs = gpu_dirs(&b.nodes, topo);
        KfdFs {
            emu,
            nodes: b.nodes,
            gpu_dirs,
            next_fh: AtomicU64::new(1),
            mounted_at: SystemTime::now(),
        }
    }

    /// Whether `ino` is the topology directory of an unplugged partition.
    fn unplugged(&self, ino: u64) -> bool {
        self.gpu_dirs
            .iter()
            .any(|(i, g)| *i == ino && self.emu.unplugged.contains(*g))
    }

    fn node(&self, ino: u64) -> Option<&Node> {
        self.nodes.get(usize::try_from(ino.checked_sub(1)?).ok()?)
    }

    fn attr(&self, ino: u64, kind: FileType, perm: u16, size: u64) -> FileAttr {
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: 0,
            atime: self.mounted_at,
            mtime: self.mounted_at,
            ctime: self.mounted_at,
            crtime: self.mounted_at,
            kind,
            perm,
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    /// Whether a `proc` subtree node currently exists.
    fn dyn_exists(&self, d: Dyn) -> bool {
        let st = self.emu.lock();
        match d {
            Dyn::Pid(p) | Dyn::Pasid(p) | Dyn::Queues(p) => st.processes.contains_key(&p),
            Dyn::Queue(p, q) | Dyn::QFile(p, q, _) => st.queue((p, q)).is_some(),
        }
    }

    /// Attributes and cache time of any inode, `None` if it does not exist (now).
    fn lookup_attr(&self, ino: u64) -> Option<(FileAttr, Duration)> {
        if let Some(d) = Dyn::from_ino(ino) {
            if !self.dyn_exists(d) {
                return None;
            }
            let a = if d.is_dir() {
                self.attr(ino, FileType::Directory, 0o555, 0)
            } else {
                self.attr(ino, FileType::RegularFile, 0o444, TEXT_SIZE)
            };
            return Some((a, DYN_TTL));
        }
        if self.unplugged(ino) {
            return None;
        }
        let node = self.node(ino)?;
        let a = match node.kind {
            Kind::Dir | Kind::ProcDir => self.attr(ino, FileType::Directory, 0o555, 0),
            Kind::Kfd | Kind::Render(_) => {
                self.attr(ino, FileType::RegularFile, 0o666, DEVICE_SIZE)
            }
            Kind::Text(_) | Kind::Stats | Kind::Config | Kind::MemUsed(..) => {
                self.attr(ino, FileType::RegularFile, 0o444, TEXT_SIZE)
            }
            Kind::Link(ref t) => self.attr(ino, FileType::Symlink, 0o777, t.len() as u64),
            // Root's, as the kernel's debugfs fault-injection files are.
            Kind::Faults | Kind::Unplug => self.attr(ino, FileType::RegularFile, 0o644, TEXT_SIZE),
        };
        let ttl = match node.kind {
            Kind::ProcDir | Kind::Stats | Kind::MemUsed(..) | Kind::Faults | Kind::Unplug => {
                DYN_TTL
            }
            _ if self.gpu_dirs.iter().any(|(i, _)| *i == ino) => DYN_TTL,
            _ => STATIC_TTL,
        };
        Some((a, ttl))
    }

    /// Resolves `name` in directory `parent`.
    fn child(&self, parent: u64, name: &str) -> Option<u64> {
        if let Some(d) = Dyn::from_ino(parent) {
            let found = match d {
                Dyn::Pid(p) => match name {
                    "pasid" => Dyn::Pasid(p),
                    "queues" => Dyn::Queues(p),
                    _ => return None,
                },
                Dyn::Queues(p) => Dyn::Queue(p, name.parse().ok().filter(|q| *q < 1024)?),
                Dyn::Queue(p, q) => match name {
                    "size" => Dyn::QFile(p, q, QField::Size),
                    "type" => Dyn::QFile(p, q, QField::Type),
                    "gpuid" => Dyn::QFile(p, q, QField::GpuId),
                    _ => return None,
                },
                _ => return None,
            };
            return Some(found.ino());
        }
        let node = self.node(parent)?;
        match node.kind {
            Kind::ProcDir => {
                let pid: u32 = name.parse().ok().filter(|p| *p < (1 << 24))?;
                Some(Dyn::Pid(pid).ino())
            }
            Kind::Dir => node
                .children
                .iter()
                .find(|(n, i)| n == name && !self.unplugged(*i))
                .map(|(_, i)| *i),
            _ => None,
        }
    }

    /// Entries of a directory (without `.`/`..`), `None` if not a directory.
    fn entries(&self, ino: u64) -> Option<Vec<(u64, FileType, String)>> {
        if let Some(d) = Dyn::from_ino(ino) {
            let st = self.emu.lock();
            return match d {
                Dyn::Pid(p) => st.processes.contains_key(&p).then(|| {
                    vec![
                        (Dyn::Pasid(p).ino(), FileType::RegularFile, "pasid".into()),
                        (Dyn::Queues(p).ino(), FileType::Directory, "queues".into()),
                    ]
                }),
                Dyn::Queues(p) => st.processes.get(&p).map(|proc_| {
                    proc_
                        .queues
                        .keys()
                        .map(|q| (Dyn::Queue(p, *q).ino(), FileType::Directory, q.to_string()))
                        .collect()
                }),
                Dyn::Queue(p, q) => st.queue((p, q)).map(|_| {
                    [
                        ("size", QField::Size),
                        ("type", QField::Type),
                        ("gpuid", QField::GpuId),
                    ]
                    .into_iter()
                    .map(|(n, f)| (Dyn::QFile(p, q, f).ino(), FileType::RegularFile, n.into()))
                    .collect()
                }),
                _ => None,
            };
        }
        let node = self.node(ino)?;
        match node.kind {
            Kind::ProcDir => {
                let st = self.emu.lock();
                Some(
                    st.processes
                        .keys()
                        .map(|p| (Dyn::Pid(*p).ino(), FileType::Directory, p.to_string()))
                        .collect(),
                )
            }
            Kind::Dir => Some(
                node.children
                    .iter()
                    .filter(|(_, i)| !self.unplugged(*i))
                    .map(|(n, i)| {
                        let kind = match self.node(*i).map(|c| &c.kind) {
                            Some(Kind::Dir | Kind::ProcDir) => FileType::Directory,
                            Some(Kind::Link(_)) => FileType::Symlink,
                            _ => FileType::RegularFile,
                        };
                        (*i, kind, n.clone())
                    })
                    .collect(),
            ),
            _ => None,
        }
    }

    /// Content of a `proc` subtree file, `None` if gone.
    fn dyn_content(&self, d: Dyn) -> Option<Vec<u8>> {
        let st = self.emu.lock();
        let s = match d {
            Dyn::Pasid(p) => st.processes.get(&p)?.pasid.to_string(),
            Dyn::QFile(p, q, f) => {
                let q = st.queue((p, q))?;
                match f {
                    QField::Size => q.ring_size.to_string(),
                    QField::Type => q.kind.sysfs_type().to_string(),
                    QField::GpuId => self.emu.topo.gpus[q.gpu].gpu_id.to_string(),
                }
            }
            _ => return None,
        };
        Some(s.into_bytes())
    }

    fn config_json(&self) -> Vec<u8> {
        let emu = &self.emu;
        let doc = ConfigDoc {
            config: &emu.config,
            nodes: emu
                .topo
                .gpus
                .iter()
                .map(|g| NodeDoc {
                    node: g.node,
                    gpu_id: g.gpu_id,
                    drm_render_minor: g.render_minor,
                    num_xcc: g.num_xcc,
                    num_cp_queues: g.num_cp_queues,
                    cwsr_size: g.sizes.cwsr_size,
                    ctl_stack_size: g.sizes.ctl_stack_size,
                    debug_memory_size: g.sizes.debug_memory_size,
                    eop_buffer_size: g.eop_buffer_size,
                    cwsr_total_per_queue: g.cwsr_total(g.sizes.cwsr_size),
                })
                .collect(),
        };
        let mut out = serde_json::to_vec_pretty(&doc).unwrap_or_default();
        out.push(b'\n');
        out
    }

    fn new_handle(&self, h: Handle) -> FileHandle {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.emu.handles.lock().insert(fh, h);
        FileHandle(fh)
    }
}

impl KfdFs {
    /// Inode of `sys/class/kfd/kfd/proc`.
    fn child_parent_proc(&self) -> u64 {
        self.nodes
            .iter()
            .position(|n| matches!(n.kind, Kind::ProcDir))
            .map_or(1, |i| i as u64 + 1)
    }
}
