//! The DRM and PCI sysfs of the emulated GPUs, what ROCm SMI (and through it rocBLAS's and
//! hipBLASLt's benchmarks, `rocm-smi`, `amd-smi`) reads to list a GPU: for each KFD GPU node,
//! `sys/class/drm/renderD<minor>` and `sys/class/drm/card<k>` link to the device's `drm/`
//! entries, whose `device` link names the PCI function (`DDDD:BB:DD.F`, from the node's
//! `location_id` and `domain`); the PCI function directory holds what amdgpu's sysfs shows
//! (vendor and device ids, `unique_id`, the VRAM and GTT totals and use, the link speed, the
//! compute and memory partition on GC 9.4.3).
//!
//! Each PCI function sits under its own root port directory `sys/devices/pci<DDDD>:<BB>`;
//! `kfd-emu run` shows them at `/sys/devices` beside the host's devices. The partitions of a
//! GPU past the first are `amdgpu_xcp_<n>` platform devices, as amdgpu's XCP code registers
//! them, under `sys/devices/platform-kfd-emu` (`/sys/devices/platform` is the host's), with
//! only their `drm/` entries as amdgpu's have: ROCm SMI 6.4.1 reads a partition's files through
//! its `renderD<minor>/device` and shows N/A for those only the PCI function holds.
//!
//! Values the kernel takes from the device (subsystem ids, product name, serial, VBIOS) are
//! synthetic, named in docs/kfd-emulator.md.

use crate::config::{GpuNode, Topology};

/// What one generated sysfs entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    Dir,
    Text(String),
    /// A symbolic link with this target.
    Link(String),
    /// `mem_info_vram_used` of GPU node `.0` (live: the VRAM BOs of every process).
    VramUsed(usize),
    /// `mem_info_gtt_used` of GPU node `.0` (live: its GTT BOs).
    GttUsed(usize),
}

/// DRM major number of render and card nodes.
const DRM_MAJOR: u32 = 226;
/// GTT (system memory the GPU maps) amdgpu reports: its default is 3/4 of system memory, here
/// of the CPU node's 512 GiB.
const GTT_BYTES: u64 = 384 << 30;
/// Directory under `sys/devices` that holds the partitions' platform devices.
pub(crate) const PLATFORM_DIR: &str = "platform-kfd-emu";

/// PCI `DDDD:BB:DD.F` of a GPU's first node: `location_id` is `bus << 8 | device << 3 | function`
/// (the other partitions' have their index ORed in and sit on `amdgpu_xcp_<n>` devices).
fn bdf(g: &GpuNode) -> (String, String) {
    let prop = |k: &str| g.props.get(k).copied().unwrap_or(0);
    let loc = prop("location_id");
    let domain = prop("domain");
    let bus = (loc >> 8) & 0xff;
    let name = format!(
        "{domain:04x}:{bus:02x}:{:02x}.{:x}",
        (loc >> 3) & 0x1f,
        loc & 7
    );
    (format!("pci{domain:04x}:{bus:02x}"), name)
}

/// Path parts from a `/`-separated string.
fn parts(s: &str) -> Vec<String> {
    s.split('/').map(str::to_string).collect()
}

/// Every entry, path relative to the mount root.
pub(crate) fn drm_entries(topo: &Topology) -> Vec<(Vec<String>, Entry)> {
    let mut out = Vec::new();
    let mut push = |path: String, e: Entry| out.push((parts(&path), e));
    for (i, g) in topo.gpus.iter().enumerate() {
        let (root, pci) = bdf(g);
        let part = g.node - 1 - g.physical * topo.nodes_per_gpu;
        // The first partition is the PCI function; the others amdgpu_xcp_<n> devices, numbered
        // from 0 over every GPU in the order amdgpu registers them (`pdev_num`).
        let (dev_dir, up) = if part == 0 {
            (format!("sys/devices/{root}/{pci}"), "../../devices")
        } else {
            let xcp = g.physical * (topo.nodes_per_gpu - 1) + part - 1;
            (
                format!("sys/devices/{PLATFORM_DIR}/amdgpu_xcp_{xcp}"),
                "../../devices",
            )
        };
        let dev_rel = dev_dir.trim_start_matches("sys/devices/");
        let card = g.node - 1;
        for (name, minor) in [
            (format!("card{card}"), card),
            (format!("renderD{}", g.render_minor), g.render_minor),
        ] {
            let dir = format!("{dev_dir}/drm/{name}");
            push(
                format!("{dir}/dev"),
                Entry::Text(format!("{DRM_MAJOR}:{minor}\n")),
            );
            push(
                format!("{dir}/device"),
                Entry::Link(format!(
                    "../../../{}",
                    dev_rel.rsplit('/').next().unwrap_or("")
                )),
            );
            push(
                format!("sys/class/drm/{name}"),
                Entry::Link(format!("{up}/{dev_rel}/drm/{name}")),
            );
        }
        if part != 0 {
            continue;
        }
        for (file, text) in device_files(topo, g) {
            push(format!("{dev_dir}/{file}"), Entry::Text(text));
        }
        push(format!("{dev_dir}/mem_info_vram_used"), Entry::VramUsed(i));
        push(
            format!("{dev_dir}/mem_info_vis_vram_used"),
            Entry::VramUsed(i),
        );
        push(format!("{dev_dir}/mem_info_gtt_used"), Entry::GttUsed(i));
    }
    out.push((parts("sys/class/drm"), Entry::Dir));
    out
}

