//! Compute-wave save/restore (CWSR) sizes and the context-save-area header.
//!
//! Linux 6.12+ publishes `cwsr_size` and `ctl_stack_size` per node and checks queue buffers
//! against them; older kernels do not, and both the kernel and libhsakmt then derive the sizes
//! from the node's shape (docs/kernel-interface.md §3). The debug area is never published.

use serde::Serialize;

use super::error::{Error, Result};
use super::topology::Node;

const PAGE: u64 = 4096;
/// Size of the CWSR header that precedes the control stack.
const CTL_STACK_HEADER: u64 = 40;

fn align(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

/// Where a size came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SizeSource {
    /// Read from sysfs (Linux 6.12+).
    Sysfs,
    /// Derived from the node's shape with the kernel's formula.
    Formula,
}

/// Sizes of the buffers a compute queue needs on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CwsrSizes {
    /// Per-XCC context save/restore size (`ctx_save_restore_size`).
    pub cwsr_size: u64,
    /// Per-XCC control-stack size (`ctl_stack_size`).
    pub ctl_stack_size: u64,
    /// Per-XCC debugger area size (not in sysfs; always derived).
    pub debug_memory_size: u64,
    /// XCCs in the node.
    pub num_xcc: u32,
    /// End-of-pipe buffer size (4096 on gfx9).
    pub eop_buffer_size: u64,
    /// Where `cwsr_size`/`ctl_stack_size` came from.
    pub source: SizeSource,
}

impl CwsrSizes {
    /// Sizes for `node`: sysfs values when published, the formula otherwise.
    pub fn for_node(node: &Node) -> Result<Self> {
        let need = |k: &str| {
            node.prop(k).ok_or_else(|| Error::Sysfs {
                path: format!("topology node {}", node.index).into(),
                what: format!("missing property {k}, needed to size the CWSR area"),
            })
        };
        let num_xcc = u64::from(node.num_xcc());
        let simd_per_cu = need("simd_per_cu")?.max(1);
        let cu_num = need("simd_count")? / simd_per_cu / num_xcc;
        let gfx = node.gfx_version().ok_or_else(|| Error::Sysfs {
            path: format!("topology node {}", node.index).into(),
            what: "missing gfx_target_version".into(),
        })?;
        let gfx10_plus = gfx.major >= 10;
        let wave_num = if gfx10_plus {
            cu_num * 32
        } else {
            let arrays = need("array_count")? / need("simd_arrays_per_engine")?.max(1);
            (cu_num * 40).min(arrays * 512)
        };
        let wave_size = if gfx10_plus { 12 } else { 8 };
        let ctl_formula = align(CTL_STACK_HEADER + wave_num * wave_size + 8, PAGE);
        let vgpr = if gfx.major == 9
            && (gfx.minor == 4
                || gfx.minor == 5
                || (gfx.minor == 0 && (gfx.stepping == 8 || gfx.stepping == 0xa)))
        {
            0x80000
        } else {
            0x40000
        };
        let lds = if gfx.major == 9 && gfx.minor == 5 {
            node.prop("lds_size_in_kb").unwrap_or(64) * 1024
        } else {
            0x10000
        };
        let wg_data = align(cu_num * (vgpr + 0x4000 + lds + 0x1000), PAGE);
        let debug_memory_size = align(wave_num * 32, 64);
        let (cwsr_size, ctl_stack_size, source) =
            match (node.prop("cwsr_size"), node.prop("ctl_stack_size")) {
                (Some(c), Some(s)) => (c, s, SizeSource::Sysfs),
                _ => (ctl_formula + wg_data, ctl_formula, SizeSource::Formula),
            };
        Ok(CwsrSizes {
            cwsr_size,
            ctl_stack_size,
            debug_memory_size,
            num_xcc: num_xcc as u32,
            eop_buffer_size: 4096,
            source,
        })
    }

    /// Bytes of the whole CWSR allocation: `ALIGN((cwsr + debug) x num_xcc, 4096)`.
    pub fn total(&self) -> u64 {
        align(
            (self.cwsr_size + self.debug_memory_size) * u64::from(self.num_xcc),
            PAGE,
        )
    }

    /// The context-save-area header of XCC `xcc` (libhsakmt's layout rule).
    pub fn header(&self, xcc: u32) -> kfd_sys::kfd_context_save_area_header {
        kfd_sys::kfd_context_save_area_header {
            debug_offset: (u64::from(self.num_xcc - xcc) * self.cwsr_size) as u32,
            debug_size: (self.debug_memory_size * u64::from(self.num_xcc)) as u32,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kfd::topology::Node;
    use std::collections::BTreeMap;

    fn node(props: &[(&str, u64)]) -> Node {
        Node {
            index: 1,
            gpu_id: Some(crate::kfd::GpuId(1)),
            name: "ip discovery".into(),
            properties: props
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    #[test]
    fn mi300x_spx_worked_example() {
        let n = node(&[
            ("simd_count", 1216),
            ("simd_per_cu", 4),
            ("num_xcc", 8),
            ("array_count", 32),
            ("simd_arrays_per_engine", 1),
            ("gfx_target_version", 90402),
        ]);
        let s = n.cwsr_sizes().unwrap();
        assert_eq!(s.source, SizeSource::Formula);
        assert_eq!(s.ctl_stack_size, 12_288);
        assert_eq!(s.cwsr_size, 23_203_840);
        assert_eq!(s.debug_memory_size, 48_640);
        assert_eq!(s.total(), 186_019_840);
        let h = s.header(0);
        assert_eq!(u64::from(h.debug_offset), 8 * 23_203_840);
        assert_eq!(u64::from(h.debug_size), 8 * 48_640);
    }

    #[test]
    fn sysfs_values_win() {
        let n = node(&[
            ("simd_count", 320),
            ("simd_per_cu", 4),
            ("num_xcc", 4),
            ("array_count", 16),
            ("simd_arrays_per_engine", 1),
            ("gfx_target_version", 90402),
            ("cwsr_size", 999_424),
            ("ctl_stack_size", 8192),
        ]);
        let s = n.cwsr_sizes().unwrap();
        assert_eq!(s.source, SizeSource::Sysfs);
        assert_eq!(s.cwsr_size, 999_424);
        assert_eq!(s.debug_memory_size, 25_600);
    }
}
