//! One sequence: its steps, chosen from the seed among those that apply to the directory as it
//! is, run one after another, each refusal checked as it happens, and the final check.

use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::check::{changes, exists, final_check, snapshot, typed_refusal};
use super::model::{Model, Node};
use super::report::{SequenceConfig, SequenceReport};
use super::writer::{self, Opened, Writer};
use crate::rng::Rng;

/// The store names a sequence uses.
const NAMES: [&str; 4] = ["a.idemdb", "b.idemdb", "c.idemdb", "d.idemdb"];

/// Journal sizes of the writer (small: checkpoints every few dozen completions).
const JOURNAL_BYTES: [u64; 3] = [8 * 1024, 16 * 1024, 64 * 1024];

/// How long one operator command may run.
const COMMAND_WAIT: Duration = Duration::from_secs(60);

/// Whether `path` is a regular file itself (not a symlink, not missing).
fn regular(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|meta| meta.is_file())
}

fn journal(name: &str) -> String {
    format!("{name}-journal")
}

/// The state of one sequence as it runs.
struct Run<'a> {
    config: &'a SequenceConfig,
    dir: PathBuf,
    empty: PathBuf,
    rng: Rng,
    model: Model,
    writer: Option<Writer>,
    journal_bytes: u64,
    /// Journals the operator moved away: (name, where it is now).
    moved: Vec<(String, String)>,
    log: Vec<String>,
    problems: Vec<String>,
    report: SequenceReport,
}

/// Runs sequence `index` (seed `seed`) in a directory of its own under `root`.
pub(crate) fn sequence(config: &SequenceConfig, root: &Path, index: u64, seed: u64) -> SequenceReport {
    let dir = root.join(format!("seq-{index}"));
    let _ = fs::remove_dir_all(&dir);
    let mut rng = Rng::new(seed);
    let journal_bytes = JOURNAL_BYTES[rng.below(JOURNAL_BYTES.len() as u64) as usize];
    let mut run = Run {
        config,
        dir: dir.clone(),
        empty: root.join("empty.jsonl"),
        rng,
        model: Model::default(),
        writer: None,
        journal_bytes,
        moved: Vec::new(),
        log: vec![format!("journal {journal_bytes} B")],
        problems: Vec::new(),
        report: SequenceReport { sequences: 1, ..SequenceReport::default() },
    };
    if let Err(error) = fs::create_dir_all(&dir) {
        run.report.failures += 1;
        run.problems.push(format!("create {}: {error}", dir.display()));
    } else {
        run.start("a.idemdb");
        let steps = 3 + run.rng.below(6);
        for _ in 0..steps {
            run.step();
        }
        run.finish();
    }
    let _ = fs::remove_dir_all(&dir);
    let mut report = run.report;
    if !run.problems.is_empty() {
        report.failed_sequences += 1;
        report.failing.push(format!(
            "sequence {index} (seed {seed:#x}): {}\n      found: {}",
            run.log.join("; "),
            run.problems.join("; ")
        ));
    }
    report
}

