//! The render node's DRM ioctls that ROCr's thunk makes through libdrm before it uses a GPU:
//! `DRM_IOCTL_VERSION`, `DRM_IOCTL_GET_CLIENT` and the `DRM_IOCTL_AMDGPU_INFO` queries
//! (ACCEL_WORKING, DEV_INFO, READ_MMR_REG, HW_IP_COUNT, HW_IP_INFO, VRAM_GTT, MEMORY), with
//! the layouts of the kernel's `drm.h` / `amdgpu_drm.h`. Any other request is answered
//! `EINVAL`, as `drm_ioctl` does for a number the driver does not define.

use fuser::ReplyIoctl;
use libc::{EFAULT, EINVAL};

use crate::abi::{put_u32, put_u64, u32_at, u64_at};
use crate::client_mem;
use crate::config::{GPU_COUNTER_HZ, GpuNode};
use crate::process;
use crate::reply::send_reply;
use crate::state::Emu;

/// `DRM_IOWR(0x00, struct drm_version)` (64 bytes).
const DRM_IOCTL_VERSION: u32 = 0xc040_6400;
/// `DRM_IOWR(0x05, struct drm_client)` (40 bytes).
const DRM_IOCTL_GET_CLIENT: u32 = 0xc028_6405;
/// `DRM_IOW(DRM_COMMAND_BASE + DRM_AMDGPU_INFO, struct drm_amdgpu_info)` (32 bytes).
const DRM_IOCTL_AMDGPU_INFO: u32 = 0x4020_6445;

const INFO_ACCEL_WORKING: u32 = 0x00;
const INFO_HW_IP_INFO: u32 = 0x02;
const INFO_HW_IP_COUNT: u32 = 0x03;
const INFO_VRAM_GTT: u32 = 0x14;
const INFO_READ_MMR_REG: u32 = 0x15;
const INFO_DEV_INFO: u32 = 0x16;
const INFO_MEMORY: u32 = 0x19;

const HW_IP_COMPUTE: u32 = 1;
const HW_IP_DMA: u32 = 2;

/// amdgpu's DRM interface version reported by DRM_IOCTL_VERSION (`KMS_DRIVER_MAJOR` is 3).
const DRIVER_MAJOR: i32 = 3;
const DRIVER_MINOR: i32 = 59;
const DRIVER_NAME: &[u8] = b"amdgpu";
const DRIVER_DATE: &[u8] = b"20150101";
const DRIVER_DESC: &[u8] = b"AMD GPU";

/// `AMDGPU_FAMILY_AI`: the gfx9 family (Vega and the Instinct gfx94x parts).
const FAMILY_AI: u32 = 141;
/// `AMDGPU_VRAM_TYPE_HBM`.
const VRAM_TYPE_HBM: u32 = 6;
/// Longest READ_MMR_REG request the kernel serves (`count` registers).
const MMR_MAX: u32 = 128;
/// System memory the GTT heap reports.
const GTT_BYTES: u64 = 64 << 30;

/// The `u32` / `u64` at byte `at` of a request's fixed-size argument (0 past its end).
fn get_u32(b: &[u8], at: usize) -> u32 {
    u32_at(b, at).unwrap_or(0)
}

fn get_u64(b: &[u8], at: usize) -> u64 {
    u64_at(b, at).unwrap_or(0)
}

