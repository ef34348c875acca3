//! `kfdq topology`.

use std::collections::BTreeMap;

use serde::Serialize;

use super::table::Table;
use super::{CliError, kfd_error, print_json};
use kfdq::kfd::{CwsrSizes, Kfd, Root, Topology, Version};

#[derive(Serialize)]
struct NodeView<'a> {
    node: u32,
    kind: &'static str,
    gpu_id: Option<u32>,
    name: &'a str,
    gfx_target: Option<String>,
    device_id: Option<u32>,
    compute_units: u32,
    num_xcc: u32,
    cp_queues_per_xcc: u32,
    hw_queue_slots: u32,
    resident_queue_limit: u32,
    render_minor: Option<u32>,
    cwsr: Option<CwsrView>,
    properties: &'a BTreeMap<String, u64>,
}

#[derive(Serialize)]
struct CwsrView {
    #[serde(flatten)]
    sizes: CwsrSizes,
    bytes_per_queue: u64,
}

#[derive(Serialize)]
struct TopologyView<'a> {
    root: String,
    kfd_version: Option<Version>,
    kfd_error: Option<String>,
    generation_id: u64,
    nodes: Vec<NodeView<'a>>,
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / (1024.0 * 1024.0))
}

pub(super) fn run(root: &Root, json: bool) -> Result<(), CliError> {
    let topo = Topology::read(root).map_err(|e| kfd_error("reading the KFD topology", root, e))?;
    let (version, version_err) = match Kfd::open(root) {
        Ok(k) => (Some(k.version()), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let nodes: Vec<NodeView<'_>> = topo
        .nodes
        .iter()
        .map(|n| NodeView {
            node: n.index,
            kind: if n.is_gpu() { "gpu" } else { "cpu" },
            gpu_id: n.gpu_id.map(|g| g.0),
            name: &n.name,
            gfx_target: n.gfx_version().map(|g| g.to_string()),
            device_id: n.device_id().filter(|d| *d != 0),
            compute_units: n.cu_count(),
            num_xcc: n.num_xcc(),
            cp_queues_per_xcc: n.cp_queues_per_xcc(),
            hw_queue_slots: n.hw_queue_slots(),
            resident_queue_limit: n.resident_queue_limit(),
            render_minor: n.render_minor().filter(|_| n.is_gpu()),
            cwsr: n
                .is_gpu()
                .then(|| n.cwsr_sizes().ok())
                .flatten()
                .map(|s| CwsrView {
                    bytes_per_queue: s.total(),
                    sizes: s,
                }),
            properties: &n.properties,
        })
        .collect();
    let view = TopologyView {
        root: root.path().display().to_string(),
        kfd_version: version,
        kfd_error: version_err.clone(),
        generation_id: topo.generation_id,
        nodes,
    };
    if json {
        return print_json(&view);
    }
    match (version, version_err) {
        (Some(v), _) => println!(
            "amdkfd {}.{} at {}",
            v.major,
            v.minor,
            root.kfd_device().display()
        ),
        (None, Some(e)) => println!("amdkfd: not usable ({e})"),
        _ => {}
    }
    let mut t = Table::new(&[
        "NODE",
        "GPU_ID",
        "GFX",
        "DEVICE",
        ">CUS",
        ">XCCS",
        ">HQDS",
        ">RESIDENT",
        ">CWSR_MIB/QUEUE",
        "SIZES",
        "RENDER",
    ]);
    for n in view.nodes.iter().filter(|n| n.kind == "gpu") {
        t.row(vec![
            n.node.to_string(),
            n.gpu_id.map(|g| g.to_string()).unwrap_or_default(),
            n.gfx_target.clone().unwrap_or_else(|| "?".into()),
            n.device_id
                .map(|d| format!("{d:#06x}"))
                .unwrap_or_else(|| "?".into()),
            n.compute_units.to_string(),
            n.num_xcc.to_string(),
            n.hw_queue_slots.to_string(),
            n.resident_queue_limit.to_string(),
            n.cwsr
                .as_ref()
                .map(|c| mib(c.bytes_per_queue))
                .unwrap_or_else(|| "?".into()),
            n.cwsr
                .as_ref()
                .map(|c| format!("{:?}", c.sizes.source).to_lowercase())
                .unwrap_or_default(),
            n.render_minor
                .map(|m| format!("renderD{m}"))
                .unwrap_or_default(),
        ]);
    }
    print!("{}", t.render());
    let cpus = view.nodes.iter().filter(|n| n.kind == "cpu").count();
    let gpus = view.nodes.len() - cpus;
    println!(
        "{gpus} GPU partition(s), {cpus} CPU node(s). HQDS = num_cp_queues x XCCs; RESIDENT = active queues before the runlist is time-sliced."
    );
    Ok(())
}
