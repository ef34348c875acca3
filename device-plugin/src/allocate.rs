//! `Allocate` for one container: which shares it may have, and what the container gets — the
//! partition's `/dev/kfd` and render node, the shim and the agent's socket directory
//! (read-only), and the environment that puts it under kfdq in its class, with a fresh
//! allocation token that the agent trusts over `KFDQ_CLASS` (docs/kubernetes.md).

use std::collections::HashMap;
use std::path::Path;

use kfdq::GpuId;
use kfdq::allocation::{TOKEN_ENV, Token};
use tonic::Status;

use crate::api::deviceplugin::{ContainerAllocateResponse, DeviceSpec, Mount};
use crate::config::{Config, SHIM_DIR};
use crate::grants::Grants;
use crate::health::Health;
use crate::shares::ShareId;

/// The variable that names the partition to ROCr. The container is given exactly one render
/// node, so ROCr enumerates exactly one GPU agent there and index 0 is the partition
/// (ROCR_VISIBLE_DEVICES takes indices or UUIDs; HIP_VISIBLE_DEVICES indexes what ROCr
/// exposes, docs/kubernetes.md "Visibility").
pub const VISIBILITY_ENV: &str = "ROCR_VISIBLE_DEVICES";

/// Checks a container's share ids against `class`'s configuration and the grants: every id is
/// one this server advertises, of one partition, healthy, and held by no grant (the kubelet
/// keeps its own allocations across its restarts in its checkpoint and does not allocate a
/// device twice; a share comes free when PodResources shows no container holds it). Returns
/// the partition.
pub fn check(
    config: &Config,
    partitions: &[GpuId],
    class: &str,
    shares: u32,
    ids: &[String],
    health: &Health,
    grants: &Grants,
) -> Result<GpuId, Status> {
    let resource = config.resource_name(class);
    if ids.is_empty() {
        return Err(Status::invalid_argument(format!(
            "{resource}: a container request names no share ids"
        )));
    }
    let mut gpu = None;
    for id in ids {
        let s: ShareId = id
            .parse()
            .map_err(|e| Status::invalid_argument(format!("{resource}: {e}")))?;
        if s.class != class {
            return Err(Status::invalid_argument(format!(
                "{resource}: share {id} is of class {:?}; one request holds shares of {resource} only (a pod asks each class as its own resource)",
                s.class
            )));
        }
        if !partitions.contains(&s.gpu) || s.n >= shares {
            return Err(Status::not_found(format!(
                "{resource}: share {id} is not advertised here (partitions {partitions:?}, {shares} shares each)"
            )));
        }
        if *gpu.get_or_insert(s.gpu) != s.gpu {
            return Err(Status::invalid_argument(format!(
                "{resource}: shares {ids:?} span partitions; a container's shares are of one partition"
            )));
        }
        if !health.healthy(s.gpu) {
            return Err(Status::unavailable(format!(
                "{resource}: partition {} is unhealthy (not in the topology, or the agent does not answer)",
                s.gpu.0
            )));
        }
        if let Some(held) = grants.holder(id) {
            return Err(Status::already_exists(format!(
                "{resource}: share {id} is already granted (with {:?}); a share goes to one container until PodResources shows none holds it",
                held.devices
            )));
        }
    }
    gpu.ok_or_else(|| Status::invalid_argument("no share ids"))
}

/// The answer for one container of `class` on partition `gpu` (render minor `minor`).
pub fn response(
    config: &Config,
    class: &str,
    minor: u32,
    token: &Token,
) -> ContainerAllocateResponse {
    let host = |rel: &str| config.root.join(rel).display().to_string();
    let dev = |rel: &str| DeviceSpec {
        container_path: format!("/{rel}"),
        host_path: host(rel),
        permissions: "rw".into(),
    };
    let render = format!("dev/dri/renderD{minor}");
    let dir_of = |p: &Path| p.parent().unwrap_or(Path::new("/")).display().to_string();
    let shim_file = config.shim.file_name().map_or_else(
        || "libkfdq_shim.so".into(),
        |f| f.to_string_lossy().into_owned(),
    );
    let socket_dir = dir_of(&config.agent_socket);
    let envs = HashMap::from([
        ("LD_PRELOAD".to_string(), format!("{SHIM_DIR}/{shim_file}")),
        (
            "KFDQ_SOCKET".to_string(),
            config.agent_socket.display().to_string(),
        ),
        ("KFDQ_CLASS".to_string(), class.to_string()),
        (TOKEN_ENV.to_string(), token.to_string()),
        (VISIBILITY_ENV.to_string(), "0".to_string()),
    ]);
    ContainerAllocateResponse {
        envs,
        mounts: vec![
            Mount {
                container_path: SHIM_DIR.into(),
                host_path: dir_of(&config.shim),
                read_only: true,
            },
            Mount {
                container_path: socket_dir.clone(),
                host_path: socket_dir,
                read_only: true,
            },
        ],
        devices: vec![dev("dev/kfd"), dev(&render)],
        annotations: HashMap::new(),
        cdi_devices: Vec::new(),
    }
}
