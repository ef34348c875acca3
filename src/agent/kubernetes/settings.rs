//! The `[kubernetes]` section of the agent's configuration: where the device plugin's
//! allocations file is, the class of a pod process whose token names no allocation, and
//! where node-feature-discovery's feature file goes.

use std::path::PathBuf;

use serde::Deserialize;

use crate::allocation;
use crate::policy::ClassRule;

/// node-feature-discovery's default directory of local feature files, and the agent's file in it.
pub const DEFAULT_FEATURES: &str = "/etc/kubernetes/node-feature-discovery/features.d/kfdq";

/// What the agent does for Kubernetes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesConfig {
    /// The configuration has a `[kubernetes]` section.
    pub section: bool,
    /// The device plugin's allocations file (`allocations`).
    pub allocations: PathBuf,
    /// Class of a process whose `KFDQ_ALLOCATION` is malformed or in no allocation
    /// (`pod_fallback_class`; default the lowest-ranked class).
    pub pod_fallback_class: String,
    /// node-feature-discovery's local feature file (`features`; `None`: not written).
    pub features: Option<PathBuf>,
}

impl KubernetesConfig {
    /// Without a `[kubernetes]` section: the default allocations file (read only for a process
    /// that carries a token), the lowest-ranked of `classes` as fallback, no feature file.
    pub fn without_section(classes: &[ClassRule]) -> KubernetesConfig {
        KubernetesConfig {
            section: false,
            allocations: PathBuf::from(allocation::DEFAULT_PATH),
            pod_fallback_class: lowest(classes),
            features: None,
        }
    }
}

fn lowest(classes: &[ClassRule]) -> String {
    classes
        .iter()
        .min_by_key(|c| c.rank)
        .map_or_else(String::new, |c| c.name.clone())
}

/// The section as written.
#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub struct FileKubernetes {
    allocations: Option<PathBuf>,
    pod_fallback_class: Option<String>,
    features: Option<PathBuf>,
}

/// The section checked against the configured classes; `Err` is the rule broken and its fix.
pub fn resolve(
    file: Option<&FileKubernetes>,
    classes: &[ClassRule],
) -> Result<KubernetesConfig, String> {
    let mut k = KubernetesConfig::without_section(classes);
    let Some(f) = file else {
        return Ok(k);
    };
    k.section = true;
    k.features = Some(PathBuf::from(DEFAULT_FEATURES));
    if let Some(p) = &f.allocations {
        if !p.is_absolute() {
            return Err(format!(
                "allocations = {:?} must be an absolute path (the device plugin's file, default {})",
                p.display(),
                allocation::DEFAULT_PATH
            ));
        }
        k.allocations = p.clone();
    }
    if let Some(c) = &f.pod_fallback_class {
        if !classes.iter().any(|r| &r.name == c) {
            return Err(format!(
                "pod_fallback_class {c:?} is not a configured class (classes: {})",
                classes
                    .iter()
                    .map(|r| r.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        k.pod_fallback_class = c.clone();
    }
    if let Some(p) = &f.features {
        if p.as_os_str().is_empty() {
            k.features = None;
        } else if !p.is_absolute() {
            return Err(format!(
                "features = {:?} must be an absolute path (default {DEFAULT_FEATURES}), or \"\" to write no feature file",
                p.display()
            ));
        } else {
            k.features = Some(p.clone());
        }
    }
    Ok(k)
}

#[cfg(test)]
mod tests {
    use crate::agent::AgentConfig;

    const CLASSES: &str = "\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\n\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\n";

    #[test]
    fn the_section_and_its_defaults() {
        let c = AgentConfig::parse(CLASSES, None).unwrap();
        assert!(!c.kubernetes.section);
        assert_eq!(c.kubernetes.features, None, "no labels without the section");
        assert_eq!(c.kubernetes.pod_fallback_class, "batch");
        let c = AgentConfig::parse(&format!("[kubernetes]\n{CLASSES}"), None).unwrap();
        assert_eq!(
            c.kubernetes.features.as_deref(),
            Some(std::path::Path::new(super::DEFAULT_FEATURES))
        );
        assert_eq!(
            c.kubernetes.allocations,
            std::path::Path::new(crate::allocation::DEFAULT_PATH)
        );
        let c = AgentConfig::parse(
            &format!("[kubernetes]\nallocations = \"/x/a.json\"\npod_fallback_class = \"latency\"\nfeatures = \"\"\n{CLASSES}"),
            None,
        )
        .unwrap();
        assert_eq!(c.kubernetes.features, None, "\"\" turns the labels off");
        assert_eq!(c.kubernetes.pod_fallback_class, "latency");
        assert_eq!(c.kubernetes.allocations, std::path::Path::new("/x/a.json"));
    }

    #[test]
    fn bad_values_name_the_line_and_the_rule() {
        for (text, want) in [
            (
                "pod_fallback_class = \"gold\"",
                "not a configured class (classes: latency, batch)",
            ),
            ("allocations = \"a.json\"", "must be an absolute path"),
            ("features = \"kfdq\"", "or \"\" to write no feature file"),
            ("allocation = \"/a\"", "unknown field"),
        ] {
            let e = AgentConfig::parse(&format!("\n[kubernetes]\n{text}\n{CLASSES}"), None)
                .unwrap_err()
                .to_string();
            assert!(e.contains(":2:") || e.contains(":3:"), "{text}: {e}");
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}
