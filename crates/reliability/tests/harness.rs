//! Tests of the harness itself.
use idemdb_reliability::sweep::{sweep, SweepConfig};

#[test]
fn probe() {
    let t = std::time::Instant::now();
    let r = sweep(&SweepConfig { scenarios: SweepConfig::all_scenarios(), seeds_per_point: 4, random_points: 2000, threads: 2, seed: 1 });
    println!("{} points in {:?}", r.points, t.elapsed());
    for (s, n, c) in &r.per_scenario { println!("{:?}/{:?} {n} lost {} rb {} dbl {} reopen {} integ {} unexp {} verified {} cuts {} \n   {:?}", s.workload, s.durability, c.lost, c.rolled_back, c.double, c.reopen_failures, c.integrity_failures, c.unexpected, c.completions_verified, c.power_cuts, c.notes.iter().take(3).collect::<Vec<_>>()); }
}
