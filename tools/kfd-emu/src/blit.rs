//! The runtime's own copy kernels, whose effect the emulator performs because it runs no shader
//! code: when a dispatch of ROCclr's `__amd_rocclr_copyBuffer` or `__amd_rocclr_copyBufferAligned`
//! (what HIP uses for small host-device copies through its staging buffers and for
//! device-to-device copies) completes, the bytes its arguments describe are copied, so
//! `hipMemcpy` of any size returns correct data.
//!
//! The arguments are found by name in the code object's metadata (see `code_object`), which
//! keeps this independent of the argument order, which changed between ROCm releases: the
//! source and destination pointers (`src`/`srcI`, `dst`/`dstI`), optional byte origins
//! (`srcOrigin`, `dstOrigin`) and the byte count `size`.
//!
//! ROCr has blit kernels of its own (`CopyAligned`, `CopyMisaligned`, `Fill`, in
//! `amd_blit_kernel.cpp`), used among others by its loader to copy code objects into device
//! memory. They are not in ELF code objects (ROCr places their code and descriptors in memory
//! of its own), and their arguments are fixed structures of phase start and end addresses
//! followed by the number of work-items, which equals the dispatch's grid; their work-groups
//! have 64 work-items. A dispatch whose descriptor lies outside any ELF code object and whose
//! arguments satisfy every invariant of one of these structures (phases never go back, source
//! and destination advance together, the work-item count is the grid) is performed as that
//! copy or fill.

use crate::abi::{u32_at, u64_at};
use crate::code_object::Kernel;
use crate::gpu_mem::Vm;
use crate::state::KernelEffect;

/// Kernels whose effect is a linear copy of `size` bytes.
const COPY_KERNELS: [&str; 2] = ["__amd_rocclr_copyBuffer", "__amd_rocclr_copyBufferAligned"];

fn arg_u64(k: &Kernel, kernarg: &[u8], names: &[&str]) -> Option<u64> {
    let a = names.iter().find_map(|n| k.arg(n))?;
    let start = a.offset as usize;
    let bytes = kernarg.get(start..start + (a.size as usize).min(8))?;
    let mut b = [0u8; 8];
    b[..bytes.len()].copy_from_slice(bytes);
    Some(u64::from_le_bytes(b))
}

/// Bytes of kernel arguments to read for `k` (the end of its last argument).
pub(crate) fn kernarg_len(k: &Kernel) -> usize {
    k.args
        .iter()
        .map(|a| a.offset as usize + a.size as usize)
        .max()
        .unwrap_or(0)
}

/// What a dispatch of `k` with these kernel arguments does to memory, if the emulator knows.
pub(crate) fn effect(k: &Kernel, kernarg: &[u8]) -> Option<KernelEffect> {
    if !COPY_KERNELS.contains(&k.name.as_str()) {
        return None;
    }
    let src = arg_u64(k, kernarg, &["src", "srcI"])?;
    let dst = arg_u64(k, kernarg, &["dst", "dstI"])?;
    let len = arg_u64(k, kernarg, &["size"])?;
    let src_origin = arg_u64(k, kernarg, &["srcOrigin"]).unwrap_or(0);
    let dst_origin = arg_u64(k, kernarg, &["dstOrigin"]).unwrap_or(0);
    Some(KernelEffect::Copy {
        src: src.wrapping_add(src_origin),
        dst: dst.wrapping_add(dst_origin),
        len,
    })
}

/// Bytes of ROCr's blit kernel argument union (16-byte aligned `copy_aligned`).
pub(crate) const ROCR_KERNARG_LEN: usize = 96;
/// Work-group size of ROCr's blit kernels.
const ROCR_BLIT_WG: u16 = 64;

/// The `n` `u64`s at the front of `b`.
fn u64s(b: &[u8], n: usize) -> Vec<u64> {
    (0..n).map(|i| u64_at(b, i * 8).unwrap_or(0)).collect()
}

/// The `u32` at byte `at` of ROCr's argument union (inside `ROCR_KERNARG_LEN`).
fn u32_in(b: &[u8], at: usize) -> u32 {
    u32_at(b, at).unwrap_or(0)
}

/// Source and destination phase addresses of a ROCr copy that advance together and never go
/// back: `(src, dst)` pairs, the last being the end.
fn copy_phases(pairs: &[(u64, u64)]) -> Option<KernelEffect> {
    let (s0, d0) = pairs[0];
    let delta = d0.wrapping_sub(s0);
    let ordered = pairs
        .windows(2)
        .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1);
    let together = pairs.iter().all(|(s, d)| d.wrapping_sub(*s) == delta);
    let (end, _) = pairs[pairs.len() - 1];
    (ordered && together && end > s0).then_some(KernelEffect::Copy {
        src: s0,
        dst: d0,
        len: end - s0,
    })
}

