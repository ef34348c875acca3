//! The grants the plugin holds, kept in the allocations file (`kfdq::allocation`,
//! the contract with the agent): recorded at `Allocate`, named with their container once the
//! kubelet's PodResources API shows it, dropped when no container holds their shares any more
//! (after a grace period: the kubelet calls `Allocate` before it creates the container).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kfdq::GpuId;
use kfdq::allocation::{Allocation, AllocationError, AllocationFile, PodRef, Token};

/// The grants and when each was made (in this process).
#[derive(Debug)]
pub struct Grants {
    path: PathBuf,
    file: AllocationFile,
    since: HashMap<Token, Instant>,
}

/// What a PodResources answer changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reconciled {
    /// Grants that got (or changed) their container.
    pub named: usize,
    /// Grants dropped.
    pub dropped: usize,
}

impl Grants {
    /// The grants in `path` (kept across plugin restarts: their containers still run); each
    /// gets a fresh grace period.
    pub fn load(path: PathBuf) -> Result<Grants, AllocationError> {
        let file = AllocationFile::read(&path)?;
        let now = Instant::now();
        let since = file
            .allocations
            .iter()
            .map(|a| (a.token.clone(), now))
            .collect();
        Ok(Grants { path, file, since })
    }

    /// The file's content.
    pub fn file(&self) -> &AllocationFile {
        &self.file
    }

    /// The grant that holds share `id`, if any.
    pub fn holder(&self, id: &str) -> Option<&Allocation> {
        self.file
            .allocations
            .iter()
            .find(|a| a.devices.iter().any(|d| d == id))
    }

    /// Records a grant and writes the file; on a write error nothing changes.
    pub fn add(
        &mut self,
        token: Token,
        class: &str,
        gpu: GpuId,
        devices: Vec<String>,
    ) -> Result<(), AllocationError> {
        let mut next = self.file.clone();
        next.allocations.push(Allocation {
            token: token.clone(),
            class: class.to_owned(),
            gpu,
            devices,
            pod: None,
        });
        next.write(&self.path)?;
        self.file = next;
        self.since.insert(token, Instant::now());
        Ok(())
    }

    /// Applies a PodResources answer: `holders` maps each share id a container holds to that
    /// container. Grants older than `grace` whose shares no container holds are dropped.
    /// Writes the file when something changed.
    pub fn reconcile(
        &mut self,
        holders: &BTreeMap<String, PodRef>,
        grace: Duration,
    ) -> Result<Reconciled, AllocationError> {
        let mut next = self.file.clone();
        let mut r = Reconciled::default();
        let now = Instant::now();
        next.allocations.retain_mut(|a| {
            match a.devices.iter().find_map(|d| holders.get(d)) {
                Some(pod) => {
                    if a.pod.as_ref() != Some(pod) {
                        a.pod = Some(pod.clone());
                        r.named += 1;
                    }
                    true
                }
                None => {
                    let young = self
                        .since
                        .get(&a.token)
                        .is_some_and(|t| now.duration_since(*t) < grace);
                    if !young {
                        r.dropped += 1;
                        tracing::info!(token = %a.token, devices = ?a.devices, "grant dropped: no container holds its shares");
                    }
                    young
                }
            }
        });
        if r != Reconciled::default() {
            next.write(&self.path)?;
            self.since.retain(|t, _| next.find(t).is_some());
            self.file = next;
        }
        Ok(r)
    }
}

/// A fresh token: 16 bytes from the kernel's random source.
pub fn new_token() -> std::io::Result<Token> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(Token::from_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_are_named_then_dropped_after_grace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("allocations.json");
        let mut g = Grants::load(path.clone()).unwrap();
        let t1 = new_token().unwrap();
        let t2 = new_token().unwrap();
        assert_ne!(t1, t2);
        g.add(t1.clone(), "latency", GpuId(7), vec!["7-latency-0".into()])
            .unwrap();
        g.add(t2.clone(), "batch", GpuId(7), vec!["7-batch-0".into()])
            .unwrap();
        assert_eq!(AllocationFile::read(&path).unwrap().allocations.len(), 2);
        let pod = PodRef {
            namespace: "ns".into(),
            name: "p".into(),
            container: "c".into(),
        };
        let holders = BTreeMap::from([("7-latency-0".to_string(), pod.clone())]);
        // Within the grace period nothing is dropped.
        let r = g.reconcile(&holders, Duration::from_secs(3600)).unwrap();
        assert_eq!(
            r,
            Reconciled {
                named: 1,
                dropped: 0
            }
        );
        // Past it, the unheld grant goes.
        let r = g.reconcile(&holders, Duration::ZERO).unwrap();
        assert_eq!(
            r,
            Reconciled {
                named: 0,
                dropped: 1
            }
        );
        let back = AllocationFile::read(&path).unwrap();
        assert_eq!(back.allocations.len(), 1);
        assert_eq!(back.find(&t1).unwrap().pod.as_ref(), Some(&pod));
        assert_eq!(g.holder("7-latency-0").unwrap().token, t1);
        assert!(g.holder("7-batch-0").is_none());
    }
}
