//! A write-ahead journal in front of redb: each group commit is made durable by **one write
//! and one `fdatasync`** of a preallocated file, while redb commits without flushing
//! (`Durability::None`) and is checkpointed durably now and then.
//!
//! Cut by job: the byte layout (`format.rs`); the file — header, append, scan, restart
//! (`file.rs`) and where it lives (`files.rs`); the commit path (`commit.rs`); the checkpoint
//! rule and the checkpoint commit (`checkpoint.rs`); recovery at open and the read-only check
//! (`recovery.rs`, with the metadata it reads in `meta.rs`); applying a mutation to its table
//! (`apply.rs`; the table ids are listed with the tables in `tables.rs`). The file is reached through a redb
//! [`StorageBackend`], so the reliability harness can put a fault-injecting disk under it as it
//! does under the store.
//!
//! The WebAssembly build keeps no journal ([`Engine::wal`](crate::engine::Engine::wal) is
//! `None` there), so the compiler leaves this code out of the `.wasm`; it still compiles there.
#![cfg_attr(target_arch = "wasm32", allow(dead_code))]

pub(crate) mod apply;
pub(crate) mod aside;
pub(crate) mod checkpoint;
pub(crate) mod commit;
pub(crate) mod file;
pub(crate) mod files;
pub(crate) mod format;
pub(crate) mod meta;
pub(crate) mod recovery;
pub(crate) mod report;

#[cfg(all(test, feature = "workflow"))]
mod commit_tests;

pub(crate) use file::{Header, Journal, ScanEnd, scan};
pub(crate) use format::Mutation;

/// Default journal size: 8 MiB, preallocated (a checkpoint happens when half of it is used).
pub const DEFAULT_JOURNAL_BYTES: u64 = 8 * 1024 * 1024;

/// A journal failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// The storage below failed.
    #[error("journal I/O: {0}")]
    Io(#[from] std::io::Error),
    /// A complete, checksummed record does not parse (never the result of a crash).
    #[error("journal record {seq} is malformed")]
    Malformed {
        /// Its sequence number.
        seq: u64,
    },
    /// A batch does not fit in the space left before the next checkpoint.
    #[error("journal is full ({needed} bytes needed, {left} left): checkpoint first")]
    Full {
        /// Bytes the record needs.
        needed: u64,
        /// Bytes left.
        left: u64,
    },
}
