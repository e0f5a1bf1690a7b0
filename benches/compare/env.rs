//! The machine, its wall clock, the scratch directory and the operating system's I/O counters.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::data::Res;

/// Wall-clock milliseconds since the Unix epoch.
pub(crate) fn now_ms_u64() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Wall-clock milliseconds as SQLite stores them.
pub(crate) fn now_ms() -> i64 {
    now_ms_u64() as i64
}

/// What the run was measured on.
pub(crate) struct Machine {
    pub(crate) lines: Vec<String>,
}

impl Machine {
    pub(crate) fn describe(scratch: &Path) -> Machine {
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let cpu = fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|text| {
                text.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let memory = fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|text| {
                let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
                let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
                Some(format!("{:.1} GiB", kib as f64 / 1024.0 / 1024.0))
            })
            .unwrap_or_else(|| "unknown".into());
        let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_default();
        let (fs_type, device) = filesystem_of(scratch).unwrap_or_else(|| ("unknown".into(), "unknown".into()));
        let load = load_average().unwrap_or_else(|| "unknown".into());
        let mut lines = vec![
            format!("cpu: {cpu}, {cores} cores available"),
            format!("memory: {memory}"),
            format!("os: {} {} (kernel {kernel})", std::env::consts::OS, std::env::consts::ARCH),
            format!("scratch dir: {} on {fs_type} ({device})", scratch.display()),
            format!("commit: {}", git_describe()),
            format!("load average (1 min) at the start: {load} (other work on the machine distorts timings)"),
        ];
        if matches!(fs_type.as_str(), "tmpfs" | "ramfs" | "overlay") {
            lines.push(format!(
                "WARNING: the scratch dir is on {fs_type}; fsync may not reach a disk. Set IDEMDB_BENCH_DIR."
            ));
        }
        Machine { lines }
    }
}

/// The one-minute load average, from `/proc/loadavg`.
pub(crate) fn load_average() -> Option<String> {
    fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next().map(str::to_string)
}

/// The scratch directory: `IDEMDB_BENCH_DIR` or cargo's target tmp dir (same file system as
/// the checkout, never tmpfs on a normal setup, so fsync is real).
pub(crate) fn scratch_root() -> Res<PathBuf> {
    let root = match std::env::var_os("IDEMDB_BENCH_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("idemdb-bench"),
    };
    fs::create_dir_all(&root)?;
    Ok(root.canonicalize()?)
}

/// File system type and device of the mount holding `path` (longest mount-point prefix).
fn filesystem_of(path: &Path) -> Option<(String, String)> {
    let mounts = fs::read_to_string("/proc/mounts").ok()?;
    let mut best: Option<(usize, String, String)> = None;
    for line in mounts.lines() {
        let mut fields = line.split_whitespace();
        let (Some(device), Some(mount), Some(kind)) = (fields.next(), fields.next(), fields.next()) else { continue };
        let mount = mount.replace("\\040", " ");
        if path.starts_with(&mount) && best.as_ref().is_none_or(|(len, _, _)| mount.len() > *len) {
            best = Some((mount.len(), kind.to_string(), device.to_string()));
        }
    }
    best.map(|(_, kind, device)| (kind, device))
}

fn git_describe() -> String {
    let run = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    match run(&["rev-parse", "--short", "HEAD"]) {
        Some(head) => {
            let dirty = run(&["status", "--porcelain", "--untracked-files=no", "--", "../crates"])
                .is_some_and(|s| !s.is_empty());
            if dirty { format!("{head} + uncommitted changes in crates/") } else { head }
        }
        None => "unknown (not a git checkout)".into(),
    }
}

/// `/proc/self/io` and `/proc/self/stat`: bytes this process caused to be sent to the block
/// layer, its write system calls, and the CPU time of all its threads. Process-wide, so only
/// meaningful while one system runs.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ProcIo {
    pub(crate) write_bytes: u64,
    pub(crate) write_calls: u64,
    /// User + system CPU time in clock ticks (1/100 s on Linux).
    pub(crate) cpu_ticks: u64,
}

/// Clock ticks per second of `/proc/self/stat` (`USER_HZ`, 100 on every Linux build in use).
pub(crate) const TICKS_PER_SEC: f64 = 100.0;

impl ProcIo {
    pub(crate) fn now() -> Option<ProcIo> {
        let text = fs::read_to_string("/proc/self/io").ok()?;
        let mut io = ProcIo::default();
        let mut seen = 0;
        for line in text.lines() {
            let Some((name, value)) = line.split_once(':') else { continue };
            let Ok(value) = value.trim().parse::<u64>() else { continue };
            match name {
                "write_bytes" => {
                    io.write_bytes = value;
                    seen += 1;
                }
                "syscw" => {
                    io.write_calls = value;
                    seen += 1;
                }
                _ => {}
            }
        }
        // Fields after the command name (which may hold spaces) start at field 3 (state);
        // utime and stime are fields 14 and 15.
        let stat = fs::read_to_string("/proc/self/stat").ok()?;
        let after_name = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let utime: u64 = fields.get(11)?.parse().ok()?;
        let stime: u64 = fields.get(12)?.parse().ok()?;
        io.cpu_ticks = utime + stime;
        (seen == 2).then_some(io)
    }

    pub(crate) fn since(self, earlier: ProcIo) -> ProcIo {
        ProcIo {
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
            write_calls: self.write_calls.saturating_sub(earlier.write_calls),
            cpu_ticks: self.cpu_ticks.saturating_sub(earlier.cpu_ticks),
        }
    }
}

/// Bytes the file system has allocated to `path` (st_blocks × 512), or 0 if it is absent.
#[cfg(unix)]
pub(crate) fn allocated_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).map(|m| m.blocks() * 512).unwrap_or(0)
}

/// Elsewhere the file length stands in for the allocation.
#[cfg(not(unix))]
pub(crate) fn allocated_bytes(path: &Path) -> u64 {
    fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}
