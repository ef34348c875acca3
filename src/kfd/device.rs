//! `/dev/kfd`: opening it, the interface version, and the per-GPU VM (render node + ACQUIRE_VM).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::{Arc, Mutex, MutexGuard};

use super::doorbell::{DOORBELL_PAGE_SIZE, DoorbellPage};
use super::error::{Error, Result};
use super::ids::GpuId;
use super::ioctl;
use super::leak::Leak;
use super::paths::Root;
use super::topology::{Node, Topology};

/// The amdkfd interface version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Version {
    /// Major (always 1).
    pub major: u32,
    /// Minor.
    pub minor: u32,
}

/// What this driver can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Capabilities {
    /// RUNTIME_ENABLE / DBG_TRAP exist (KFD >= 1.13).
    pub debugger_api: bool,
    /// The kernel validates queue buffers (Linux 6.12+; detected by `cwsr_size` in sysfs).
    pub buffer_rules: bool,
}

/// Minor version that introduced the debugger API.
pub const DEBUGGER_API_MINOR: u32 = 13;

/// A GPU whose VM this process has acquired.
#[derive(Debug)]
pub(crate) struct GpuVm {
    pub(crate) render: File,
    pub(crate) doorbells: Option<Arc<DoorbellPage>>,
}

/// An open `/dev/kfd` with its topology.
///
/// One per process: KFD binds the fd to the opening process (a forked child gets `EBADF`).
#[derive(Debug)]
pub struct Kfd {
    fd: OwnedFd,
    root: Root,
    version: Version,
    caps: Capabilities,
    topology: Topology,
    vms: Mutex<HashMap<GpuId, GpuVm>>,
    leaks: Mutex<Vec<Leak>>,
}

impl Kfd {
    /// Opens `ROOT/dev/kfd`, checks the version (major must be 1) and reads the topology.
    ///
    /// Kernel: the open is `kfd_open` (`drivers/gpu/drm/amd/amdkfd/kfd_chardev.c`), which binds
    /// the file to the calling process (`kfd_create_process`); the version is
    /// [`super::ioctl::get_version`] (`AMDKFD_IOC_GET_VERSION`, `kfd_ioctl_get_version`); the
    /// topology is sysfs (`ROOT/sys/class/kfd/kfd/topology`, [`Topology`]).
    ///
    /// # Example
    ///
    /// ```no_run
    /// use kfdq::kfd::{Kfd, Root};
    ///
    /// // `/` unless KFDQ_ROOT names another root (a kfd-emu mount, say).
    /// let kfd = Kfd::open(&Root::from_env())?;
    /// println!("KFD {}.{}", kfd.version().major, kfd.version().minor);
    /// for node in kfd.topology().gpus() {
    ///     println!("node {} ({}): gpu_id {:?}", node.index, node.name, node.gpu_id);
    /// }
    /// # Ok::<(), kfdq::kfd::Error>(())
    /// ```
    pub fn open(root: &Root) -> Result<Kfd> {
        let path = root.kfd_device();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        let fd: OwnedFd = file.into();
        let (major, minor) = ioctl::get_version(fd.as_fd())?;
        if major != 1 {
            return Err(Error::UnsupportedVersion { major, minor });
        }
        let topology = Topology::read(root)?;
        let caps = Capabilities {
            debugger_api: minor >= DEBUGGER_API_MINOR,
            buffer_rules: topology.gpus().any(|n| n.has_buffer_rules()),
        };
        tracing::debug!(root = %root.path().display(), major, minor, ?caps, "opened kfd");
        Ok(Kfd {
            fd,
            root: root.clone(),
            version: Version { major, minor },
            caps,
            topology,
            vms: Mutex::new(HashMap::new()),
            leaks: Mutex::new(Vec::new()),
        })
    }

    /// The interface version.
    pub fn version(&self) -> Version {
        self.version
    }

    /// What the driver supports.
    pub fn capabilities(&self) -> Capabilities {
        self.caps
    }

    /// The topology read at open.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// The root prefix.
    pub fn root(&self) -> &Root {
        &self.root
    }

