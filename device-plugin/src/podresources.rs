//! The kubelet's PodResources API (v1 `List`): which container holds which share ids, so that
//! each grant in the allocations file names its pod, and grants whose shares nobody holds any
//! more are dropped.

use std::collections::BTreeMap;
use std::path::Path;

use kfdq::allocation::PodRef;

use crate::api::podresources::ListPodResourcesRequest;
use crate::api::podresources::pod_resources_lister_client::PodResourcesListerClient;
use crate::kubelet::{KubeletError, unix_channel, within};

/// Every device id of a resource under `prefix/` that a container holds, with the container.
pub async fn holders(
    socket: &Path,
    prefix: &str,
) -> Result<BTreeMap<String, PodRef>, KubeletError> {
    within(socket, holders_now(socket, prefix)).await
}

async fn holders_now(
    socket: &Path,
    prefix: &str,
) -> Result<BTreeMap<String, PodRef>, KubeletError> {
    let channel = unix_channel(socket).await?;
    let list = PodResourcesListerClient::new(channel)
        .list(ListPodResourcesRequest {})
        .await
        .map_err(|status| KubeletError::Call {
            path: socket.to_owned(),
            status: Box::new(status),
        })?
        .into_inner();
    let ours = format!("{prefix}/");
    let mut out = BTreeMap::new();
    for pod in list.pod_resources {
        for c in pod.containers {
            for d in c
                .devices
                .iter()
                .filter(|d| d.resource_name.starts_with(&ours))
            {
                for id in &d.device_ids {
                    out.insert(
                        id.clone(),
                        PodRef {
                            namespace: pod.namespace.clone(),
                            name: pod.name.clone(),
                            container: c.name.clone(),
                        },
                    );
                }
            }
        }
    }
    Ok(out)
}
