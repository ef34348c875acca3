//! What makes a share healthy: its partition is in the node's KFD topology (read like kfdq
//! reads it, so an emulator mount works too) and the agent answers on its socket. A share
//! handed out while either is false would run without kfdq's protection, so the kubelet is
//! told (ListAndWatch) and stops placing pods there.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use kfdq::GpuId;
use kfdq::kfd::paths::Root;
use kfdq::kfd::topology::Topology;
use kfdq::proto::{Reply, Request, encode};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// How long the agent may take to answer a status request before it counts as down. kfdqd
/// answers control requests from its event loop within milliseconds; 2 s leaves room for a
/// loaded node without leaving a dead agent's shares schedulable for long.
pub const AGENT_TIMEOUT: Duration = Duration::from_secs(2);

/// The node's state as the plugin last saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Health {
    /// Per configured partition, its render node's minor while it is in the topology.
    pub partitions: BTreeMap<GpuId, Option<u32>>,
    /// The agent answered its last status request.
    pub agent: bool,
}

impl Health {
    /// Whether shares of `gpu` may be handed out.
    pub fn healthy(&self, gpu: GpuId) -> bool {
        self.agent && self.partitions.get(&gpu).is_some_and(Option::is_some)
    }
}

/// The GPU partitions of the topology under `root`, with their render minors.
pub fn partitions_now(root: &Path) -> Result<BTreeMap<GpuId, Option<u32>>, kfdq::kfd::Error> {
    let topo = Topology::read(&Root::new(root))?;
    Ok(topo
        .gpus()
        .filter_map(|n| n.gpu_id.map(|g| (g, n.render_minor())))
        .collect())
}

/// The configured partitions' state now: a partition missing from the topology (or a
/// topology that cannot be read) has no render node.
pub fn check_partitions(root: &Path, partitions: &[GpuId]) -> BTreeMap<GpuId, Option<u32>> {
    let now = match partitions_now(root) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!("reading the KFD topology: {e}");
            BTreeMap::new()
        }
    };
    partitions
        .iter()
        .map(|g| (*g, now.get(g).copied().flatten()))
        .collect()
}

/// Whether the agent answers a status request on `socket` within [`AGENT_TIMEOUT`].
pub async fn agent_answers(socket: &Path) -> bool {
    let ask = async {
        let mut s = tokio::net::UnixStream::connect(socket).await.ok()?;
        s.write_all(&encode(&Request::Status)).await.ok()?;
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).await.ok()?;
        serde_json::from_str::<Reply>(&line).ok()
    };
    matches!(tokio::time::timeout(AGENT_TIMEOUT, ask).await, Ok(Some(_)))
}
