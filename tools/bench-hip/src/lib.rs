//! The node's HIP runtime loaded at run time ([`hip`]), shared by `kfdq-bench-hip` (this
//! crate's helper) and the demo's HIP workloads (`tools/hip-workloads`): one piece of code
//! loads `libamdhip64.so.6` or `.so.7`.

pub mod hip;

/// The committed spin code objects (scripts/kernels.sh).
pub const GFX942: &[u8] = include_bytes!("../../../kernels/spin-gfx942.co");
/// The committed spin code object for gfx90a.
pub const GFX90A: &[u8] = include_bytes!("../../../kernels/spin-gfx90a.co");
/// The spin kernel's name in them.
pub const KERNEL: &str = "kfdq_spin";
/// Threads per wave (gfx90a and gfx942: wave64).
pub const WAVE_SIZE: u32 = 64;

/// The spin code object for `target`, if kfdq ships one.
pub fn spin_code_object(target: &str) -> Option<&'static [u8]> {
    match target {
        "gfx942" => Some(GFX942),
        "gfx90a" => Some(GFX90A),
        _ => None,
    }
}
