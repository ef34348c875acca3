//! A kubelet stand-in: the kubelet's Registration service on `<dir>/kubelet.sock` and its
//! PodResources service on its own socket, real gRPC over Unix sockets from the same .proto
//! files the plugin uses, and the client calls the kubelet makes to a plugin (ListAndWatch,
//! Allocate, GetPreferredAllocation).
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use kfdq_device_plugin::api::deviceplugin::device_plugin_client::DevicePluginClient;
use kfdq_device_plugin::api::deviceplugin::registration_server::{
    Registration, RegistrationServer,
};
use kfdq_device_plugin::api::deviceplugin::{
    AllocateRequest, AllocateResponse, ContainerAllocateRequest,
    ContainerPreferredAllocationRequest, Empty, PreferredAllocationRequest, RegisterRequest,
};
use kfdq_device_plugin::api::podresources::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use kfdq_device_plugin::api::podresources::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, ContainerDevices,
    ContainerResources, ListPodResourcesRequest, ListPodResourcesResponse, PodResources,
};
use kfdq_device_plugin::kubelet::unix_channel;
use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

/// One container holding devices, as PodResources reports it.
#[derive(Debug, Clone)]
pub struct Holder {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub resource: String,
    pub ids: Vec<String>,
}

#[derive(Debug, Default)]
struct Shared {
    registrations: Mutex<Vec<RegisterRequest>>,
    holders: Mutex<Vec<Holder>>,
    /// Per resource, the last list its ListAndWatch stream sent.
    lists: Mutex<HashMap<String, Vec<(String, String)>>>,
}

#[derive(Debug, Clone)]
struct Svc(Arc<Shared>, PathBuf);

impl Svc {
    /// What the kubelet does after a registration: watch the plugin's devices.
    fn watch(&self, r: &RegisterRequest) {
        let shared = self.0.clone();
        let socket = self.1.join(&r.endpoint);
        let resource = r.resource_name.clone();
        tokio::spawn(async move {
            let Ok(ch) = unix_channel(&socket).await else {
                return;
            };
            let Ok(s) = DevicePluginClient::new(ch).list_and_watch(Empty {}).await else {
                return;
            };
            let mut s = s.into_inner();
            while let Ok(Some(l)) = s.message().await {
                let list = l
                    .devices
                    .iter()
                    .map(|d| (d.id.clone(), d.health.clone()))
                    .collect();
                shared.lists.lock().unwrap().insert(resource.clone(), list);
            }
        });
    }
}

#[tonic::async_trait]
impl Registration for Svc {
    async fn register(&self, req: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let r = req.into_inner();
        if r.version != "v1beta1" {
            return Err(Status::invalid_argument(format!(
                "version {} not supported",
                r.version
            )));
        }
        self.watch(&r);
        self.0.registrations.lock().unwrap().push(r);
        Ok(Response::new(Empty {}))
    }
}

#[tonic::async_trait]
impl PodResourcesLister for Svc {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        let pod_resources = self
            .0
            .holders
            .lock()
            .unwrap()
            .iter()
            .map(|h| PodResources {
                name: h.pod.clone(),
                namespace: h.namespace.clone(),
                containers: vec![ContainerResources {
                    name: h.container.clone(),
                    devices: vec![ContainerDevices {
                        resource_name: h.resource.clone(),
                        device_ids: h.ids.clone(),
                        topology: None,
                    }],
                }],
            })
            .collect();
        Ok(Response::new(ListPodResourcesResponse { pod_resources }))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<AllocatableResourcesRequest>,
    ) -> Result<Response<AllocatableResourcesResponse>, Status> {
        Ok(Response::new(AllocatableResourcesResponse {
            devices: vec![],
        }))
    }
}