/// The static files of a GPU's PCI function directory.
fn device_files(topo: &Topology, g: &GpuNode) -> Vec<(&'static str, String)> {
    let prop = |k: &str| g.props.get(k).copied().unwrap_or(0);
    let vram = g.vram_bytes();
    let speed = if topo.pcie_max_mbytes >= 64_000 {
        "32.0"
    } else {
        "16.0"
    };
    let mut files = vec![
        ("vendor", format!("{:#06x}\n", prop("vendor_id"))),
        ("device", format!("{:#06x}\n", prop("device_id"))),
        ("subsystem_vendor", format!("{:#06x}\n", prop("vendor_id"))),
        // Synthetic: the subsystem id of an AMD-built board repeats the device id.
        ("subsystem_device", format!("{:#06x}\n", prop("device_id"))),
        ("revision", format!("{:#04x}\n", g.pci_rev)),
        // PCI_CLASS_DISPLAY_OTHER, as lspci shows Instinct boards.
        ("class", "0x038000\n".to_string()),
        ("unique_id", format!("{:016x}\n", prop("unique_id"))),
        ("mem_info_vram_total", format!("{vram}\n")),
        ("mem_info_vis_vram_total", format!("{vram}\n")),
        ("mem_info_gtt_total", format!("{GTT_BYTES}\n")),
        ("mem_info_vram_vendor", "hynix\n".to_string()),
        ("current_link_speed", format!("{speed} GT/s PCIe\n")),
        ("max_link_speed", format!("{speed} GT/s PCIe\n")),
        ("current_link_width", "16\n".to_string()),
        ("max_link_width", "16\n".to_string()),
        ("product_name", format!("{}\n", topo.marketing_name)),
        ("product_number", "kfd-emu\n".to_string()),
        ("serial_number", format!("{:016X}\n", prop("unique_id"))),
        ("vbios_version", "kfd-emu\n".to_string()),
    ];
    if topo.has_aids {
        let compute = if topo.nodes_per_gpu == 1 {
            "SPX"
        } else {
            "CPX"
        };
        files.push(("current_compute_partition", format!("{compute}\n")));
        files.push(("available_compute_partition", "SPX, DPX, QPX, CPX\n".into()));
        files.push(("current_memory_partition", "NPS1\n".into()));
        files.push(("available_memory_partition", "NPS1, NPS4\n".into()));
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{EmuConfig, Preset};

    fn find<'a>(e: &'a [(Vec<String>, Entry)], path: &str) -> Option<&'a Entry> {
        e.iter().find(|(p, _)| p.join("/") == path).map(|(_, e)| e)
    }

    #[test]
    fn one_gpu_is_a_pci_function_with_a_card_and_a_render_node() {
        let t = Topology::build(&EmuConfig {
            preset: Preset::Mi210,
            ..EmuConfig::default()
        })
        .unwrap();
        let e = drm_entries(&t);
        let dev = "sys/devices/pci0000:0c/0000:0c:00.0";
        assert_eq!(
            find(&e, "sys/class/drm/renderD128"),
            Some(&Entry::Link(format!(
                "../../devices/{}/drm/renderD128",
                &dev[12..]
            )))
        );
        assert_eq!(
            find(&e, &format!("{dev}/drm/card0/device")),
            Some(&Entry::Link("../../../0000:0c:00.0".into()))
        );
        assert_eq!(
            find(&e, &format!("{dev}/vendor")),
            Some(&Entry::Text("0x1002\n".into()))
        );
        assert_eq!(
            find(&e, &format!("{dev}/device")),
            Some(&Entry::Text("0x740f\n".into()))
        );
        assert_eq!(
            find(&e, &format!("{dev}/mem_info_vram_used")),
            Some(&Entry::VramUsed(0))
        );
        assert!(find(&e, &format!("{dev}/current_compute_partition")).is_none());
    }

    #[test]
    fn partitions_past_the_first_are_xcp_devices() {
        let t = Topology::build(&EmuConfig {
            preset: Preset::Mi300xCpx,
            ..EmuConfig::default()
        })
        .unwrap();
        let e = drm_entries(&t);
        assert_eq!(
            find(&e, "sys/class/drm/renderD129"),
            Some(&Entry::Link(format!(
                "../../devices/{PLATFORM_DIR}/amdgpu_xcp_0/drm/renderD129"
            )))
        );
        assert_eq!(
            find(
                &e,
                "sys/devices/pci0000:0c/0000:0c:00.0/current_compute_partition"
            ),
            Some(&Entry::Text("CPX\n".into()))
        );
    }
}
