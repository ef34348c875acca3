//! The Kubernetes allocations file: what `kfdq-device-plugin` granted, read by `kfdqd`.
//!
//! The device plugin answers the kubelet's `Allocate` with a random token in the container's
//! environment ([`TOKEN_ENV`]) and records the grant here: the token, the class of the shares
//! it gave, the GPU partition and, once the kubelet's PodResources API names the container
//! that holds those shares, the pod. The agent reads the token from a process's initial
//! environment (`/proc/PID/environ`), looks it up here and caps the process's class at the
//! allocation's, whatever `KFDQ_CLASS` says; it labels the process's metrics with the pod.
//!
//! Trust: the file lives in a root-only directory that no container mounts, so a container
//! knows only the tokens it was given; a token is 128 random bits. A process that edits
//! `KFDQ_CLASS` gains nothing, and one that forges a token names no allocation.
//!
//! The file is replaced atomically (written beside, then renamed), so a reader sees a whole
//! old or a whole new file.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ids::GpuId;

/// The environment variable that carries a container's allocation token.
pub const TOKEN_ENV: &str = "KFDQ_ALLOCATION";

/// Where the plugin writes the file and the agent reads it, unless configured otherwise.
pub const DEFAULT_PATH: &str = "/var/lib/kfdq/allocations.json";

/// The file format's version; a reader refuses another.
pub const FILE_VERSION: u32 = 1;

/// A token: 32 lowercase hex digits (128 bits).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Token(String);

impl Token {
    /// Length in hex digits.
    pub const LEN: usize = 32;

    /// The token as written in the environment and the file.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A token from 16 random bytes.
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Token(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }
}

impl TryFrom<String> for Token {
    type Error = AllocationError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        if s.len() == Self::LEN && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            Ok(Token(s))
        } else {
            Err(AllocationError::BadToken)
        }
    }
}

impl std::str::FromStr for Token {
    type Err = AllocationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Token::try_from(s.to_owned())
    }
}

impl From<Token> for String {
    fn from(t: Token) -> String {
        t.0
    }
}

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The container that holds an allocation, as the kubelet's PodResources API names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRef {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The container's name in the pod.
    pub container: String,
}

/// One `Allocate` answer the plugin gave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// The token given to the container in [`TOKEN_ENV`].
    pub token: Token,
    /// The class of the shares (an agent class name, e.g. `latency`).
    pub class: String,
    /// The GPU partition the shares belong to.
    pub gpu: GpuId,
    /// The kubelet device ids granted (the plugin's share ids).
    pub devices: Vec<String>,
    /// The container, once PodResources names it; `None` until then.
    #[serde(default)]
    pub pod: Option<PodRef>,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationFile {
    /// [`FILE_VERSION`].
    pub version: u32,
    /// Every grant the plugin holds.
    pub allocations: Vec<Allocation>,
}

impl Default for AllocationFile {
    fn default() -> Self {
        AllocationFile {
            version: FILE_VERSION,
            allocations: Vec::new(),
        }
    }
}

/// Why the file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AllocationError {
    /// Reading or writing the file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// The file is not JSON of this format.
    #[error("{path}: not an allocations file: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Where and why.
        source: serde_json::Error,
    },
    #[error(
        "{path}: allocations file version {found}, this kfdq reads version {FILE_VERSION}; \
         run the device plugin and the agent from the same kfdq release"
    )]
    /// Another version of the format.
    Version {
        /// The file.
        path: PathBuf,
        /// The version it carries.
        found: u32,
    },
    /// A token that is not 32 lowercase hex digits.
    #[error("an allocation token is 32 lowercase hex digits")]
    BadToken,
}

impl AllocationFile {
    /// Reads the file; a missing file is an empty one (no allocations yet).
    pub fn read(path: &Path) -> Result<Self, AllocationError> {
        let text = match std::fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(source) => {
                return Err(AllocationError::Io {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        let file: AllocationFile =
            serde_json::from_slice(&text).map_err(|source| AllocationError::Parse {
                path: path.to_owned(),
                source,
            })?;
        if file.version != FILE_VERSION {
            return Err(AllocationError::Version {
                path: path.to_owned(),
                found: file.version,
            });
        }
        Ok(file)
    }

    /// Replaces the file atomically (a temporary file in the same directory, mode 0600, then
    /// rename).
    pub fn write(&self, path: &Path) -> Result<(), AllocationError> {
        let io = |source| AllocationError::Io {
            path: path.to_owned(),
            source,
        };
        let mut text = serde_json::to_vec_pretty(self)
            .map_err(std::io::Error::from)
            .map_err(io)?;
        text.push(b'\n');
        crate::replace::replace(path, &text, 0o600).map_err(io)
    }

    /// The allocation that holds `token`.
    pub fn find(&self, token: &Token) -> Option<&Allocation> {
        self.allocations.iter().find(|a| &a.token == token)
    }
}

/// The allocation token in a process's initial environment (`/proc/PID/environ`), if any.
/// A malformed value is `Some(Err(_))`: the process claims an allocation it does not hold.
pub fn token_of_environ(environ: &[u8]) -> Option<Result<Token, AllocationError>> {
    let prefix = format!("{TOKEN_ENV}=");
    environ
        .split(|&b| b == 0)
        .filter_map(|var| var.strip_prefix(prefix.as_bytes()))
        .next_back()
        .map(|v| {
            std::str::from_utf8(v)
                .map_err(|_| AllocationError::BadToken)
                .and_then(str::parse)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_lookup() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("allocations.json");
        assert_eq!(
            AllocationFile::read(&path).unwrap(),
            AllocationFile::default()
        );
        let token = Token::from_bytes([0xab; 16]);
        let file = AllocationFile {
            version: FILE_VERSION,
            allocations: vec![Allocation {
                token: token.clone(),
                class: "latency".into(),
                gpu: GpuId(0x1234),
                devices: vec!["kfdq-4660-latency-0".into()],
                pod: Some(PodRef {
                    namespace: "default".into(),
                    name: "llm".into(),
                    container: "server".into(),
                }),
            }],
        };
        file.write(&path).unwrap();
        let back = AllocationFile::read(&path).unwrap();
        assert_eq!(back, file);
        assert_eq!(back.find(&token).unwrap().class, "latency");
        assert!(back.find(&Token::from_bytes([1; 16])).is_none());
    }

    #[test]
    fn refuses_other_versions_and_bad_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.json");
        std::fs::write(&path, r#"{"version":2,"allocations":[]}"#).unwrap();
        assert!(matches!(
            AllocationFile::read(&path),
            Err(AllocationError::Version { found: 2, .. })
        ));
        std::fs::write(
            &path,
            r#"{"version":1,"allocations":[{"token":"XYZ","class":"batch","gpu":1,"devices":[]}]}"#,
        )
        .unwrap();
        assert!(matches!(
            AllocationFile::read(&path),
            Err(AllocationError::Parse { .. })
        ));
    }

    #[test]
    fn token_from_environ() {
        let t = "0123456789abcdef0123456789abcdef";
        let env = format!("A=1\0{TOKEN_ENV}={t}\0B=2\0");
        assert_eq!(
            token_of_environ(env.as_bytes()).unwrap().unwrap().as_str(),
            t
        );
        assert!(token_of_environ(b"A=1\0").is_none());
        assert!(
            token_of_environ(format!("{TOKEN_ENV}=nope\0").as_bytes())
                .unwrap()
                .is_err()
        );
    }
}
