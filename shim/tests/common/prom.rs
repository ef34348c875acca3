//! Debian's real Prometheus for tests (`scripts/setup.sh --tests` installs it): a server that
//! scrapes one target every second on the loopback address, its HTTP query API, and the
//! exposition read the way the tests look at it.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub fn tool(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`{name}` is not installed: scripts/setup.sh --tests installs Debian's prometheus"
            )
        })
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP request; (status line, body); an empty status line when nothing listens yet.
pub fn http(addr: SocketAddr, request: &str) -> (String, String) {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return (String::new(), String::new());
    };
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

pub fn get(addr: SocketAddr, path: &str) -> (String, String) {
    http(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    )
}

/// The value of the sample whose line starts with `series` (name and labels, exactly as
/// exposed, labels in any order).
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().find_map(|l| {
        let (series, value) = l.rsplit_once(' ')?;
        let (n, rest) = series.split_once('{').unwrap_or((series, ""));
        (n == name
            && labels
                .iter()
                .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\""))))
        .then(|| value.parse().ok())
        .flatten()
    })
}

pub struct Prometheus {
    child: Child,
    _dir: tempfile::TempDir,
    pub addr: SocketAddr,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn prometheus(target: SocketAddr) -> Prometheus {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: kfdqd\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let child = Command::new(tool("prometheus"))
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("prometheus.log")).unwrap())
        .spawn()
        .unwrap();
    Prometheus {
        child,
        _dir: dir,
        addr,
    }
}

pub fn encode_query(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The value Prometheus's HTTP API answers for an instant `query`, if it has one.
pub fn query(p: &Prometheus, q: &str) -> Option<f64> {
    let (status, body) = get(p.addr, &format!("/api/v1/query?query={}", encode_query(q)));
    if !status.contains("200") {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["data"]["result"][0]["value"][1]
        .as_str()
        .and_then(|s| s.parse().ok())
}