/// The running stand-in; [`Kubelet::stop`] (or drop) ends it and removes its sockets.
#[derive(Debug)]
pub struct Kubelet {
    pub dir: PathBuf,
    pub pod_resources: PathBuf,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Kubelet {
    /// Serves on `<dir>/kubelet.sock` (created anew: a new inode) and `pod_resources`.
    pub fn start(dir: &Path, pod_resources: &Path) -> Kubelet {
        let shared = Arc::new(Shared::default());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let sock = dir.join("kubelet.sock");
        let _ = std::fs::remove_file(&sock);
        let _ = std::fs::remove_file(pod_resources);
        let std_reg = std::os::unix::net::UnixListener::bind(&sock).expect("bind kubelet.sock");
        let std_pr =
            std::os::unix::net::UnixListener::bind(pod_resources).expect("bind pod-resources");
        std_reg.set_nonblocking(true).unwrap();
        std_pr.set_nonblocking(true).unwrap();
        let svc = Svc(shared.clone(), dir.to_owned());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let reg = UnixListener::from_std(std_reg).unwrap();
                let pr = UnixListener::from_std(std_pr).unwrap();
                let (tx1, rx1) = tokio::sync::oneshot::channel::<()>();
                let (tx2, rx2) = tokio::sync::oneshot::channel::<()>();
                let a = tonic::transport::Server::builder()
                    .add_service(RegistrationServer::new(svc.clone()))
                    .serve_with_incoming_shutdown(UnixListenerStream::new(reg), async {
                        let _ = rx1.await;
                    });
                let b = tonic::transport::Server::builder()
                    .add_service(PodResourcesListerServer::new(svc))
                    .serve_with_incoming_shutdown(UnixListenerStream::new(pr), async {
                        let _ = rx2.await;
                    });
                let stopper = async move {
                    let _ = stopped.await;
                    let _ = tx1.send(());
                    let _ = tx2.send(());
                };
                let _ = tokio::join!(a, b, stopper);
            });
            // Dropping the runtime ends every connection still open (a kubelet that dies).
        });
        Kubelet {
            dir: dir.to_owned(),
            pod_resources: pod_resources.to_owned(),
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Every Register call received.
    pub fn registrations(&self) -> Vec<RegisterRequest> {
        self.shared.registrations.lock().unwrap().clone()
    }

    /// The registration of `resource`, if any.
    pub fn registration(&self, resource: &str) -> Option<RegisterRequest> {
        self.registrations()
            .into_iter()
            .find(|r| r.resource_name == resource)
    }

    /// The last list `resource`'s ListAndWatch stream sent: (id, health).
    pub fn devices(&self, resource: &str) -> Vec<(String, String)> {
        self.shared
            .lists
            .lock()
            .unwrap()
            .get(resource)
            .cloned()
            .unwrap_or_default()
    }

    /// What PodResources `List` answers from now on.
    pub fn set_holders(&self, h: Vec<Holder>) {
        *self.shared.holders.lock().unwrap() = h;
    }

    /// Ends the stand-in at once (open streams are cut) and removes its sockets.
    pub fn stop(&mut self) {
        let Some(s) = self.stop.take() else {
            return;
        };
        let _ = s.send(());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(self.dir.join("kubelet.sock"));
        let _ = std::fs::remove_file(&self.pod_resources);
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The kubelet's client side toward one plugin endpoint, with its own runtime.
#[derive(Debug)]
pub struct PluginClient {
    pub rt: tokio::runtime::Runtime,
    pub socket: PathBuf,
}

impl PluginClient {
    pub fn new(socket: PathBuf) -> PluginClient {
        PluginClient {
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            socket,
        }
    }

    fn client(&self) -> DevicePluginClient<tonic::transport::Channel> {
        let ch = self
            .rt
            .block_on(unix_channel(&self.socket))
            .expect("connect to the plugin");
        DevicePluginClient::new(ch)
    }

    /// One container's Allocate.
    pub fn allocate(&self, ids: &[&str]) -> Result<AllocateResponse, Status> {
        let mut c = self.client();
        let req = AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: ids.iter().map(|s| s.to_string()).collect(),
            }],
        };
        self.rt.block_on(c.allocate(req)).map(Response::into_inner)
    }

    /// One container's GetPreferredAllocation.
    pub fn preferred(&self, available: &[String], size: i32) -> Vec<String> {
        let mut c = self.client();
        let req = PreferredAllocationRequest {
            container_requests: vec![ContainerPreferredAllocationRequest {
                available_device_i_ds: available.to_vec(),
                must_include_device_i_ds: vec![],
                allocation_size: size,
            }],
        };
        let r = self
            .rt
            .block_on(c.get_preferred_allocation(req))
            .expect("GetPreferredAllocation");
        r.into_inner().container_responses.remove(0).device_i_ds
    }
}