/// `struct drm_amdgpu_info_device` (440 bytes) of a node; unlisted fields are 0.
fn dev_info(g: &GpuNode) -> Vec<u8> {
    let prop = |k: &str| g.props.get(k).copied().unwrap_or(0);
    let mut b = vec![0u8; 440];
    let cus = u32::try_from(prop("simd_count") / prop("simd_per_cu").max(1)).unwrap_or(0);
    let engines =
        u32::try_from(prop("array_count") / prop("simd_arrays_per_engine").max(1)).unwrap_or(0);
    put_u32(&mut b, 0, u32::try_from(prop("device_id")).unwrap_or(0));
    put_u32(&mut b, 12, g.pci_rev);
    put_u32(&mut b, 16, FAMILY_AI);
    put_u32(&mut b, 20, engines);
    put_u32(
        &mut b,
        24,
        u32::try_from(prop("simd_arrays_per_engine")).unwrap_or(1),
    );
    put_u32(
        &mut b,
        28,
        u32::try_from(GPU_COUNTER_HZ / 1000).unwrap_or(0),
    );
    put_u64(&mut b, 32, prop("max_engine_clk_fcompute") * 1000);
    put_u64(&mut b, 40, 1_300_000);
    put_u32(&mut b, 48, cus);
    put_u64(&mut b, 152, (1 << 47) - 1);
    put_u32(&mut b, 160, 4096);
    put_u32(&mut b, 164, 2 << 20);
    put_u32(&mut b, 168, 4096);
    put_u32(&mut b, 176, VRAM_TYPE_HBM);
    put_u32(&mut b, 180, 8192);
    put_u32(
        &mut b,
        240,
        u32::try_from(prop("wave_front_size")).unwrap_or(64),
    );
    put_u32(&mut b, 244, 512);
    put_u32(
        &mut b,
        248,
        u32::try_from(prop("cu_per_simd_array")).unwrap_or(0),
    );
    b
}

/// `struct drm_amdgpu_info_hw_ip` (40 bytes) of an engine type.
fn hw_ip_info(ip: u32) -> Vec<u8> {
    let mut b = vec![0u8; 40];
    let (major, minor, rings) = match ip {
        HW_IP_COMPUTE => (9, 4, 0xff),
        HW_IP_DMA => (4, 4, 0x3),
        _ => (0, 0, 0),
    };
    put_u32(&mut b, 0, major);
    put_u32(&mut b, 4, minor);
    put_u32(&mut b, 16, 256);
    put_u32(&mut b, 20, 4);
    put_u32(&mut b, 24, rings);
    b
}

/// One AMDGPU_INFO query: the bytes the kernel would write to `return_pointer`.
fn info(g: &GpuNode, query: u32, arg: &[u8]) -> Result<Vec<u8>, i32> {
    let vram = g.vram_bytes();
    Ok(match query {
        INFO_ACCEL_WORKING => 1u32.to_ne_bytes().to_vec(),
        INFO_DEV_INFO => dev_info(g),
        INFO_READ_MMR_REG => {
            // Registers read as 0: the thunk accepts that for the tiling registers it reads.
            let count = get_u32(arg, 4);
            if count > MMR_MAX {
                return Err(EINVAL);
            }
            vec![0u8; count as usize * 4]
        }
        INFO_HW_IP_COUNT => {
            let n: u32 = match get_u32(arg, 0) {
                HW_IP_COMPUTE | HW_IP_DMA => 1,
                _ => 0,
            };
            n.to_ne_bytes().to_vec()
        }
        INFO_HW_IP_INFO => hw_ip_info(get_u32(arg, 0)),
        INFO_VRAM_GTT => {
            let mut b = vec![0u8; 24];
            put_u64(&mut b, 0, vram);
            put_u64(&mut b, 8, vram);
            put_u64(&mut b, 16, GTT_BYTES);
            b
        }
        INFO_MEMORY => {
            // Three heaps (VRAM, CPU-visible VRAM, GTT) of {total, usable, usage, max_allocation}.
            let mut b = vec![0u8; 96];
            for (i, size) in [vram, vram, GTT_BYTES].into_iter().enumerate() {
                put_u64(&mut b, i * 32, size);
                put_u64(&mut b, i * 32 + 8, size);
                put_u64(&mut b, i * 32 + 24, size);
            }
            b
        }
        _ => return Err(EINVAL),
    })
}

