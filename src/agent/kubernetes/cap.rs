//! A process's claim of a Kubernetes allocation and the class cap it gets: the allocation's
//! class when its token is in the allocations file, the fallback class for pods when it is
//! not (forged, malformed, or already dropped by the plugin).

use super::super::config::AgentConfig;
use crate::allocation::{Allocation, AllocationFile, PodRef, Token, token_of_environ};

/// What a process's initial environment claims of a Kubernetes allocation
/// ([`crate::allocation::TOKEN_ENV`], read from `/proc/<pid>/environ`: what the
/// process was started with, not what it set since).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Claim {
    /// No `KFDQ_ALLOCATION`: not a process of a pod the device plugin served.
    #[default]
    None,
    /// A value that is not a token (32 lowercase hex digits).
    Malformed,
    /// A well-formed token (held or forged: the allocations file says), honoured where it is
    /// (its container's, or not yet bound to one: [`super::container::Bindings`]).
    Token(Token),
    /// A process of a kubelet pod cgroup whose container holds no grant (its first process
    /// carried no token, or dropped it before the agent saw it).
    Unbound,
    /// A token bound to another container (leaked).
    Elsewhere,
}

impl Claim {
    /// The claim in a process's initial environment (`/proc/<pid>/environ`, NUL-separated).
    pub fn of_environ(environ: &[u8]) -> Claim {
        match token_of_environ(environ) {
            None => Claim::None,
            Some(Ok(t)) => Claim::Token(t),
            Some(Err(_)) => Claim::Malformed,
        }
    }
}

/// The highest class a process of a pod may be in, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cap {
    /// The class.
    pub class: String,
    /// Where it comes from, in words (`kubernetes allocation default/llm/server`). Never the
    /// token: `kfdq status` is open to every process that reaches the socket, pods included.
    pub source: String,
    /// The container that holds the allocation, once the plugin knows it.
    pub pod: Option<PodRef>,
}

impl Cap {
    /// How a pod's process gets `class` instead.
    pub fn fix(&self, class: &str) -> String {
        format!(
            "a pod's class is the resource it requests (kfdq.io/{class} under the device plugin's default prefix); KFDQ_CLASS and `kfdq class` may only lower it"
        )
    }
}

/// The allocation in words: its container once known, else its shares.
fn describe(a: &Allocation) -> String {
    match &a.pod {
        Some(p) => format!(
            "kubernetes allocation {}/{}/{}",
            p.namespace, p.name, p.container
        ),
        None => format!(
            "kubernetes allocation {} (pod not yet known)",
            a.devices.join(",")
        ),
    }
}

