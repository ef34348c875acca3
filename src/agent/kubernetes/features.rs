//! node-feature-discovery's local feature file: what this node's GPUs can do for kfdq, as
//! node labels a scheduler can place pods by (`nodeSelector: kfdq.io/preemption-level: "3"`).
//!
//! NFD's `local` source reads every file in `/etc/kubernetes/node-feature-discovery/features.d/`
//! and makes each `<namespace>/<name>[=<value>]` line a node label; it ignores files whose name
//! starts with a dot, so the file is written as `.kfdq-PID.tmp` beside it and renamed
//! (docs/agent.md cites NFD's customization guide). Labels are in the `kfdq.io/` namespace
//! (NFD refuses `kubernetes.io` namespaces other than its own `feature.node.kubernetes.io`).
//! What each partition can do comes from `kfdq doctor`'s verdicts ([`crate::capability::capabilities`]).

use std::fmt::Write as _;
use std::path::Path;

use crate::capability::{Capabilities, PartitionVerdict};

/// The labels' namespace.
pub const PREFIX: &str = "kfdq.io/";

/// The highest preemption level that works on `p`, all levels below it working too.
fn max_level(p: &PartitionVerdict) -> u32 {
    let mut max = 0;
    for n in 0..=3u32 {
        let works = p.levels.iter().any(|l| l.level == n.to_string() && l.works);
        if !works {
            break;
        }
        max = n;
    }
    max
}

fn tracer(p: &PartitionVerdict) -> bool {
    p.levels.iter().any(|l| l.level == "tracer" && l.works)
}

/// A label value as Kubernetes takes it: at most 63 of `[A-Za-z0-9._-]`, alphanumeric at both
/// ends (anything else becomes `_`, then the ends are trimmed).
fn label_value(v: &str) -> String {
    let v: String = v
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect();
    v.trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

/// The file's text for `caps` and kfdq `version`.
pub fn render(caps: &Capabilities, version: &str) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "# kfdqd's node labels for node-feature-discovery (docs/agent.md, [kubernetes] features).\n# Rewritten at every start and reload, removed when kfdqd stops; do not edit."
    );
    let _ = writeln!(t, "{PREFIX}version={}", label_value(version));
    let _ = writeln!(t, "{PREFIX}priority-mode={}", caps.priority_mode);
    let _ = writeln!(t, "{PREFIX}partitions={}", caps.partitions.len());
    if !caps.partitions.is_empty() {
        let node_level = caps.partitions.iter().map(max_level).min().unwrap_or(0);
        let node_tracer = caps.partitions.iter().all(tracer);
        let _ = writeln!(t, "{PREFIX}preemption-level={node_level}");
        let _ = writeln!(t, "{PREFIX}tracer={node_tracer}");
    }
    for p in &caps.partitions {
        let g = p.gpu_id;
        let _ = writeln!(t, "{PREFIX}gpu-{g}.gfx={}", label_value(&p.gfx));
        let _ = writeln!(t, "{PREFIX}gpu-{g}.preemption-level={}", max_level(p));
        let _ = writeln!(t, "{PREFIX}gpu-{g}.tracer={}", tracer(p));
    }
    t
}

/// Replaces `path` with `text` atomically (a dot file beside it, which NFD ignores, then a
/// rename); creates the directory if needed.
pub fn write(path: &Path, text: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))?;
    crate::replace::replace(path, text.as_bytes(), 0o644)
}

/// Writes the labels of the node under `root` to `path`, logging the outcome (a node that
/// cannot be labelled still runs its agent).
pub fn publish(path: &Path, root: &crate::kfd::Root) {
    let caps = crate::capability::capabilities(root);
    let text = render(&caps, env!("CARGO_PKG_VERSION"));
    match write(path, &text) {
        Ok(()) => {
            tracing::info!(path = %path.display(), "wrote node-feature-discovery's feature file")
        }
        Err(e) => tracing::error!(
            "node labels: writing {}: {e}; node-feature-discovery keeps the labels it had (fix the directory, then reload)",
            path.display()
        ),
    }
}

/// Removes the file (the agent stops): NFD drops the labels at its next discovery.
pub fn withdraw(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {
            tracing::info!(path = %path.display(), "removed node-feature-discovery's feature file")
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!("node labels: removing {}: {e}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capability::LevelVerdict;

    fn part(gpu_id: u32, level3: bool) -> PartitionVerdict {
        let l = |level: &'static str, works: bool| LevelVerdict {
            level,
            name: "",
            works,
            why: String::new(),
        };
        PartitionVerdict {
            gpu_id,
            gfx: "gfx942".into(),
            cus: 38,
            xccs: 1,
            resident_slots: 24,
            levels: vec![
                l("0", true),
                l("1", true),
                l("2", true),
                l("3", level3),
                l("tracer", level3),
            ],
        }
    }

    #[test]
    fn labels_per_partition_and_the_node_minimum() {
        let caps = Capabilities {
            partitions: vec![part(4660, true), part(4661, false)],
            priority_mode: "pipe",
        };
        let t = render(&caps, "0.1.0+dirty");
        let lines: Vec<&str> = t.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines,
            [
                "kfdq.io/version=0.1.0_dirty",
                "kfdq.io/priority-mode=pipe",
                "kfdq.io/partitions=2",
                "kfdq.io/preemption-level=2",
                "kfdq.io/tracer=false",
                "kfdq.io/gpu-4660.gfx=gfx942",
                "kfdq.io/gpu-4660.preemption-level=3",
                "kfdq.io/gpu-4660.tracer=true",
                "kfdq.io/gpu-4661.gfx=gfx942",
                "kfdq.io/gpu-4661.preemption-level=2",
                "kfdq.io/gpu-4661.tracer=false",
            ]
        );
        assert!(t.len() < 64 * 1024, "NFD ignores files over 64 kB");
    }

    #[test]
    fn written_atomically_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("features.d/kfdq");
        write(&path, "kfdq.io/x=1\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "kfdq.io/x=1\n");
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["kfdq"], "no temporary file left");
        withdraw(&path);
        assert!(!path.exists());
    }
}
