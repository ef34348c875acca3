//! The spin kernel (`kernels/spin.hip`, built by `scripts/kernels.sh` for gfx942 and gfx90a and
//! embedded here), loaded into this process's GPU memory as ROCr's loader would: every PT_LOAD
//! segment of the code object at its address from a page-aligned base, the kernel object at
//! `kfdq_spin.kd`. Its only argument is an iteration count; [`Spin::iterations`] turns a
//! work-group time into one from a calibration run alone.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use kfdq::kfd::{AllocFlags, Allocation, GpuId, Kfd};
use object::{Object, ObjectSegment, ObjectSymbol};

use super::R;
use crate::{CliError, kfd_error};

/// The embedded code objects, 8-byte aligned as ELF parsing wants them.
#[repr(C, align(8))]
struct Aligned<T: ?Sized>(T);
static GFX942: &Aligned<[u8]> = &Aligned(*include_bytes!("../../../../kernels/spin-gfx942.co"));
static GFX90A: &Aligned<[u8]> = &Aligned(*include_bytes!("../../../../kernels/spin-gfx90a.co"));
/// The kernel descriptor's symbol.
const DESCRIPTOR: &str = "kfdq_spin.kd";
/// Bytes per kernel-argument block (the explicit u64 and the hidden arguments of code object
/// v5, 256 bytes, rounded up).
const KERNARG_STRIDE: u64 = 512;
/// Distinct iteration counts one process may use at once.
const KERNARG_SLOTS: u64 = 16;

/// The code object for a `gfx_target_version`, if kfdq ships one.
pub fn code_object(gfx_target_version: u64) -> Option<&'static [u8]> {
    match gfx_target_version {
        90402 => Some(&GFX942.0),
        90010 => Some(&GFX90A.0),
        _ => None,
    }
}

/// The spin kernel loaded on one GPU, with its kernel-argument blocks.
#[derive(Debug)]
pub struct Spin<'k> {
    _code: Allocation<'k>,
    /// `kernel_object` of its dispatches.
    pub kernel_object: u64,
    kernargs: Allocation<'k>,
    /// Iteration count -> its block's address.
    slots: RefCell<HashMap<u64, u64>>,
    /// Nanoseconds per iteration (set by a calibration run; 0 until then).
    pub ns_per_iteration: Cell<f64>,
}

fn malformed(what: String) -> CliError {
    CliError::Refused(format!(
        "the embedded spin code object is malformed ({what}): rebuild it with scripts/kernels.sh"
    ))
}

impl<'k> Spin<'k> {
    /// Loads `image` on `gpu`.
    pub fn load(kfd: &'k Kfd, gpu: GpuId, image: &[u8]) -> R<Spin<'k>> {
        let root = kfd.root();
        let elf = object::File::parse(image).map_err(|e| malformed(e.to_string()))?;
        let end = elf
            .segments()
            .map(|s| s.address() + s.size())
            .max()
            .ok_or_else(|| malformed("no segments".into()))?;
        kfd.acquire_vm(gpu)
            .map_err(|e| kfd_error("ACQUIRE_VM", root, e))?;
        let mut code = kfd
            .alloc_userptr(
                gpu,
                end.next_multiple_of(4096),
                AllocFlags::WRITABLE | AllocFlags::EXECUTABLE,
            )
            .map_err(|e| kfd_error("memory for the spin kernel", root, e))?;
        for s in elf.segments() {
            let data = s.data().map_err(|e| malformed(e.to_string()))?;
            code.write_bytes(s.address(), data)
                .map_err(|e| kfd_error("loading the spin kernel", root, e))?;
        }
        let kd = elf
            .dynamic_symbols()
            .chain(elf.symbols())
            .find(|s| s.name() == Ok(DESCRIPTOR))
            .ok_or_else(|| malformed(format!("no {DESCRIPTOR}")))?;
        let kernargs = kfd
            .alloc_userptr(gpu, KERNARG_STRIDE * KERNARG_SLOTS, AllocFlags::WRITABLE)
            .map_err(|e| kfd_error("memory for kernel arguments", root, e))?;
        Ok(Spin {
            kernel_object: code.va() + kd.address(),
            _code: code,
            kernargs,
            slots: RefCell::new(HashMap::new()),
            ns_per_iteration: Cell::new(0.0),
        })
    }

    /// The iterations that take `wg_ns` (at least 1).
    pub fn iterations(&self, wg_ns: u64) -> u64 {
        let per = self.ns_per_iteration.get();
        if per > 0.0 {
            ((wg_ns as f64 / per).round() as u64).max(1)
        } else {
            wg_ns.max(1)
        }
    }

    /// The address of a kernel-argument block holding `iterations`.
    pub fn kernarg(&self, iterations: u64) -> R<u64> {
        let mut slots = self.slots.borrow_mut();
        if let Some(a) = slots.get(&iterations) {
            return Ok(*a);
        }
        let n = slots.len() as u64;
        if n >= KERNARG_SLOTS {
            return Err(CliError::Refused(format!(
                "the bench used more than {KERNARG_SLOTS} distinct spin lengths"
            )));
        }
        self.kernargs
            .atomic_u64(n * KERNARG_STRIDE)
            .map_err(|e| CliError::Refused(format!("writing kernel arguments: {e}")))?
            .store(iterations, std::sync::atomic::Ordering::Release);
        let addr = self.kernargs.va() + n * KERNARG_STRIDE;
        slots.insert(iterations, addr);
        Ok(addr)
    }
}
