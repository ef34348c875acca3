//! A child process the bench talks to one line at a time (the level-3 worker, the
//! reaction-chain helpers): a question on its stdin, one answer line on its stdout, `quit` when
//! the bench is done with it; killed and reaped if it does not quit or the bench stops early.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::R;
use crate::CliError;

/// How long a child that was told to quit gets before it is killed.
const QUIT_GRACE: Duration = Duration::from_secs(5);

pub(super) struct LineChild {
    /// What the errors call it ("the level-3 worker", "the batch helper").
    name: String,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// Its stderr, read to the end on a thread, when captured (shown only if it fails);
    /// `None`: inherited, so its errors are already above ours.
    stderr: Option<JoinHandle<String>>,
}

impl LineChild {
    /// Starts `cmd` with piped stdin and stdout, and stderr captured or inherited.
    pub(super) fn spawn(mut cmd: Command, name: &str, capture_stderr: bool) -> R<LineChild> {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        if capture_stderr {
            cmd.stderr(Stdio::piped());
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| CliError::Output(format!("starting {name}: {e}")))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(CliError::Output(format!("{name} has no pipes")));
        };
        let stderr = child.stderr.take().map(|mut err| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = std::io::Read::read_to_string(&mut err, &mut s);
                s
            })
        });
        Ok(LineChild {
            name: name.to_owned(),
            child,
            stdin,
            stdout: BufReader::new(stdout),
            stderr,
        })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `line` and returns the answer.
    pub(super) fn ask(&mut self, line: &str) -> R<String> {
        writeln!(self.stdin, "{line}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| CliError::Output(format!("talking to {}: {e}", self.name)))?;
        self.answer()
    }

    /// The next line it writes, trimmed; its exit is an error with what it said on stderr.
    pub(super) fn answer(&mut self) -> R<String> {
        let mut s = String::new();
        self.stdout
            .read_line(&mut s)
            .map_err(|e| CliError::Output(format!("reading {}: {e}", self.name)))?;
        if s.is_empty() {
            let _ = self.child.wait();
            let said = match self.stderr.take() {
                Some(t) => t.join().unwrap_or_default().trim().to_owned(),
                None => "its error is above".to_owned(),
            };
            return Err(CliError::Refused(format!("{} exited: {said}", self.name)));
        }
        Ok(s.trim().to_string())
    }
}

impl Drop for LineChild {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let deadline = Instant::now() + QUIT_GRACE;
        while !matches!(self.child.try_wait(), Ok(Some(_))) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        // A child that does not quit (e.g. blocked) is ended; it is this bench's child.
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}
