//! kfdq-device-plugin: the Kubernetes device plugin that lets pods of different kfdq classes
//! share a GPU partition (docs/kubernetes.md). Each class is an extended resource
//! (`kfdq.io/latency`, `kfdq.io/batch`) whose devices are shares of the node's partitions; an
//! `Allocate` gives the container the partition, the shim, the agent's socket and a token the
//! agent uses to hold the container to its class.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod allocate;
pub mod config;
pub mod grants;
pub mod health;
pub mod host;
pub mod kubelet;
pub mod podresources;
pub mod run;
pub mod service;
pub mod shares;
pub mod state;

/// The kubelet's APIs, generated from `proto/` by build.rs.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod api {
    /// Device plugin API v1beta1.
    pub mod deviceplugin {
        tonic::include_proto!("v1beta1");
    }
    /// PodResources API v1.
    pub mod podresources {
        tonic::include_proto!("v1");
    }
}
