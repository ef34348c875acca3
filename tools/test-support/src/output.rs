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
