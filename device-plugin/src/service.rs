//! One class's DevicePlugin gRPC service (`kfdq-<class>.sock`).

use std::sync::Arc;

use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::allocate;
use crate::api::deviceplugin::device_plugin_server::DevicePlugin;
use crate::api::deviceplugin::{
    AllocateRequest, AllocateResponse, ContainerPreferredAllocationResponse, Device,
    DevicePluginOptions, Empty, ListAndWatchResponse, PreStartContainerRequest,
    PreStartContainerResponse, PreferredAllocationRequest, PreferredAllocationResponse,
};
use crate::grants::new_token;
use crate::shares::preferred;
use crate::state::{Plugin, lock};

/// The kubelet's health words.
const HEALTHY: &str = "Healthy";
const UNHEALTHY: &str = "Unhealthy";

/// The service of one class.
#[derive(Debug, Clone)]
pub struct ClassService {
    /// Shared state.
    pub plugin: Arc<Plugin>,
    /// The class.
    pub class: String,
    /// Shares per partition.
    pub shares: u32,
}

impl ClassService {
    fn list(&self) -> ListAndWatchResponse {
        ListAndWatchResponse {
            devices: self
                .plugin
                .devices(&self.class, self.shares)
                .into_iter()
                .map(|(id, ok)| Device {
                    id,
                    health: if ok { HEALTHY } else { UNHEALTHY }.into(),
                    topology: None,
                })
                .collect(),
        }
    }
}

/// Counts a class's open stream while it lives.
struct StreamGuard(Arc<Plugin>, String);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if let Some(n) = lock(&self.0.streams).get_mut(&self.1) {
            *n = n.saturating_sub(1);
        }
        self.0.stream_ended.notify_one();
    }
}

#[tonic::async_trait]
impl DevicePlugin for ClassService {
    async fn get_device_plugin_options(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(crate::kubelet::options()))
    }

    type ListAndWatchStream = ReceiverStream<Result<ListAndWatchResponse, Status>>;

    async fn list_and_watch(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let me = self.clone();
        *lock(&me.plugin.streams)
            .entry(me.class.clone())
            .or_default() += 1;
        let guard = StreamGuard(me.plugin.clone(), me.class.clone());
        tracing::info!(class = %me.class, "ListAndWatch stream opened");
        tokio::spawn(async move {
            let _guard = guard;
            let mut health = me.plugin.health.subscribe();
            loop {
                let list = me.list();
                tracing::debug!(class = %me.class, devices = ?list.devices.iter().map(|d| (&d.id, &d.health)).collect::<Vec<_>>(), "ListAndWatch sends");
                if tx.send(Ok(list)).await.is_err() {
                    break;
                }
                tokio::select! {
                    changed = health.changed() => if changed.is_err() { break },
                    () = tx.closed() => break,
                }
            }
            tracing::info!(class = %me.class, "ListAndWatch stream closed");
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn get_preferred_allocation(
        &self,
        req: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let container_responses = req
            .into_inner()
            .container_requests
            .into_iter()
            .map(|c| ContainerPreferredAllocationResponse {
                device_i_ds: preferred(
                    &c.available_device_i_ds,
                    &c.must_include_device_i_ds,
                    usize::try_from(c.allocation_size).unwrap_or(0),
                ),
            })
            .collect();
        Ok(Response::new(PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        req: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        let p = &self.plugin;
        let mut out = Vec::new();
        {
            let health = p.health.borrow().clone();
            let mut grants = lock(&p.grants);
            for c in req.into_inner().container_requests {
                let ids = c.devices_ids;
                let gpu = allocate::check(&p.config, &p.partitions, &self.class, self.shares, &ids, &health, &grants)
                    .inspect_err(|s| tracing::warn!(class = %self.class, ?ids, "Allocate refused: {}", s.message()))?;
                let minor = health
                    .partitions
                    .get(&gpu)
                    .copied()
                    .flatten()
                    .ok_or_else(|| {
                        Status::unavailable(format!("partition {} has no render node", gpu.0))
                    })?;
                let token = new_token().map_err(|e| {
                    Status::internal(format!("reading /dev/urandom for a token: {e}"))
                })?;
                grants
                    .add(token.clone(), &self.class, gpu, ids.clone())
                    .map_err(|e| Status::internal(format!("recording the grant: {e}")))?;
                tracing::info!(class = %self.class, gpu = gpu.0, ?ids, "allocated");
                out.push(allocate::response(&p.config, &self.class, minor, &token));
            }
        }
        p.look_now.notify_one();
        Ok(Response::new(AllocateResponse {
            container_responses: out,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        Ok(Response::new(PreStartContainerResponse {}))
    }
}
