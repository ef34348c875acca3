//! Compute-wave save/restore (CWSR) sizes and the context-save-area header.
//!
//! Linux 6.12+ publishes `cwsr_size` and `ctl_stack_size` per node and checks queue buffers
//! against them; older kernels do not, and user space then derives the sizes from the node's
//! shape with the kernel's formula, `kfd_sys::cwsr` (docs/kernel-interface.md §3). The debug
//! area is never published.

use kfd_sys::cwsr::{self, NodeProperties};
use serde::Serialize;

use super::error::{Error, Result};

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
    /// Sizes for topology node `index` with `num_xcc` XCCs whose properties `prop` reads:
    /// sysfs values when published, the formula otherwise. (`topology::Node::cwsr_sizes`
    /// calls it.)
    pub(crate) fn from_properties(
        index: u32,
        num_xcc: u32,
        prop: impl Fn(&str) -> Option<u64>,
    ) -> Result<Self> {
        let missing = |what: String| Error::Sysfs {
            path: format!("topology node {index}").into(),
            what,
        };
        let need = |k: &str| {
            let v = prop(k).ok_or_else(|| {
                missing(format!(
                    "missing property {k}, needed to size the CWSR area"
                ))
            })?;
            u32::try_from(v)
                .map_err(|_| missing(format!("property {k} = {v} does not fit in 32 bits")))
        };
        let gfx_target_version = need("gfx_target_version")?;
        if gfx_target_version == 0 {
            return Err(missing("missing gfx_target_version".into()));
        }
        let formula = cwsr::ctx_save_restore_size(&NodeProperties {
            gfx_target_version,
            simd_count: need("simd_count")?,
            simd_per_cu: need("simd_per_cu")?,
            array_count: need("array_count")?,
            simd_arrays_per_engine: need("simd_arrays_per_engine")?,
            // 64 KiB when absent: the formula reads it for gfx950 only.
            lds_size_in_kb: prop("lds_size_in_kb").map_or(Ok(64), |_| need("lds_size_in_kb"))?,
            num_xcc,
        });
        let (cwsr_size, ctl_stack_size, source) = match (prop("cwsr_size"), prop("ctl_stack_size"))
        {
            (Some(c), Some(s)) => (c, s, SizeSource::Sysfs),
            _ => (
                u64::from(formula.cwsr_size),
                u64::from(formula.ctl_stack_size),
                SizeSource::Formula,
            ),
        };
        Ok(CwsrSizes {
            cwsr_size,
            ctl_stack_size,
            debug_memory_size: u64::from(formula.debug_memory_size),
            num_xcc,
            eop_buffer_size: 4096,
            source,
        })
    }

    /// Bytes of the whole CWSR allocation: `ALIGN((cwsr + debug) x num_xcc, 4096)`.
    pub fn total(&self) -> u64 {
        cwsr::total_cwsr_size(self.cwsr_size, self.debug_memory_size, self.num_xcc)
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