    /// The GPU node `gpu`.
    pub fn gpu(&self, gpu: GpuId) -> Result<&Node> {
        self.topology.gpu(gpu)
    }

    pub(crate) fn require_debugger_api(&self, what: &'static str) -> Result<()> {
        if self.caps.debugger_api {
            Ok(())
        } else {
            Err(Error::NeedsNewerKfd {
                what,
                needs_minor: DEBUGGER_API_MINOR,
                have_minor: self.version.minor,
            })
        }
    }

    pub(crate) fn vms(&self) -> MutexGuard<'_, HashMap<GpuId, GpuVm>> {
        // A poisoned lock only means another thread panicked mid-update of this map; the map
        // itself stays consistent (entries are inserted whole), so keep going.
        self.vms.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens the node's render node and issues ACQUIRE_VM. Idempotent per GPU.
    ///
    /// Required before any allocation or queue on that GPU.
    ///
    /// Kernel: `kfd_ioctl_acquire_vm` (`kfd_chardev.c`), request `AMDKFD_IOC_ACQUIRE_VM`
    /// ([`super::ioctl::acquire_vm`]).
    ///
    /// # Example
    ///
    /// ```no_run
    /// use kfdq::kfd::{AllocFlags, Kfd, Root};
    ///
    /// let kfd = Kfd::open(&Root::from_env())?;
    /// let gpu = kfd.topology().gpus().next().and_then(|n| n.gpu_id).expect("a GPU");
    /// kfd.acquire_vm(gpu)?;
    /// let buf = kfd.alloc(gpu, 1 << 20, AllocFlags::GTT | AllocFlags::WRITABLE)?;
    /// # drop(buf);
    /// # Ok::<(), kfdq::kfd::Error>(())
    /// ```
    pub fn acquire_vm(&self, gpu: GpuId) -> Result<()> {
        let node = self.gpu(gpu)?;
        let mut vms = self.vms();
        if vms.contains_key(&gpu) {
            return Ok(());
        }
        let minor = node.render_minor().ok_or_else(|| Error::Sysfs {
            path: self
                .root
                .topology_dir()
                .join(format!("nodes/{}/properties", node.index)),
            what: "no drm_render_minor".into(),
        })?;
        let path = self.root.render_node(minor);
        let render = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        ioctl::acquire_vm(self.fd.as_fd(), render.as_fd(), gpu)?;
        vms.insert(
            gpu,
            GpuVm {
                render,
                doorbells: None,
            },
        );
        Ok(())
    }

    /// Queues and buffers left to the kernel because it refused to destroy, unmap or free them
    /// (see `leak.rs`), in the order they were left.
    pub fn leaks(&self) -> Vec<Leak> {
        self.leaks.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records `leak` and reports it (once: the caller has just left the object to the kernel).
    pub(crate) fn leaked(&self, leak: Leak) {
        tracing::warn!("{leak}");
        self.leaks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(leak);
    }

    /// True once [`Kfd::acquire_vm`] succeeded for `gpu`.
    pub fn has_vm(&self, gpu: GpuId) -> bool {
        self.vms().contains_key(&gpu)
    }
}

impl AsFd for Kfd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Kfd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl Kfd {
    /// The doorbell page of `gpu` for a queue whose CREATE_QUEUE returned `doorbell_offset`;
    /// mapped on first use, then shared. Returns the page and the queue's offset in it.
    pub(crate) fn doorbell_page(
        &self,
        gpu: GpuId,
        doorbell_offset: u64,
    ) -> Result<(Arc<DoorbellPage>, u64)> {
        let in_page = doorbell_offset & (DOORBELL_PAGE_SIZE - 1);
        let base = doorbell_offset & !(DOORBELL_PAGE_SIZE - 1);
        let mut vms = self.vms();
        let vm = vms.get_mut(&gpu).ok_or(Error::UnknownGpu(gpu))?;
        if let Some(page) = &vm.doorbells
            && page.mmap_offset() == base
        {
            return Ok((Arc::clone(page), in_page));
        }
        let page = Arc::new(DoorbellPage::map(self.as_fd(), base)?);
        vm.doorbells = Some(Arc::clone(&page));
        Ok((page, in_page))
    }
}
