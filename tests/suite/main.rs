//! The integration suite: one binary for every cross-crate test (faster builds on 2 cores).

mod audit;
mod bad_input;
mod clock;
mod decision_table;
mod golden;
mod journal;
mod journal_files;
mod journal_owners;
mod model;
mod rebuild;
mod seed;
mod workflow;
