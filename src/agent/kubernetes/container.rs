//! Which container an allocation belongs to. A grant is bound to the container (its cgroup, as
//! the kubelet makes them: one cgroup per container, under a `kubepods` cgroup) whose first
//! process carried the token; from then on the token is honoured there only, and every
//! process of that container is in that allocation, whatever its own environment says. A
//! process of a pod cgroup without such a grant gets `[kubernetes] pod_fallback_class`.
//!
//! The bindings are kept in a root-only file beside the admin socket (`bindings.json`, one
//! line per container), so an agent restart does not open a window in which a leaked token
//! could be bound to another container first.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::cap::Claim;
use crate::allocation::Token;

/// True when `cgroup` (a cgroup v2 path) is a container's cgroup made by the kubelet: one of
/// its components is the kubelet's pod root, `kubepods` (cgroupfs driver) or a
/// `kubepods.slice`/`kubepods-*.slice` (systemd driver), wherever `--cgroup-root` put it.
pub fn is_pod_cgroup(cgroup: &str) -> bool {
    cgroup.split('/').any(|c| {
        c == "kubepods"
            || c == "kubepods.slice"
            || (c.starts_with("kubepods-") && c.ends_with(".slice"))
    })
}

/// Tokens bound to containers (cgroup paths), both ways.
#[derive(Debug, Default)]
pub struct Bindings {
    by_cgroup: BTreeMap<String, Token>,
    by_token: BTreeMap<Token, String>,
    /// Where they are kept (`None`: in memory only).
    file: Option<PathBuf>,
}

impl Bindings {
    /// The bindings kept in `file` (created when the first is made). A file that cannot be
    /// read or parsed is logged and starts empty: a container rebinds at its next connection.
    pub fn load(file: Option<&Path>) -> Bindings {
        let mut b = Bindings {
            file: file.map(Path::to_owned),
            ..Bindings::default()
        };
        let Some(path) = file else {
            return b;
        };
        let text = match std::fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return b,
            Err(e) => {
                tracing::error!("container bindings {}: {e}; starting empty", path.display());
                return b;
            }
        };
        match serde_json::from_slice::<BTreeMap<String, Token>>(&text) {
            Ok(m) => {
                for (cgroup, token) in m {
                    b.insert(cgroup, token);
                }
            }
            Err(e) => {
                tracing::error!("container bindings {}: {e}; starting empty", path.display())
            }
        }
        b
    }

    fn insert(&mut self, cgroup: String, token: Token) {
        self.by_token.insert(token.clone(), cgroup.clone());
        self.by_cgroup.insert(cgroup, token);
    }

    /// How many containers are bound.
    pub fn len(&self) -> usize {
        self.by_cgroup.len()
    }

    /// True when no container is bound.
    pub fn is_empty(&self) -> bool {
        self.by_cgroup.is_empty()
    }

    /// The claim a process in `cgroup` whose container's first process claims `claim` gets:
    ///
    /// * in a pod cgroup bound to a token: that token, whatever the process carries;
    /// * in an unbound pod cgroup with a token bound to no container: the token, which is
    ///   bound to this container from now on;
    /// * a token bound to another container: [`Claim::Elsewhere`], wherever it is used;
    /// * in a pod cgroup without a token (dropped by `exec env -u`, or never had one):
    ///   [`Claim::Unbound`];
    /// * anything else: unchanged.
    pub fn resolve(&mut self, cgroup: &str, claim: Claim) -> Claim {
        let pod = is_pod_cgroup(cgroup);
        if pod && let Some(t) = self.by_cgroup.get(cgroup) {
            return Claim::Token(t.clone());
        }
        match claim {
            Claim::Token(t) => match self.by_token.get(&t) {
                Some(bound) if bound != cgroup => Claim::Elsewhere,
                Some(_) => Claim::Token(t),
                None if pod => {
                    self.insert(cgroup.to_owned(), t.clone());
                    self.save();
                    Claim::Token(t)
                }
                None => Claim::Token(t),
            },
            Claim::None if pod => Claim::Unbound,
            other => other,
        }
    }

    /// Drops the bindings of containers whose cgroup is gone (`exists` says), so the table
    /// holds the node's live containers only.
    pub fn prune(&mut self, exists: impl Fn(&str) -> bool) {
        let gone: Vec<String> = self
            .by_cgroup
            .keys()
            .filter(|c| !exists(c))
            .cloned()
            .collect();
        if gone.is_empty() {
            return;
        }
        for c in gone {
            if let Some(t) = self.by_cgroup.remove(&c) {
                self.by_token.remove(&t);
            }
        }
        self.save();
    }

    fn save(&self) {
        let Some(path) = &self.file else {
            return;
        };
        let text = match serde_json::to_vec_pretty(&self.by_cgroup) {
            Ok(t) => t,
            Err(e) => {
                tracing::error!("container bindings: {e}");
                return;
            }
        };
        if let Err(e) = crate::replace::replace(path, &text, 0o600) {
            tracing::error!(
                "container bindings {}: {e}; kept in memory only until the next change",
                path.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-a.scope";
    const B: &str = "/kubepods/burstable/pod2/b";

    #[test]
    fn pod_cgroups_are_the_kubelets() {
        assert!(is_pod_cgroup(A));
        assert!(is_pod_cgroup(B));
        assert!(is_pod_cgroup("/test/kubepods/pod3/c"));
        assert!(!is_pod_cgroup("/user.slice/user-1000.slice"));
        assert!(!is_pod_cgroup("/kubepodsx/c"));
        assert!(!is_pod_cgroup(""));
    }

    #[test]
    fn a_token_binds_to_its_first_container_and_only_there() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bindings.json");
        let mut b = Bindings::load(Some(&file));
        let t = Token::from_bytes([1; 16]);
        assert_eq!(
            b.resolve(A, Claim::Token(t.clone())),
            Claim::Token(t.clone())
        );
        assert_eq!(
            b.resolve(A, Claim::None),
            Claim::Token(t.clone()),
            "dropped: still A's"
        );
        assert_eq!(
            b.resolve(B, Claim::Token(t.clone())),
            Claim::Elsewhere,
            "leaked"
        );
        assert_eq!(
            b.resolve("/user.slice", Claim::Token(t.clone())),
            Claim::Elsewhere
        );
        assert_eq!(b.resolve(B, Claim::None), Claim::Unbound);
        assert_eq!(b.resolve(B, Claim::Malformed), Claim::Malformed);
        assert_eq!(b.resolve("/user.slice", Claim::None), Claim::None);
        // Kept across a restart, and pruned with the container.
        let mut again = Bindings::load(Some(&file));
        assert_eq!(again.resolve(B, Claim::Token(t.clone())), Claim::Elsewhere);
        again.prune(|c| c != A);
        assert!(again.is_empty());
        assert_eq!(Bindings::load(Some(&file)).len(), 0);
    }
}
