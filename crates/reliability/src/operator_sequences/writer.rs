//! The journaling writer of a sequence: a child process that holds one store open and
//! completes keys on request, and the parent's handle on it.
//!
//! Child: `reliability-child seq-writer <store> <journal bytes>`. It opens the store (creating
//! it when the name is free) and prints `O`, or prints `R <error>` when the open is refused and
//! exits. Then, for each line `w <prefix> <from> <count>` on stdin, it completes the keys
//! `<prefix>-<from>` … (body = the key), printing `A <key>` once each completion returned, then
//! `D`. On `q` or the end of stdin it closes the store cleanly and prints `Q`. Any other failure
//! is `X <error>`.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use idemdb::{Fingerprint, IdempotencyKey, Reservation, Reserve, Scope, Store, StoreBuilder};

/// How long the parent waits for one answer of the writer before it gives up on it.
const ANSWER_WAIT: Duration = Duration::from_secs(20);

/// The scope every sequence key lives in.
pub(crate) fn scope() -> Option<Scope> {
    Scope::new("ops", "seq").ok()
}

/// The fingerprint of every sequence key (keys are never reused, so one is enough).
pub(crate) fn fingerprint() -> Fingerprint {
    Fingerprint::from_bytes([7; 32])
}

/// The builder the writer and the final check open stores with.
pub(crate) fn builder(journal_bytes: u64) -> StoreBuilder {
    Store::builder().journal(true).journal_bytes(journal_bytes)
}

/// The key `n` of a store prefix: fixed width, so no key's bytes contain another's.
pub(crate) fn key_name(prefix: &str, n: u64) -> String {
    format!("{prefix}-{n:05}")
}

/// The child process (see the module's documentation).
///
/// # Errors
/// A message for the parent (printed as `X …`).
pub fn child_main(args: &[String]) -> Result<(), String> {
    let [path, journal_bytes] = args else {
        return Err("usage: seq-writer <store> <journal bytes>".into());
    };
    let journal_bytes: u64 = journal_bytes.parse().map_err(|_| "bad journal size".to_string())?;
    let mut out = std::io::stdout().lock();
    let say = |out: &mut std::io::StdoutLock<'_>, line: &str| {
        writeln!(out, "{line}").and_then(|()| out.flush()).map_err(|error| error.to_string())
    };
    let store = match builder(journal_bytes).open(path) {
        Ok(store) => store,
        Err(error) => return say(&mut out, &format!("R {}", one_line(&error.to_string()))),
    };
    say(&mut out, "O")?;
    let scope = scope().ok_or("bad scope")?;
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|error| error.to_string())?;
        let parts: Vec<&str> = line.split(' ').collect();
        match parts.as_slice() {
            ["w", prefix, from, count] => {
                let from: u64 = from.parse().map_err(|_| "bad from".to_string())?;
                let count: u64 = count.parse().map_err(|_| "bad count".to_string())?;
                for n in from..from + count {
                    let name = key_name(prefix, n);
                    let key = IdempotencyKey::new(name.as_str()).map_err(|error| error.to_string())?;
                    let Reservation::Acquired(lease) = store
                        .reserve(Reserve::new(&scope, &key, &fingerprint()))
                        .map_err(|e| format!("reserve {name}: {e}"))?
                    else {
                        return Err(format!("{name} was not new"));
                    };
                    store.complete(&lease, name.clone().into_bytes()).map_err(|e| format!("complete {name}: {e}"))?;
                    say(&mut out, &format!("A {name}"))?;
                }
                say(&mut out, "D")?;
            }
            ["q"] => break,
            _ => return Err(format!("unknown command {line:?}")),
        }
    }
    drop(store);
    say(&mut out, "Q")
}

fn one_line(text: &str) -> String {
    text.replace('\n', " ")
}

/// How a writer's open ended.
pub(crate) enum Opened {
    /// It holds the store.
    Open(Writer),
    /// The open was refused with this error (the child exited).
    Refused(String),
    /// The child died or failed without a typed answer (its last words).
    Failed(String),
}

/// A running writer.
pub(crate) struct Writer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

/// Starts a writer on `store` and waits for its open.
pub(crate) fn start(child: &Path, store: &Path, journal_bytes: u64) -> Opened {
    let spawned = Command::new(child)
        .arg("seq-writer")
        .arg(store)
        .arg(journal_bytes.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let mut process = match spawned {
        Ok(process) => process,
        Err(error) => return Opened::Failed(format!("spawn: {error}")),
    };
    let (Some(stdout), stdin) = (process.stdout.take(), process.stdin.take()) else {
        let _ = process.kill();
        let _ = process.wait();
        return Opened::Failed("no pipes".into());
    };
    let (send, lines) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if send.send(line).is_err() {
                break;
            }
        }
    });
    let mut writer = Writer { child: process, stdin, lines };
    match writer.next_line() {
        Some(line) if line == "O" => Opened::Open(writer),
        Some(line) if line.starts_with("R ") => {
            let _ = writer.child.wait();
            Opened::Refused(line[2..].to_string())
        }
        other => {
            writer.kill();
            Opened::Failed(format!("open answered {other:?}"))
        }
    }
}

/// What a request to write ended with.
pub(crate) struct Written {
    /// Keys acknowledged, in order.
    pub(crate) acked: Vec<String>,
    /// The writer failed (its message), or died.
    pub(crate) failure: Option<String>,
}

impl Writer {
    fn next_line(&mut self) -> Option<String> {
        self.lines.recv_timeout(ANSWER_WAIT).ok()
    }

    fn send(&mut self, line: &str) -> bool {
        self.stdin.as_mut().is_some_and(|stdin| writeln!(stdin, "{line}").and_then(|()| stdin.flush()).is_ok())
    }

    /// Asks for `count` keys from `from` and reads acknowledgements: all of them, or (with
    /// `kill_after`) that many, and then kills the writer with SIGKILL.
    pub(crate) fn write(&mut self, prefix: &str, from: u64, count: u64, kill_after: Option<u64>) -> Written {
        let mut written = Written { acked: Vec::new(), failure: None };
        if !self.send(&format!("w {prefix} {from} {count}")) {
            written.failure = Some("the writer's stdin is closed".into());
            return written;
        }
        loop {
            if kill_after.is_some_and(|after| written.acked.len() as u64 >= after) {
                self.kill();
                return written;
            }
            match self.next_line() {
                Some(line) if line == "D" => return written,
                Some(line) => match line.strip_prefix("A ") {
                    Some(key) => written.acked.push(key.to_string()),
                    None => {
                        written.failure = Some(line);
                        return written;
                    }
                },
                None => {
                    written.failure = Some("the writer stopped answering".into());
                    return written;
                }
            }
        }
    }

    /// Kills the writer with SIGKILL and reaps it (its lock is gone when this returns).
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Asks the writer to close the store cleanly; `false` when it did not say it had.
    pub(crate) fn quit(mut self) -> bool {
        let asked = self.send("q");
        self.stdin = None;
        let closed = asked && self.next_line().as_deref() == Some("Q");
        if !closed {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        closed
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
