//! Reading a spawned child's output while it runs: its stdout line by line, its stderr whole (as
//! lossy UTF-8).

use std::io::{BufRead, BufReader, Read};
use std::process::Child;
use std::sync::mpsc::{Receiver, channel};
use std::thread::JoinHandle;

/// Threads that read `child`'s piped output: its stdout lines arrive on the receiver as they
/// are printed; the handle's result is its whole stderr (joined once the child closed it).
///
/// Panics when stdout or stderr was not piped (a mistake in the test).
pub fn read_output(child: &mut Child) -> (Receiver<String>, JoinHandle<String>) {
    let out = child.stdout.take().expect("the child's stdout is piped");
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut err = child.stderr.take().expect("the child's stderr is piped");
    let stderr = std::thread::spawn(move || {
        let mut v = Vec::new();
        // A read error ends the text early; the test still sees what came before.
        let _ = err.read_to_end(&mut v);
        String::from_utf8_lossy(&v).into_owned()
    });
    (rx, stderr)
}

/// Every line still to come on `lines` (from [`read_output`]) until its reader thread saw the
/// end of the child's stdout: call it once the child ended, so that no line still on its way
/// through the reader thread is missed. Fails the test when the end does not come within
/// `limit` (a process the child left behind holds its stdout open).
pub fn lines_until_eof(lines: &Receiver<String>, limit: std::time::Duration) -> Vec<String> {
    let deadline = std::time::Instant::now() + limit;
    let mut v = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => v.push(line),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return v,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!(
                "the child's stdout did not end within {limit:?} after the child did (something it started holds it open); read so far:\n{}",
                v.join("\n")
            ),
        }
    }
}

/// The stdout of a finished command that must have succeeded; otherwise fails the test with
/// its stdout and stderr.
pub fn success_stdout(o: &std::process::Output) -> String {
    assert!(
        o.status.success(),
        "the command failed ({}):\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}