/// What a dispatch of one of ROCr's own blit kernels does, recognised from its arguments (see
/// the module docs); the caller has found no ELF code object around the descriptor. `grid_x`
/// and `wg_x` come from the packet.
pub(crate) fn rocr_effect(kernarg: &[u8], grid_x: u32, wg_x: u16) -> Option<KernelEffect> {
    if kernarg.len() < ROCR_KERNARG_LEN || wg_x != ROCR_BLIT_WG {
        return None;
    }
    let a = u64s(kernarg, 10);
    // copy_aligned: 4 phases of (src, dst) starts, the (src, dst) ends, work-items at 80.
    if u32_in(kernarg, 80) == grid_x {
        let pairs: Vec<(u64, u64)> = a.chunks_exact(2).map(|p| (p[0], p[1])).collect();
        if let Some(e) = copy_phases(&pairs) {
            return Some(e);
        }
    }
    // copy_misaligned: 2 phases of (src, dst) starts, the ends, work-items at 48.
    if u32_in(kernarg, 48) == grid_x {
        let pairs: Vec<(u64, u64)> = a[..6].chunks_exact(2).map(|p| (p[0], p[1])).collect();
        if let Some(e) = copy_phases(&pairs) {
            return Some(e);
        }
    }
    // fill: phase 1 start, phase 2 start, end, the 32-bit value, work-items at 28.
    if u32_in(kernarg, 28) == grid_x
        && a[0] <= a[1]
        && a[1] <= a[2]
        && a[2] > a[0]
        && a[1] - a[0] < 16
    {
        return Some(KernelEffect::Fill {
            dst: a[0],
            len: a[2] - a[0],
            value: u32_in(kernarg, 24),
        });
    }
    None
}

/// Performs an effect in the GPU memory of a process.
pub(crate) fn perform(vm: &Vm<'_>, e: &KernelEffect) -> Result<(), i32> {
    match e {
        KernelEffect::Copy { src, dst, len } => vm.copy(*src, *dst, *len),
        KernelEffect::Fill { dst, len, value } => vm.fill(*dst, *len, &value.to_le_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code_object::Arg;

    fn arg(name: &str, offset: u32, size: u32) -> Arg {
        Arg {
            name: name.into(),
            offset,
            size,
        }
    }

    #[test]
    fn rocr_blits_by_layout() {
        let mut ka = vec![0u8; ROCR_KERNARG_LEN];
        // copy_aligned of 1000 bytes from 0x1003 to 0x9003 in 4 phases.
        let starts = [0x1003u64, 0x1100, 0x1300, 0x13e0, 0x13eb];
        for (i, s) in starts.iter().enumerate() {
            ka[i * 16..i * 16 + 8].copy_from_slice(&s.to_le_bytes());
            ka[i * 16 + 8..i * 16 + 16].copy_from_slice(&(s + 0x8000).to_le_bytes());
        }
        ka[80..84].copy_from_slice(&640u32.to_le_bytes());
        assert_eq!(
            rocr_effect(&ka, 640, 64),
            Some(KernelEffect::Copy {
                src: 0x1003,
                dst: 0x9003,
                len: 0x13eb - 0x1003
            })
        );
        // A different grid or another work-group size: not a ROCr blit.
        assert_eq!(rocr_effect(&ka, 641, 64), None);
        assert_eq!(rocr_effect(&ka, 640, 256), None);
        // Destination not advancing with the source.
        ka[40..48].copy_from_slice(&0x1u64.to_le_bytes());
        assert_eq!(rocr_effect(&ka, 640, 64), None);
        // fill of 4096 bytes with 0xdeadbeef.
        let mut ka = vec![0u8; ROCR_KERNARG_LEN];
        for (i, v) in [0x4000u64, 0x4000, 0x5000].into_iter().enumerate() {
            ka[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        ka[24..28].copy_from_slice(&0xdead_beefu32.to_le_bytes());
        ka[28..32].copy_from_slice(&128u32.to_le_bytes());
        assert_eq!(
            rocr_effect(&ka, 128, 64),
            Some(KernelEffect::Fill {
                dst: 0x4000,
                len: 0x1000,
                value: 0xdead_beef
            })
        );
    }

    #[test]
    fn copy_arguments_by_name() {
        // ROCm 6.4 order: src, dst, size, ...
        let k = Kernel {
            name: "__amd_rocclr_copyBuffer".into(),
            args: vec![arg("src", 0, 8), arg("dst", 8, 8), arg("size", 16, 8)],
        };
        let mut ka = vec![0u8; kernarg_len(&k)];
        ka[0..8].copy_from_slice(&0x1000u64.to_le_bytes());
        ka[8..16].copy_from_slice(&0x2000u64.to_le_bytes());
        ka[16..24].copy_from_slice(&77u64.to_le_bytes());
        assert_eq!(
            effect(&k, &ka),
            Some(KernelEffect::Copy {
                src: 0x1000,
                dst: 0x2000,
                len: 77
            })
        );
        // Older order with origins.
        let k = Kernel {
            name: "__amd_rocclr_copyBuffer".into(),
            args: vec![
                arg("srcI", 0, 8),
                arg("dstI", 8, 8),
                arg("srcOrigin", 16, 8),
                arg("dstOrigin", 24, 8),
                arg("size", 32, 8),
            ],
        };
        let mut ka = vec![0u8; 40];
        for (i, v) in [0x1000u64, 0x2000, 5, 7, 9].into_iter().enumerate() {
            ka[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        assert_eq!(
            effect(&k, &ka),
            Some(KernelEffect::Copy {
                src: 0x1005,
                dst: 0x2007,
                len: 9
            })
        );
        let other = Kernel {
            name: "my_kernel".into(),
            args: vec![],
        };
        assert_eq!(effect(&other, &ka), None);
    }
}
