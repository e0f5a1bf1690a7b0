//! The crash sweep: every operation index of every workload × damage seeds (crash, plus one
//! fail-once and one fail-forever per index), then random crash points on top.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use idemdb::Durability;

use crate::fault::{FaultKind, FaultPlan};
use crate::rng::{Rng, mix};
use crate::workload::{Counts, Injection, Scenario, Workload, probe_ops, run};

/// How big a sweep is.
#[derive(Debug, Clone)]
pub struct SweepConfig {
    /// Scenarios swept (workload × durability × client).
    pub scenarios: Vec<Scenario>,
    /// Crash damage seeds per operation index (at least 20 for the targets).
    pub seeds_per_point: u64,
    /// Random crash points added after the exhaustive part.
    pub random_points: u64,
    /// Worker threads.
    pub threads: usize,
    /// Seed of the random part.
    pub seed: u64,
}

impl SweepConfig {
    /// Every workload, in both durability modes and journaled, with the correct client.
    pub fn all_scenarios() -> Vec<Scenario> {
        let mut out = Vec::new();
        for durability in [Durability::Immediate, Durability::Eventual] {
            for workload in Workload::ALL {
                out.push(Scenario::new(workload, durability));
            }
        }
        out.extend(Workload::ALL.map(Scenario::journaled));
        out
    }
}

/// What a sweep found.
#[derive(Debug, Clone, Default)]
pub struct SweepReport {
    /// Fault points tried (each is one run).
    pub points: u64,
    /// Of which exhaustive (every index × seeds).
    pub exhaustive_points: u64,
    /// Per scenario: its operation count and what its runs found.
    pub per_scenario: Vec<(Scenario, u64, Counts)>,
    /// Everything added up.
    pub total: Counts,
}

/// The fault of exhaustive point `k` at operation `at` (1-based): `seeds` crashes with
/// different damage and 0–2 further crashes during recovery, then one fail-once, then one
/// fail-forever.
fn exhaustive_injection(scenario_index: usize, at: u64, k: u64, seeds: u64) -> Injection {
    let kind = if k < seeds {
        FaultKind::Crash
    } else if k == seeds {
        FaultKind::FailOnce
    } else {
        FaultKind::FailForever
    };
    Injection {
        plan: Some(FaultPlan { at, kind }),
        damage_seed: mix(&[scenario_index as u64, at, k]),
        recovery_crashes: u32::try_from(k % 3).unwrap_or(0),
    }
}

fn random_injection(rng: &mut Rng, ops: u64) -> Injection {
    let kind = match rng.below(10) {
        0 => FaultKind::FailOnce,
        1 => FaultKind::FailForever,
        _ => FaultKind::Crash,
    };
    Injection {
        plan: Some(FaultPlan { at: 1 + rng.below(ops.max(1)), kind }),
        damage_seed: rng.next_u64(),
        recovery_crashes: u32::try_from(rng.below(3)).unwrap_or(0),
    }
}

/// Runs the sweep on `config.threads` threads.
pub fn sweep(config: &SweepConfig) -> SweepReport {
    let ops: Vec<u64> = config.scenarios.iter().map(|s| probe_ops(*s)).collect();
    let per_point = config.seeds_per_point + 2;
    // Exhaustive jobs are laid out scenario by scenario, index by index.
    let mut offsets = Vec::with_capacity(ops.len() + 1);
    let mut total = 0u64;
    for n in &ops {
        offsets.push(total);
        total += n * per_point;
    }
    offsets.push(total);
    let exhaustive = total;
    let jobs = exhaustive + config.random_points;
    let next = AtomicU64::new(0);
    let results: Mutex<Vec<Counts>> = Mutex::new(vec![Counts::default(); config.scenarios.len()]);
    const CHUNK: u64 = 64;
    std::thread::scope(|scope| {
        for _ in 0..config.threads.max(1) {
            scope.spawn(|| {
                let mut local = vec![Counts::default(); config.scenarios.len()];
                loop {
                    let start = next.fetch_add(CHUNK, Ordering::Relaxed);
                    if start >= jobs {
                        break;
                    }
                    for job in start..(start + CHUNK).min(jobs) {
                        let (index, injection) = if job < exhaustive {
                            let index = offsets.partition_point(|o| *o <= job) - 1;
                            let within = job - offsets[index];
                            let at = within / per_point + 1;
                            (index, exhaustive_injection(index, at, within % per_point, config.seeds_per_point))
                        } else {
                            let mut rng = Rng::new(mix(&[config.seed, job]));
                            let index = usize::try_from(rng.below(config.scenarios.len() as u64)).unwrap_or(0);
                            // A little past the script's end too: faults in the final shutdown.
                            (index, random_injection(&mut rng, ops[index] + ops[index] / 8 + 1))
                        };
                        let counts = run(config.scenarios[index], &injection);
                        local[index].add(&counts);
                    }
                }
                let mut results = results.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                for (total, local) in results.iter_mut().zip(&local) {
                    total.add(local);
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut report = SweepReport { points: jobs, exhaustive_points: exhaustive, ..SweepReport::default() };
    for ((scenario, n), counts) in config.scenarios.iter().zip(&ops).zip(results) {
        report.total.add(&counts);
        report.per_scenario.push((*scenario, *n, counts));
    }
    report
}
