//! Share ids, the kubelet device ids the plugin advertises: `<gpu_id decimal>-<class>-<n>`,
//! n = 0..shares-1 (the contract with the agent, docs/kubernetes.md "Shares"), and the choice
//! of shares the plugin prefers for a container.

use std::collections::BTreeMap;

use kfdq::GpuId;

/// One share of one partition for one class.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShareId {
    /// The partition.
    pub gpu: GpuId,
    /// The class.
    pub class: String,
    /// 0..shares.
    pub n: u32,
}

impl std::fmt::Display for ShareId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}-{}", self.gpu.0, self.class, self.n)
    }
}

/// A device id that is not of the share-id form.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0:?} is not a kfdq share id (<gpu_id>-<class>-<n>)")]
pub struct NotAShare(pub String);

impl std::str::FromStr for ShareId {
    type Err = NotAShare;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || NotAShare(s.to_owned());
        let (gpu, rest) = s.split_once('-').ok_or_else(bad)?;
        let (class, n) = rest.rsplit_once('-').ok_or_else(bad)?;
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        if !digits(gpu) || !digits(n) || class.is_empty() {
            return Err(bad());
        }
        Ok(ShareId {
            gpu: GpuId(gpu.parse().map_err(|_| bad())?),
            class: class.to_owned(),
            n: n.parse().map_err(|_| bad())?,
        })
    }
}

/// The shares to prefer for one container: `must` first, then shares of one partition —
/// the one that holds `must`, else the fullest partition (fewest free shares) that still
/// fits the whole request, so that partitions fill one after another and a container's shares
/// sit on one partition; if none fits, the partitions with the most free shares.
pub fn preferred(available: &[String], must: &[String], size: usize) -> Vec<String> {
    let mut out: Vec<String> = must.iter().take(size).cloned().collect();
    let mut by_gpu: BTreeMap<GpuId, Vec<&String>> = BTreeMap::new();
    for id in available.iter().filter(|id| !out.contains(id)) {
        if let Ok(s) = id.parse::<ShareId>() {
            by_gpu.entry(s.gpu).or_default().push(id);
        }
    }
    let need = size.saturating_sub(out.len());
    let anchor = must
        .iter()
        .find_map(|m| m.parse::<ShareId>().ok())
        .map(|s| s.gpu);
    let mut order: Vec<(GpuId, usize)> = by_gpu.iter().map(|(g, v)| (*g, v.len())).collect();
    order.sort_by_key(|(g, free)| {
        let fits = *free >= need;
        (
            Some(*g) != anchor,
            !fits,
            if fits { *free } else { usize::MAX - free },
            *g,
        )
    });
    for (g, _) in order {
        for id in &by_gpu[&g] {
            if out.len() >= size {
                return out;
            }
            out.push((*id).clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_ids_round_trip() {
        let s: ShareId = "45704-batch-3".parse().unwrap();
        assert_eq!(s.gpu, GpuId(45704));
        assert_eq!(s.class, "batch");
        assert_eq!(s.to_string(), "45704-batch-3");
        let s: ShareId = "7-best-effort-0".parse().unwrap();
        assert_eq!(s.class, "best-effort");
        for bad in ["", "x-batch-1", "1-batch-", "1--2", "batch", "1-batch-x"] {
            assert!(bad.parse::<ShareId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn prefers_one_partition_and_packs() {
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // Partition 1 has 3 free, partition 2 has 1 free: one share goes to the fuller one.
        let avail = ids(&["1-batch-0", "1-batch-1", "1-batch-2", "2-batch-3"]);
        assert_eq!(preferred(&avail, &[], 1), ids(&["2-batch-3"]));
        // Two shares fit only on partition 1.
        assert_eq!(preferred(&avail, &[], 2), ids(&["1-batch-0", "1-batch-1"]));
        // A share that must be included draws the rest to its partition.
        assert_eq!(
            preferred(&avail, &ids(&["2-batch-3"]), 2),
            ids(&["2-batch-3", "1-batch-0"])
        );
    }
}
