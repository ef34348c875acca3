//! The plugin's side of the kubelet: gRPC over a Unix socket, `Register`, and the kubelet's
//! socket's identity (a restarted kubelet recreates `kubelet.sock`, a new inode).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

use crate::api::deviceplugin::registration_client::RegistrationClient;
use crate::api::deviceplugin::{DevicePluginOptions, RegisterRequest};

/// The device plugin API version the plugin speaks.
pub const API_VERSION: &str = "v1beta1";
/// The kubelet's registration socket in the device-plugins directory.
pub const KUBELET_SOCKET: &str = "kubelet.sock";

/// Why a gRPC call to the kubelet failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KubeletError {
    /// No connection (with the transport error's causes: "transport error" alone names none).
    #[error("connecting to {path}: {}", causes(source))]
    Connect {
        /// The socket.
        path: PathBuf,
        /// The transport's error.
        source: tonic::transport::Error,
    },
    /// No answer in time.
    #[error("{path}: no answer within {CALL_TIMEOUT:?}")]
    Timeout {
        /// The socket.
        path: PathBuf,
    },
    /// The kubelet answered with an error.
    #[error("{path}: {status}")]
    Call {
        /// The socket.
        path: PathBuf,
        /// The kubelet's answer.
        status: Box<tonic::Status>,
    },
}

/// `e` and each of its sources, joined with ": " (tonic's transport error says only
/// "transport error"; the cause, e.g. "No such file or directory", is in its sources).
fn causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let t = s.to_string();
        if !text.ends_with(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        next = s.source();
    }
    text
}

/// How long a call to the kubelet may take: it answers Register and List from memory; a
/// kubelet that accepted the connection and hangs must not stop the plugin's other work.
pub const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `f`, or [`KubeletError::Timeout`] after [`CALL_TIMEOUT`].
pub async fn within<T>(
    path: &Path,
    f: impl std::future::Future<Output = Result<T, KubeletError>>,
) -> Result<T, KubeletError> {
    tokio::time::timeout(CALL_TIMEOUT, f)
        .await
        .unwrap_or_else(|_| {
            Err(KubeletError::Timeout {
                path: path.to_owned(),
            })
        })
}

/// A gRPC channel to the server on the Unix socket `path` (the URI is a placeholder that
/// gRPC needs; every connection goes to the socket).
pub async fn unix_channel(path: &Path) -> Result<Channel, KubeletError> {
    let p = path.to_owned();
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let p = p.clone();
            async move {
                let s = tokio::net::UnixStream::connect(p).await?;
                Ok::<_, std::io::Error>(TokioIo::new(s))
            }
        }))
        .await
        .map_err(|source| KubeletError::Connect {
            path: path.to_owned(),
            source,
        })
}

/// The inode of `path`, `None` while it does not exist.
pub fn inode(path: &Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.ino())
}

/// Registers `resource_name`, served on `endpoint` (a file name in the kubelet's directory),
/// with the kubelet at `kubelet_sock`.
pub async fn register(
    kubelet_sock: &Path,
    endpoint: &str,
    resource_name: &str,
) -> Result<(), KubeletError> {
    within(
        kubelet_sock,
        register_now(kubelet_sock, endpoint, resource_name),
    )
    .await
}

async fn register_now(
    kubelet_sock: &Path,
    endpoint: &str,
    resource_name: &str,
) -> Result<(), KubeletError> {
    let channel = unix_channel(kubelet_sock).await?;
    let mut client = RegistrationClient::new(channel);
    client
        .register(RegisterRequest {
            version: API_VERSION.into(),
            endpoint: endpoint.into(),
            resource_name: resource_name.into(),
            options: Some(options()),
        })
        .await
        .map(|_| ())
        .map_err(|status| KubeletError::Call {
            path: kubelet_sock.to_owned(),
            status: Box::new(status),
        })
}

/// The options every class server announces: PreStartContainer is not needed, and
/// GetPreferredAllocation is offered.
pub fn options() -> DevicePluginOptions {
    DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: true,
    }
}
