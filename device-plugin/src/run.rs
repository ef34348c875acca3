//! The plugin's life: a gRPC server per class on its own socket, registered with the kubelet
//! and registered again whenever the kubelet restarts (its socket is recreated, or our sockets
//! were deleted) or leaves a registration without a ListAndWatch stream; a health loop; a
//! PodResources loop. A kubelet that goes away costs a retry, never an exit.

use std::collections::HashMap;
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kfdq::GpuId;
use tokio::net::UnixListener;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;

use crate::api::deviceplugin::device_plugin_server::DevicePluginServer;
use crate::config::Config;
use crate::grants::Grants;
use crate::health::{Health, agent_answers, check_partitions, partitions_now};
use crate::kubelet::{KUBELET_SOCKET, inode, register};
use crate::service::ClassService;
use crate::state::{Plugin, lock};

/// How often the supervisor looks at the kubelet's socket and its own.
const SUPERVISE_PERIOD: Duration = Duration::from_millis(500);
/// A registration the kubelet has not followed with a ListAndWatch stream within this long is
/// made again (the kubelet opens the stream right after Register; a restarting kubelet may
/// have accepted the call and lost it).
const STREAM_EXPECTED: Duration = Duration::from_secs(5);

/// Why the plugin could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The allocations file is unreadable.
    #[error(transparent)]
    Allocations(#[from] kfdq::allocation::AllocationError),
    /// `gpus = "all"` and no topology to read.
    #[error(
        "gpus = \"all\" but the KFD topology cannot be read ({0}); list the gpu_ids in gpus = [...] or fix the root"
    )]
    Topology(kfdq::kfd::Error),
}

/// Builds the shared state: the partitions (the configured list, or every GPU node now), the
/// grants on file, and a first health check.
pub async fn start(config: Config) -> Result<Arc<Plugin>, RunError> {
    let partitions: Vec<GpuId> = match &config.gpus {
        Some(l) => l.clone(),
        None => partitions_now(&config.root)
            .map_err(RunError::Topology)?
            .into_keys()
            .collect(),
    };
    if partitions.is_empty() {
        tracing::warn!("no GPU partition to share: the resources will advertise no devices");
    }
    let grants = Grants::load(config.allocations.clone())?;
    let health = Health {
        partitions: check_partitions(&config.root, &partitions),
        agent: agent_answers(&config.agent_socket).await,
    };
    tracing::info!(?partitions, agent = health.agent, "sharing");
    let (health, _) = watch::channel(health);
    Ok(Arc::new(Plugin {
        config,
        partitions,
        health,
        grants: Mutex::new(grants),
        look_now: Notify::new(),
        streams: Mutex::new(HashMap::new()),
        stream_ended: Notify::new(),
    }))
}

/// Runs until the task is dropped.
pub async fn run(plugin: Arc<Plugin>) {
    tokio::spawn(health_loop(plugin.clone()));
    tokio::spawn(pod_resources_loop(plugin.clone()));
    supervise(plugin).await;
}

async fn health_loop(p: Arc<Plugin>) {
    loop {
        tokio::time::sleep(p.config.health_period).await;
        let now = Health {
            partitions: check_partitions(&p.config.root, &p.partitions),
            agent: agent_answers(&p.config.agent_socket).await,
        };
        p.health.send_if_modified(|h| {
            if *h == now {
                return false;
            }
            tracing::info!(agent = now.agent, partitions = ?now.partitions, "health changed");
            *h = now;
            true
        });
    }
}

async fn pod_resources_loop(p: Arc<Plugin>) {
    let mut last_error = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(p.config.pod_resources_period) => {}
            () = p.look_now.notified() => {}
        }
        match crate::podresources::holders(&p.config.pod_resources, &p.config.resource_prefix).await
        {
            Ok(holders) => {
                last_error = None;
                let r = lock(&p.grants).reconcile(&holders, p.config.grant_grace);
                if let Err(e) = r {
                    tracing::warn!("updating the allocations file: {e}");
                }
            }
            Err(e) => {
                // Grants are kept while the kubelet cannot be asked.
                let text = e.to_string();
                if last_error.as_ref() != Some(&text) {
                    tracing::warn!("PodResources: {text}; grants kept until it answers");
                }
                last_error = Some(text);
            }
        }
    }
}