impl Run<'_> {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn count(&mut self, kind: &'static str) {
        *self.report.steps.entry(kind).or_insert(0) += 1;
    }

    fn pick<T: Clone>(&mut self, from: &[T]) -> Option<T> {
        if from.is_empty() { None } else { from.get(self.rng.below(from.len() as u64) as usize).cloned() }
    }

    /// Store names with nothing at them (no model entry, no file).
    fn free_names(&self) -> Vec<String> {
        NAMES
            .iter()
            .filter(|name| !self.model.names.contains_key(**name) && !exists(&self.path(name)))
            .map(|name| (*name).to_string())
            .collect()
    }

    /// Names that lead to a store.
    fn live_names(&self) -> Vec<String> {
        self.model.names.keys().filter(|name| self.model.resolve(name).is_some()).cloned().collect()
    }

    fn failure(&mut self, text: String) {
        self.report.failures += 1;
        self.problems.push(text);
    }

    /// One step, chosen among those that apply now.
    fn step(&mut self) {
        let files = self.model.file_names();
        let free = self.free_names();
        let live = self.live_names();
        let with_journal: Vec<String> =
            NAMES.iter().filter(|name| regular(&self.path(&journal(name)))).map(|name| (*name).to_string()).collect();
        let journal_free: Vec<String> =
            NAMES.iter().filter(|name| !exists(&self.path(&journal(name)))).map(|name| (*name).to_string()).collect();
        let can_return =
            self.moved.iter().any(|(name, away)| !exists(&self.path(&journal(name))) && exists(&self.path(away)));
        let running = self.writer.is_some();
        let has_files = !files.is_empty();
        let has_free = !free.is_empty();
        // (weight, applies)
        let choices: [(u64, bool); 17] = [
            (4, !running),                                             // 0 start
            (3, running),                                              // 1 write
            (3, running),                                              // 2 kill
            (1, running),                                              // 3 quit
            (2, has_files && has_free),                                // 4 mv
            (1, has_files && has_free),                                // 5 ln
            (1, has_files && has_free),                                // 6 ln -s
            (2, has_files && has_free),                                // 7 cp
            (1, !with_journal.is_empty()),                             // 8 journal away
            (2, can_return),                                           // 9 journal back
            (1, !with_journal.is_empty() && !journal_free.is_empty()), // 10 journal cp/ln/ln -s
            (2, has_free),                                             // 11 new store (import)
            (2, !live.is_empty()),                                     // 12 recover
            (2, !live.is_empty()),                                     // 13 recover --discard-journal
            (1, !live.is_empty() && (has_free || has_files)),          // 14 backup
            (2, !live.is_empty() && has_files),                        // 15 backup --overwrite
            (1, has_files),                                            // 16 compact --rebuild
        ];
        let total: u64 = choices.iter().filter(|(_, applies)| *applies).map(|(weight, _)| weight).sum();
        let mut at = self.rng.below(total.max(1));
        let mut chosen = 0;
        for (i, (weight, applies)) in choices.iter().enumerate() {
            if !applies {
                continue;
            }
            if at < *weight {
                chosen = i;
                break;
            }
            at -= weight;
        }
        match chosen {
            0 => {
                let name =
                    if has_files && (!has_free || self.rng.chance(70)) { self.pick(&files) } else { self.pick(&free) };
                if let Some(name) = name {
                    self.start(&name);
                }
            }
            1 => self.write(None),
            2 => {
                let count = 1 + self.rng.below(8);
                let after = self.rng.below(count + 1);
                self.write_batch(count, Some(after));
            }
            3 => self.quit(),
            4..=7 => {
                let (Some(from), Some(to)) = (self.pick(&files), self.pick(&free)) else { return };
                self.file_op(chosen, &from, &to);
            }
            8 => {
                if let Some(name) = self.pick(&with_journal) {
                    self.journal_away(&name);
                }
            }
            9 => self.journal_back(),
            10 => {
                let (Some(from), Some(to)) = (self.pick(&with_journal), self.pick(&journal_free)) else { return };
                self.journal_op(&from, &to);
            }
            11 => {
                if let Some(name) = self.pick(&free) {
                    self.new_store(&name);
                }
            }
            12 | 13 => {
                if let Some(name) = self.pick(&live) {
                    self.recover(&name, chosen == 13);
                }
            }
            14 => {
                let Some(src) = self.pick(&live) else { return };
                // Onto a free name, or (refused) onto a store without --overwrite.
                let dest = if has_free && self.rng.chance(75) { self.pick(&free) } else { self.pick(&files) };
                if let Some(dest) = dest {
                    self.backup(&src, &dest, false);
                }
            }
            15 => {
                let (Some(src), Some(dest)) = (self.pick(&live), self.pick(&files)) else { return };
                self.backup(&src, &dest, true);
            }
            _ => {
                if let Some(name) = self.pick(&files) {
                    self.rebuild(&name);
                }
            }
        }
    }

    /// Starts the writer on `name` and has it write a first batch.
    fn start(&mut self, name: &str) {
        self.count("start writer");
        let existing = self.model.resolve(name);
        let before = snapshot(&self.dir);
        match writer::start(&self.config.child, &self.path(name), self.journal_bytes) {
            Opened::Open(writer) => {
                let id = existing.unwrap_or_else(|| {
                    let id = self.model.new_lineage();
                    self.model.names.insert(name.to_string(), Node::File(id));
                    id
                });
                self.log.push(format!("writer opens {name} ({})", self.prefix(id)));
                if let Some(lineage) = self.model.lineages.get_mut(id) {
                    lineage.clean = false;
                }
                self.model.opened(id);
                self.model.journal_beside(id, name);
                self.model.held = Some(id);
                self.writer = Some(writer);
                self.write(None);
            }
            Opened::Refused(error) => {
                self.log.push(format!("writer opens {name}: refused ({error})"));
                self.report.refusals += 1;
                self.unchanged("start writer", &before, &format!("the writer's refused open of {name}"));
            }
            Opened::Failed(error) => {
                self.log.push(format!("writer opens {name}: died ({error})"));
                self.report.untyped += 1;
                self.problems.push(format!("the writer's open of {name} ended without a typed answer: {error}"));
            }
        }
    }

    fn prefix(&self, id: usize) -> String {
        self.model.lineages.get(id).map(|l| l.prefix.clone()).unwrap_or_default()
    }

    fn write(&mut self, kill_after: Option<u64>) {
        let count = 1 + self.rng.below(8);
        self.write_batch(count, kill_after);
    }

    /// The writer completes `count` keys; with `kill_after`, it is killed once that many are
    /// acknowledged.
    fn write_batch(&mut self, count: u64, kill_after: Option<u64>) {
        let (Some(id), Some(writer)) = (self.model.held, self.writer.as_mut()) else { return };
        let Some(lineage) = self.model.lineages.get_mut(id) else { return };
        let from = lineage.next;
        lineage.next += count;
        let prefix = lineage.prefix.clone();
        let keys: Vec<String> = (from..from + count).map(|n| writer::key_name(&prefix, n)).collect();
        self.model.request(id, &keys);
        let written = writer.write(&prefix, from, count, kill_after);
        let acked = written.acked.len() as u64;
        if let Some(lineage) = self.model.lineages.get_mut(id) {
            lineage.acked.extend(written.acked);
        }
        self.report.acknowledged += acked;
        match kill_after {
            Some(_) => {
                self.count("kill -9 writer");
                self.log.push(format!("writer writes {count}, killed after {acked} acknowledged"));
                self.writer = None;
                self.model.held = None;
            }
            None => {
                self.count("write");
                self.log.push(format!("writer writes {count} ({acked} acknowledged)"));
            }
        }
        if let Some(failure) = written.failure {
            self.failure(format!("writer on {prefix}: {failure}"));
            if let Some(mut writer) = self.writer.take() {
                writer.kill();
            }
            self.model.held = None;
        }
    }

    fn quit(&mut self) {
        let Some(writer) = self.writer.take() else { return };
        self.count("writer closes");
        let closed = writer.quit();
        self.log.push("writer closes".into());
        if let Some(lineage) = self.model.held.take().and_then(|id| self.model.lineages.get_mut(id)) {
            lineage.clean = closed;
        }
        if !closed {
            self.failure("the writer did not close its store cleanly".into());
        }
    }

    /// `mv`, `ln`, `ln -s` or `cp` (by `kind`, 4 to 7) of store `from` to the free name `to`;
    /// `mv` and `cp` take the journal along half of the time.
    fn file_op(&mut self, kind: usize, from: &str, to: &str) {
        let (src, dst) = (self.path(from), self.path(to));
        let (src_journal, dst_journal) = (self.path(&journal(from)), self.path(&journal(to)));
        // The journal goes along only when it is a file (a symlink the operator left may dangle).
        let both = matches!(kind, 4 | 7) && regular(&src_journal) && !exists(&dst_journal) && self.rng.chance(50);
        let Some(id) = self.model.resolve(from) else { return };
        let outcome = match kind {
            4 => {
                self.count("mv");
                fs::rename(&src, &dst).and_then(|()| if both { fs::rename(&src_journal, &dst_journal) } else { Ok(()) })
            }
            5 => {
                self.count("ln");
                fs::hard_link(&src, &dst)
            }
            6 => {
                self.count("ln -s");
                std::os::unix::fs::symlink(&src, &dst)
            }
            _ => {
                self.count("cp");
                fs::copy(&src, &dst)
                    .and_then(|_| if both { fs::copy(&src_journal, &dst_journal).map(drop) } else { Ok(()) })
            }
        };
        let verb = ["mv", "ln", "ln -s", "cp"][kind - 4];
        let what = if both { " (and its journal)" } else { "" };
        self.log.push(format!("{verb} {from} {to}{what}"));
        if let Err(error) = outcome {
            self.failure(format!("{verb} {from} {to}: {error}"));
            return;
        }
        match kind {
            4 => {
                if let Some(node) = self.model.names.remove(from) {
                    self.model.names.insert(to.to_string(), node);
                }
                if both {
                    self.model.journal_renamed(&journal(from), &journal(to));
                }
            }
            5 => {
                self.model.names.insert(to.to_string(), Node::File(id));
            }
            6 => {
                self.model.names.insert(to.to_string(), Node::Link(from.to_string()));
            }
            _ => {
                let complete = !self.model.is_held(id) && self.model.lineages.get(id).is_some_and(|l| l.clean);
                let copy = self.model.fork(id, complete);
                self.model.names.insert(to.to_string(), Node::File(copy));
            }
        }
    }

    fn journal_away(&mut self, name: &str) {
        self.count("mv journal away");
        let away = format!("{}.moved-journal-{}", journal(name), self.log.len());
        self.log.push(format!("mv {} {away}", journal(name)));
        match fs::rename(self.path(&journal(name)), self.path(&away)) {
            Ok(()) => {
                self.model.journal_renamed(&journal(name), &away);
                self.moved.push((name.to_string(), away));
            }
            Err(error) => self.failure(format!("mv journal: {error}")),
        }
    }

    /// Puts back the first journal moved away whose name is free again.
    fn journal_back(&mut self) {
        let Some(at) =
            self.moved.iter().position(|(name, away)| !exists(&self.path(&journal(name))) && exists(&self.path(away)))
        else {
            return;
        };
        let (name, away) = self.moved.remove(at);
        self.count("mv journal back");
        self.log.push(format!("mv {away} {}", journal(&name)));
        match fs::rename(self.path(&away), self.path(&journal(&name))) {
            Ok(()) => self.model.journal_renamed(&away, &journal(&name)),
            Err(error) => self.failure(format!("mv journal back: {error}")),
        }
    }

    /// A journal beside a name it does not belong to: a copy, a hard link or a symlink of
    /// `from`'s journal as `to`'s.
    fn journal_op(&mut self, from: &str, to: &str) {
        let (src, dst) = (self.path(&journal(from)), self.path(&journal(to)));
        let how = self.rng.below(3);
        let verb = ["cp", "ln", "ln -s"][how as usize];
        self.count(["cp journal", "ln journal", "ln -s journal"][how as usize]);
        self.log.push(format!("{verb} {} {}", journal(from), journal(to)));
        let outcome = match how {
            0 => fs::copy(&src, &dst).map(drop),
            1 => fs::hard_link(&src, &dst),
            _ => std::os::unix::fs::symlink(&src, &dst),
        };
        if let Err(error) = outcome {
            self.failure(format!("{verb} journal: {error}"));
        }
    }

    /// Runs the operator's command; `Ok` when it exited with 0. A refusal is checked: typed,
    /// and the directory as it was.
    fn command(&mut self, kind: &'static str, args: Vec<OsString>, shown: String, opens: &[&str]) -> bool {
        self.count(kind);
        let before = snapshot(&self.dir);
        let (code, stderr) = self.cli(&args);
        if code == Some(0) {
            self.log.push(format!("{shown}: ok"));
            // Every store the command named was opened (a new journal generation beside it).
            for name in opens {
                if let Some(id) = self.model.resolve(name) {
                    self.model.opened(id);
                    self.model.journal_beside(id, name);
                }
            }
            return true;
        }
        let reason = stderr.lines().rev().find(|line| !line.trim().is_empty()).unwrap_or("").trim().to_string();
        self.log.push(format!("{shown}: refused, exit {code:?} ({reason})"));
        self.report.refusals += 1;
        if !typed_refusal(code, &stderr) {
            self.report.untyped += 1;
            self.problems.push(format!("`{shown}` refused without a typed report: exit {code:?}, stderr {stderr:?}"));
        }
        self.unchanged(kind, &before, &format!("`{shown}` (refused)"));
        false
    }

    fn unchanged(&mut self, kind: &'static str, before: &std::collections::BTreeMap<String, String>, what: &str) {
        let changed = changes(before, &snapshot(&self.dir));
        if !changed.is_empty() {
            self.report.refusals_changed += 1;
            *self.report.changed_by.entry(kind).or_insert(0) += 1;
            self.problems.push(format!("{what} changed the directory: {}", changed.join(", ")));
        }
    }

    fn cli(&self, args: &[OsString]) -> (Option<i32>, String) {
        let spawned = Command::new(&self.config.cli)
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn();
        let Ok(mut child) = spawned else { return (None, "spawn failed".into()) };
        let started = Instant::now();
        let code = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status.code(),
                Ok(None) if started.elapsed() < COMMAND_WAIT => std::thread::sleep(Duration::from_millis(1)),
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
            }
        };
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            let _ = pipe.read_to_string(&mut stderr);
        }
        (code, stderr)
    }

    fn new_store(&mut self, name: &str) {
        let args = vec!["import".into(), self.path(name).into(), self.empty.clone().into()];
        if self.command("new store (import)", args, format!("idemdb import {name} empty.jsonl"), &[]) {
            let id = self.model.new_lineage();
            self.model.names.insert(name.to_string(), Node::File(id));
            self.model.journal_beside(id, name);
        }
    }

    fn recover(&mut self, name: &str, discard: bool) {
        let mut args: Vec<OsString> = vec!["recover".into(), self.path(name).into()];
        if discard {
            args.push("--discard-journal".into());
        }
        let (kind, flag) = if discard { ("recover --discard-journal", " --discard-journal") } else { ("recover", "") };
        let Some(id) = self.model.resolve(name) else { return };
        if self.command(kind, args, format!("idemdb recover {name}{flag}"), &[name])
            && !self.model.is_held(id)
            && let Some(lineage) = self.model.lineages.get_mut(id)
        {
            lineage.clean = true;
            lineage.discarded |= discard;
        }
    }

    fn backup(&mut self, src: &str, dest: &str, overwrite: bool) {
        let mut args: Vec<OsString> = vec!["backup".into(), self.path(src).into(), self.path(dest).into()];
        if overwrite {
            args.push("--overwrite".into());
        }
        let Some(from) = self.model.resolve(src) else { return };
        let held = if self.model.resolve(dest).is_some_and(|id| self.model.is_held(id)) { " (held)" } else { "" };
        let kind = if overwrite { "backup --overwrite" } else { "backup" };
        let flag = if overwrite { " --overwrite" } else { "" };
        if !self.command(kind, args, format!("idemdb backup {src} {dest}{flag}{held}"), &[src]) {
            return;
        }
        let src_held = self.model.is_held(from);
        let copy = self.model.fork(from, !src_held);
        if !src_held && let Some(lineage) = self.model.lineages.get_mut(from) {
            lineage.clean = true;
        }
        let old = self.model.resolve(dest);
        self.model.replace_file(dest, copy, false);
        if let Some(old) = old
            && self.model.names_of(old).is_empty()
            && !self.model.is_held(old)
            && let Some(lineage) = self.model.lineages.get_mut(old)
        {
            lineage.replaced = true;
        }
    }

    fn rebuild(&mut self, name: &str) {
        let args = vec!["compact".into(), self.path(name).into(), "--rebuild".into()];
        let Some(id) = self.model.resolve(name) else { return };
        if self.command("compact --rebuild", args, format!("idemdb compact {name} --rebuild"), &[name]) {
            self.model.replace_file(name, id, true);
            if !self.model.is_held(id)
                && let Some(lineage) = self.model.lineages.get_mut(id)
            {
                lineage.clean = true;
            }
        }
    }

    /// The end of a sequence: the writer is killed or closes, and every store is read (see
    /// [`final_check`]).
    fn finish(&mut self) {
        if self.writer.is_some() {
            if self.rng.chance(60) {
                if let Some(mut writer) = self.writer.take() {
                    writer.kill();
                }
                self.model.held = None;
                self.count("kill -9 writer");
                self.log.push("writer killed".into());
            } else {
                self.quit();
            }
        }
        let found = final_check(&self.dir, &mut self.model, self.journal_bytes, &mut self.log);
        self.report.verified += found.verified;
        self.report.lost += found.lost;
        self.report.given_up += found.given_up;
        self.report.replaced += found.replaced;
        self.report.foreign += found.foreign;
        self.report.refused_at_check += found.refused_at_check;
        if found.lost > 0 || found.foreign > 0 {
            self.problems.extend(found.notes);
        }
    }
}