/// Copies a string to a caller's buffer of `len` bytes (as much as fits) and returns its length.
fn copy_str(tgid: u32, ptr: u64, len: u64, s: &[u8]) -> Result<u64, i32> {
    let n = usize::try_from(len).unwrap_or(usize::MAX).min(s.len());
    if ptr != 0 && n > 0 {
        client_mem::write(tgid, ptr, &s[..n]).map_err(|_| EFAULT)?;
    }
    Ok(s.len() as u64)
}

fn version(tgid: u32, b: &mut [u8]) -> Result<(), i32> {
    put_u32(b, 0, DRIVER_MAJOR as u32);
    put_u32(b, 4, DRIVER_MINOR as u32);
    put_u32(b, 8, 0);
    for (at, s) in [(16, DRIVER_NAME), (32, DRIVER_DATE), (48, DRIVER_DESC)] {
        let len = copy_str(tgid, get_u64(b, at + 8), get_u64(b, at), s)?;
        put_u64(b, at, len);
    }
    Ok(())
}

fn client(tgid: u32, b: &mut [u8]) -> Result<(), i32> {
    // Only client 0, the caller itself, is known: it is authenticated (render nodes need no
    // authentication).
    if get_u32(b, 0) != 0 {
        return Err(EINVAL);
    }
    let uid: u64 = process::status_field(tgid, "Uid")
        .and_then(|s| s.split_whitespace().next().and_then(|u| u.parse().ok()))
        .unwrap_or(0);
    put_u32(b, 4, 1);
    put_u64(b, 8, u64::from(tgid));
    put_u64(b, 16, uid);
    put_u64(b, 24, 0);
    put_u64(b, 32, 0);
    Ok(())
}

/// Handles one ioctl on render node `gpu` (index into the topology's GPU nodes).
pub(crate) fn dispatch(
    emu: &Emu,
    tid: u32,
    gpu: usize,
    cmd: u32,
    in_data: &[u8],
    reply: ReplyIoctl,
) {
    let Some(tgid) = process::tgid_of(emu, tid) else {
        return send_reply(reply, &[], Err(libc::ESRCH));
    };
    let g = &emu.topo.gpus[gpu];
    let size = kfd_sys::ioc::size(cmd);
    let mut b = vec![0u8; size];
    let n = in_data.len().min(size);
    b[..n].copy_from_slice(&in_data[..n]);
    let res = match cmd {
        DRM_IOCTL_VERSION => version(tgid, &mut b).map(|()| b),
        DRM_IOCTL_GET_CLIENT => client(tgid, &mut b).map(|()| b),
        DRM_IOCTL_AMDGPU_INFO => {
            let (ptr, want, query) = (get_u64(&b, 0), get_u32(&b, 8), get_u32(&b, 12));
            info(g, query, &b[16..32]).and_then(|out| {
                let n = (want as usize).min(out.len());
                client_mem::write(tgid, ptr, &out[..n]).map_err(|_| EFAULT)?;
                Ok(Vec::new())
            })
        }
        _ => {
            tracing::debug!(cmd, "unknown render-node ioctl: EINVAL");
            Err(EINVAL)
        }
    };
    match res {
        Ok(out) => send_reply(reply, &out, Ok(0)),
        Err(e) => send_reply(reply, &[], Err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{EmuConfig, Preset, Topology};

    #[test]
    fn dev_info_of_mi308x() {
        let t = Topology::build(&EmuConfig {
            preset: Preset::Mi308x,
            ..EmuConfig::default()
        })
        .unwrap();
        let b = dev_info(&t.gpus[0]);
        assert_eq!(get_u32(&b, 0), 0x74a2);
        assert_eq!(get_u32(&b, 16), FAMILY_AI);
        assert_eq!(get_u32(&b, 28), 100_000);
        assert_eq!(get_u32(&b, 48), 80);
        assert_eq!(
            info(&t.gpus[0], INFO_READ_MMR_REG, &[0, 0, 0, 0, 2, 0, 0, 0])
                .unwrap()
                .len(),
            8
        );
        assert_eq!(info(&t.gpus[0], 0x7f, &[0; 16]), Err(EINVAL));
    }
}