/// One class's server and registration.
struct Class {
    name: String,
    shares: u32,
    socket: PathBuf,
    server: Option<(JoinHandle<()>, u64)>,
    registered: Option<(Instant, u64)>,
    last_error: Option<String>,
}

fn serve(p: &Arc<Plugin>, c: &Class) -> std::io::Result<(JoinHandle<()>, u64)> {
    match std::fs::symlink_metadata(&c.socket) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(&c.socket)?,
        Ok(_) => {
            return Err(std::io::Error::other(format!(
                "{} exists and is not a socket; remove it",
                c.socket.display()
            )));
        }
        Err(_) => {}
    }
    let listener = UnixListener::bind(&c.socket)?;
    let ino = inode(&c.socket).unwrap_or(0);
    let svc = ClassService {
        plugin: p.clone(),
        class: c.name.clone(),
        shares: c.shares,
    };
    let name = c.name.clone();
    let task = tokio::spawn(async move {
        let r = Server::builder()
            .add_service(DevicePluginServer::new(svc))
            .serve_with_incoming(UnixListenerStream::new(listener))
            .await;
        if let Err(e) = r {
            tracing::warn!(class = %name, "server stopped: {e}");
        }
    });
    Ok((task, ino))
}

async fn supervise(p: Arc<Plugin>) {
    let dir = p.config.plugin_dir.clone();
    let kubelet = dir.join(KUBELET_SOCKET);
    let mut classes: Vec<Class> = p
        .config
        .classes
        .iter()
        .map(|c| Class {
            name: c.name.clone(),
            shares: c.shares,
            socket: dir.join(Config::endpoint(&c.name)),
            server: None,
            registered: None,
            last_error: None,
        })
        .collect();
    loop {
        let kubelet_ino = inode(&kubelet);
        for c in &mut classes {
            // Our socket deleted (a restarting kubelet clears the directory) or our server
            // gone: serve again, and register again.
            let alive = c
                .server
                .as_ref()
                .is_some_and(|(t, ino)| !t.is_finished() && inode(&c.socket) == Some(*ino));
            if !alive {
                if let Some((t, _)) = c.server.take() {
                    t.abort();
                }
                c.registered = None;
                match serve(&p, c) {
                    Ok(s) => {
                        tracing::info!(class = %c.name, socket = %c.socket.display(), "serving");
                        c.server = Some(s);
                    }
                    Err(e) => {
                        note(c, format!("serving on {}: {e}", c.socket.display()));
                        continue;
                    }
                }
            }
            let Some(kino) = kubelet_ino else {
                c.registered = None;
                // Logged once (until another error), as a registration's failure is.
                note(
                    c,
                    format!(
                        "registering: no kubelet socket at {}: the kubelet is not running, or device_plugins_dir is not its device-plugins directory; registering when it appears",
                        kubelet.display()
                    ),
                );
                continue;
            };
            let due = match c.registered {
                None => true,
                Some((_, ino)) if ino != kino => true,
                Some((at, _)) => at.elapsed() > STREAM_EXPECTED && p.open_streams(&c.name) == 0,
            };
            if !due {
                continue;
            }
            let resource = p.config.resource_name(&c.name);
            match register(&kubelet, &Config::endpoint(&c.name), &resource).await {
                Ok(()) => {
                    tracing::info!(%resource, "registered with the kubelet");
                    c.registered = Some((Instant::now(), kino));
                    c.last_error = None;
                }
                Err(e) => note(c, format!("registering {resource}: {e}")),
            }
        }
        tokio::select! {
            () = tokio::time::sleep(SUPERVISE_PERIOD) => {}
            () = p.stream_ended.notified() => {}
        }
    }
}

/// Logs an error once until it changes.
fn note(c: &mut Class, text: String) {
    if c.last_error.as_ref() != Some(&text) {
        tracing::warn!(class = %c.name, "{text}; retrying");
    }
    c.last_error = Some(text);
}

/// Removes the class sockets (at exit).
pub fn remove_sockets(config: &Config) {
    for c in &config.classes {
        let _ = std::fs::remove_file(config.plugin_dir.join(Config::endpoint(&c.name)));
    }
}
