//! The harness bites: small sweeps with deliberately broken clients and disks.

use idemdb::Durability;
use idemdb_reliability::clock_faults::{ClockFaultConfig, run_clock_faults};
use idemdb_reliability::sweep::{SweepConfig, sweep};
use idemdb_reliability::workload::{Adapter, Counts, Scenario, Workload};

use crate::size::threads;

/// Small sweeps with deliberately broken clients and disks: each must be reported with lost or
/// double effects, or the harness is not testing anything.
pub(crate) fn self_check(seed: u64) -> Vec<(&'static str, Counts)> {
    let cases = [
        ("client: completion without durability", Workload::Charge, Adapter::CompleteWithoutDurability),
        ("client: re-runs an in-progress attempt", Workload::Uncertain, Adapter::RerunInProgress),
        ("disk: sync that lies", Workload::Charge, Adapter::LyingDisk),
    ];
    cases
        .iter()
        .map(|(name, workload, adapter)| {
            let scenario =
                Scenario { workload: *workload, durability: Durability::Immediate, adapter: *adapter, journal: false };
            let report = sweep(&SweepConfig {
                scenarios: vec![scenario],
                seeds_per_point: 2,
                random_points: 0,
                threads: threads(),
                seed,
            });
            (*name, report.total)
        })
        .chain(std::iter::once({
            // A store that cannot measure elapsed time believes every wall-clock jump: keys
            // acquired within their retention count as lost completions here.
            let clock =
                run_clock_faults(&ClockFaultConfig { scenarios: 200, threads: threads(), seed, wall_clock_only: true });
            let counts =
                Counts { lost: clock.acquired_early, double: clock.double, runs: clock.scenarios, ..Counts::default() };
            ("clock: wall clock only, no monotonic reading", counts)
        }))
        .collect()
}