/// The cap `claim` gets under `cfg` with the allocations in `file` (`None`: no claim).
pub fn cap_of(cfg: &AgentConfig, file: &AllocationFile, claim: &Claim) -> Option<Cap> {
    let fallback = &cfg.kubernetes.pod_fallback_class;
    let token = match claim {
        Claim::None => return None,
        Claim::Malformed => {
            return Some(Cap {
                class: fallback.clone(),
                source: "a malformed KFDQ_ALLOCATION ([kubernetes] pod_fallback_class)".into(),
                pod: None,
            });
        }
        // Without a [kubernetes] section no device plugin grants anything here: pods are
        // classified by the rules (their QoS cgroups, say), as any process.
        Claim::Unbound if !cfg.kubernetes.section => return None,
        Claim::Unbound => {
            return Some(Cap {
                class: fallback.clone(),
                source: "a pod's container without a grant of the device plugin ([kubernetes] pod_fallback_class)".into(),
                pod: None,
            });
        }
        Claim::Elsewhere => {
            return Some(Cap {
                class: fallback.clone(),
                source: "a KFDQ_ALLOCATION of another container ([kubernetes] pod_fallback_class)"
                    .into(),
                pod: None,
            });
        }
        Claim::Token(t) => t,
    };
    let Some(a) = file.find(token) else {
        return Some(Cap {
            class: fallback.clone(),
            source: "a KFDQ_ALLOCATION in no allocation of the device plugin ([kubernetes] pod_fallback_class)".into(),
            pod: None,
        });
    };
    if cfg.class(&a.class).is_none() {
        return Some(Cap {
            class: fallback.clone(),
            source: format!(
                "{} of class {}, which the agent does not configure ([kubernetes] pod_fallback_class)",
                describe(a),
                a.class
            ),
            pod: a.pod.clone(),
        });
    }
    Some(Cap {
        class: a.class.clone(),
        source: describe(a),
        pod: a.pod.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocation::{FILE_VERSION, TOKEN_ENV};
    use crate::ids::GpuId;

    fn cfg() -> AgentConfig {
        AgentConfig::parse(
            "[kubernetes]\nallocations = \"/nonexistent/a.json\"\n\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\nmatch = { env = true }\n\n[[class]]\nname = \"normal\"\nrank = 1\npriority = 8\n\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\n",
            None,
        )
        .unwrap()
    }

    fn file(token: &Token, class: &str, pod: bool) -> AllocationFile {
        AllocationFile {
            version: FILE_VERSION,
            allocations: vec![Allocation {
                token: token.clone(),
                class: class.into(),
                gpu: GpuId(1),
                devices: vec![format!("1-{class}-0")],
                pod: pod.then(|| PodRef {
                    namespace: "ns".into(),
                    name: "p".into(),
                    container: "c".into(),
                }),
            }],
        }
    }

    #[test]
    fn claims_read_from_the_environment() {
        let t = Token::from_bytes([7; 16]);
        assert_eq!(Claim::of_environ(b"A=1\0"), Claim::None);
        assert_eq!(
            Claim::of_environ(format!("{TOKEN_ENV}=latency\0").as_bytes()),
            Claim::Malformed
        );
        assert_eq!(
            Claim::of_environ(format!("{TOKEN_ENV}={t}\0").as_bytes()),
            Claim::Token(t)
        );
    }

    #[test]
    fn the_allocation_caps_and_anything_else_falls_back() {
        let c = cfg();
        let t = Token::from_bytes([1; 16]);
        assert_eq!(
            c.kubernetes.pod_fallback_class, "batch",
            "lowest by default"
        );
        assert_eq!(cap_of(&c, &file(&t, "latency", true), &Claim::None), None);
        let cap = cap_of(&c, &file(&t, "latency", true), &Claim::Token(t.clone())).unwrap();
        assert_eq!(cap.class, "latency");
        assert_eq!(cap.source, "kubernetes allocation ns/p/c");
        let cap = cap_of(&c, &file(&t, "normal", false), &Claim::Token(t.clone())).unwrap();
        assert_eq!(cap.class, "normal");
        assert!(cap.source.contains("1-normal-0"), "{}", cap.source);
        assert!(!cap.source.contains(t.as_str()), "never the token");
        let forged = Token::from_bytes([2; 16]);
        let cap = cap_of(&c, &file(&t, "latency", true), &Claim::Token(forged)).unwrap();
        assert_eq!(cap.class, "batch");
        let cap = cap_of(&c, &file(&t, "latency", true), &Claim::Malformed).unwrap();
        assert_eq!(cap.class, "batch");
        let cap = cap_of(&c, &file(&t, "latency", true), &Claim::Unbound).unwrap();
        assert_eq!(cap.class, "batch", "a pod without a grant");
        let cap = cap_of(&c, &file(&t, "latency", true), &Claim::Elsewhere).unwrap();
        assert_eq!(cap.class, "batch", "another container's token");
        let mut bare = c.clone();
        bare.kubernetes.section = false;
        assert_eq!(
            cap_of(&bare, &AllocationFile::default(), &Claim::Unbound),
            None
        );
        let cap = cap_of(&c, &file(&t, "gold", true), &Claim::Token(t)).unwrap();
        assert_eq!(cap.class, "batch", "a class the agent lacks");
        assert!(cap.source.contains("gold"), "{}", cap.source);
    }
}
