//! Versioned dynamic symbols of a shared object: what a library defines (`name@@node`) and what
//! it needs from others (`name@node` references, `.gnu.version_r`).
//!
//! The dynamic linker binds a versioned reference only to a definition with the same version
//! node (or to an unversioned one), so the shim covers a runtime's entry point exactly when it
//! defines the same name at the same node.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use object::elf::{FileHeader64, SHN_UNDEF, SHT_DYNSYM};
use object::read::elf::{FileHeader, Sym};
use object::{Endianness, SymbolIndex};

/// Why a shared object's symbols could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SymbolsError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not a 64-bit ELF shared object kfdq can parse.
    #[error("{path}: not a readable 64-bit ELF object: {what}")]
    Elf {
        /// The file.
        path: PathBuf,
        /// The parser's complaint.
        what: String,
    },
}

/// The versioned dynamic symbols of one shared object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionedSymbols {
    /// Defined (exported) symbols: name -> version node (`None`: unversioned).
    pub defined: BTreeMap<String, Option<String>>,
    /// Undefined symbols the object references, with the node it asks for.
    pub referenced: BTreeMap<String, Option<String>>,
    /// Version nodes the object defines (`.gnu.version_d`, without the base entry).
    pub nodes: BTreeSet<String>,
}

impl VersionedSymbols {
    /// Reads `path`.
    pub fn read(path: &Path) -> Result<Self, SymbolsError> {
        let data = std::fs::read(path).map_err(|source| SymbolsError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&data).map_err(|e| SymbolsError::Elf {
            path: path.to_path_buf(),
            what: e.to_string(),
        })
    }

    fn parse(data: &[u8]) -> object::read::Result<Self> {
        let header = FileHeader64::<Endianness>::parse(data)?;
        let endian = header.endian()?;
        let sections = header.sections(endian, data)?;
        let dynsym = sections.symbols(endian, data, SHT_DYNSYM)?;
        let versions = sections.versions(endian, data)?;
        let mut out = VersionedSymbols::default();
        if let Some((mut defs, link)) = sections.gnu_verdef(endian, data)? {
            let strings = sections.strings(endian, data, link)?;
            while let Some((def, mut aux)) = defs.next()? {
                if def.vd_flags.get(endian) & object::elf::VER_FLG_BASE != 0 {
                    continue;
                }
                if let Some(first) = aux.next()? {
                    let name = first.name(endian, strings)?;
                    out.nodes.insert(String::from_utf8_lossy(name).into_owned());
                }
            }
        }
        for (index, sym) in dynsym.enumerate() {
            if index == SymbolIndex(0) {
                continue;
            }
            let name = String::from_utf8_lossy(sym.name(endian, dynsym.strings())?).into_owned();
            if name.is_empty() {
                continue;
            }
            let node = match &versions {
                Some(table) => {
                    let vi = table.version_index(endian, index);
                    table
                        .version(vi)?
                        .map(|v| String::from_utf8_lossy(v.name()).into_owned())
                }
                None => None,
            };
            if sym.st_shndx(endian) == SHN_UNDEF {
                out.referenced.insert(name, node);
            } else if sym.st_bind() != object::elf::STB_LOCAL {
                out.defined.insert(name, node);
            }
        }
        Ok(out)
    }
}

/// How well a wrapper library (the shim) covers a runtime's entry points.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Entry points both define at the same node: calls bind to the wrapper.
    pub covered: Vec<String>,
    /// Entry points both define, at different nodes: a versioned reference to the runtime's
    /// node skips the wrapper. `(name, runtime node, wrapper node)`.
    pub mismatched: Vec<(String, String, String)>,
    /// Version nodes the runtime defines and the wrapper does not.
    pub missing_nodes: Vec<String>,
}

/// Compares what `wrapper` defines with what `runtime` defines.
pub fn coverage(runtime: &VersionedSymbols, wrapper: &VersionedSymbols) -> Coverage {
    let mut cov = Coverage::default();
    for (name, wrapper_node) in &wrapper.defined {
        let Some(runtime_node) = runtime.defined.get(name) else {
            continue;
        };
        match (runtime_node, wrapper_node) {
            (Some(r), Some(w)) if r != w => {
                cov.mismatched.push((name.clone(), r.clone(), w.clone()));
            }
            _ => cov.covered.push(name.clone()),
        }
    }
    cov.missing_nodes = runtime
        .nodes
        .iter()
        .filter(|n| !wrapper.nodes.contains(*n))
        .cloned()
        .collect();
    cov
}

#[cfg(test)]
mod tests {
    use super::*;

    fn syms(defined: &[(&str, &str)], nodes: &[&str]) -> VersionedSymbols {
        VersionedSymbols {
            defined: defined
                .iter()
                .map(|(n, v)| (n.to_string(), Some(v.to_string())))
                .collect(),
            referenced: BTreeMap::new(),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
        }
    }

    #[test]
    fn coverage_separates_same_node_from_other_node() {
        let runtime = syms(
            &[
                ("hipLaunchKernel", "hip_4.2"),
                ("hipEventRecordWithFlags", "hip_6.4"),
                ("hipMalloc", "hip_4.2"),
            ],
            &["hip_4.2", "hip_6.4"],
        );
        let shim = syms(
            &[
                ("hipLaunchKernel", "hip_4.2"),
                ("hipEventRecordWithFlags", "hip_6.3"),
                ("ioctl", "hip_4.2"),
            ],
            &["hip_4.2", "hip_6.3"],
        );
        let c = coverage(&runtime, &shim);
        assert_eq!(c.covered, vec!["hipLaunchKernel".to_string()]);
        assert_eq!(
            c.mismatched,
            vec![(
                "hipEventRecordWithFlags".to_string(),
                "hip_6.4".to_string(),
                "hip_6.3".to_string()
            )]
        );
        assert_eq!(c.missing_nodes, vec!["hip_6.4".to_string()]);
    }

    #[test]
    fn reads_the_version_nodes_of_a_real_library() {
        // libc is on every machine that runs these tests and versions every symbol.
        let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.exists())
            .expect("no libc.so.6 at the usual paths");
        let s = VersionedSymbols::read(libc).unwrap();
        assert!(s.nodes.contains("GLIBC_2.2.5"), "nodes: {:?}", s.nodes);
        assert_eq!(
            s.defined.get("ioctl").cloned().flatten().as_deref(),
            Some("GLIBC_2.2.5")
        );
    }

    #[test]
    fn a_non_elf_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("not-elf.so");
        std::fs::write(&p, b"hello").unwrap();
        let e = VersionedSymbols::read(&p).unwrap_err();
        assert!(e.to_string().contains("not a readable 64-bit ELF"), "{e}");
    }
}
