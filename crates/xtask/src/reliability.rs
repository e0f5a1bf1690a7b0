//! `cargo xtask reliability`: every section in order, then the table of targets.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use idemdb_reliability::clock_faults::{ClockFaultConfig, ClockFaultReport, run_clock_faults};
use idemdb_reliability::concurrent::run_concurrent;
use idemdb_reliability::kill::{KillConfig, KillReport, run_kills};
use idemdb_reliability::live_backup::{LiveBackupConfig, LiveBackupReport, run_live_backups};
use idemdb_reliability::operators::{OperatorConfig, OperatorReport, run_operators};
use idemdb_reliability::outbox::{OutboxSweepConfig, OutboxSweepReport, outbox_sweep};
use idemdb_reliability::races::{RaceConfig, RaceReport, run_races};
use idemdb_reliability::sweep::{SweepConfig, sweep};
use idemdb_reliability::workload::{Counts, probe_ops};

use crate::bad_inputs::bad_inputs;
use crate::binaries::{build_child, build_cli, build_payments};
use crate::fuzz::run_fuzz;
use crate::self_check::self_check;
use crate::size::{FULL, HTTP_KEYS_PER_ROUND, QUICK, SECTIONS, Size, parse_u64, selected_sections, threads};
use crate::table::{Row, group, print_notes, row};

pub(crate) fn reliability(args: &[String]) -> Result<bool, String> {
    let mut run = Run::new(args)?;
    let started = Instant::now();
    println!("idemdb reliability run: {} (seed {:#x}, {} threads{})", run.size.name, run.seed, threads(), run.only());
    let mut r = Reports::default();
    let child =
        if run.runs("kill") || run.runs("operators") || run.runs("backup") { Some(build_child()?) } else { None };
    storage_sections(&mut run, &mut r, child.as_ref())?;
    service_sections(&mut run, &mut r)?;
    fault_sections(&mut run, &mut r)?;
    operator_sections(&mut run, &mut r, child.as_ref())?;
    check_sections(&mut run, &mut r)?;
    journal_sections(&mut run, &mut r)?;
    let mut rows = promise_rows(&run, &r);
    rows.extend(engine_rows(&run, &r));
    rows.extend(harness_rows(&run, &r));
    Ok(print_table(&run, &rows, started))
}

/// What the run was asked for, and how long each section took.
struct Run<'a> {
    size: &'static Size,
    seed: u64,
    args: &'a [String],
    sections: Vec<&'static str>,
    fuzz_seconds: u64,
    fuzz: bool,
    timings: Vec<(&'static str, Duration)>,
}

impl<'a> Run<'a> {
    fn new(args: &'a [String]) -> Result<Self, String> {
        let size = if args.iter().any(|a| a == "--full") { &FULL } else { &QUICK };
        let seed = parse_u64(args, "--seed")?.unwrap_or(0x001d_e3db);
        let fuzz_seconds = parse_u64(args, "--fuzz-seconds")?.unwrap_or(size.fuzz_seconds);
        let sections = selected_sections(args)?;
        let fuzz = sections.contains(&"fuzz") && !args.iter().any(|a| a == "--no-fuzz");
        Ok(Run { size, seed, args, sections, fuzz_seconds, fuzz, timings: Vec::new() })
    }

    /// Whether `section` runs.
    fn runs(&self, section: &str) -> bool {
        self.sections.contains(&section)
    }

    /// ", only a, b" when not every section runs.
    fn only(&self) -> String {
        if self.sections.len() < SECTIONS.len() {
            format!(", only {}", self.sections.join(", "))
        } else {
            String::new()
        }
    }
}

/// Every section's report (a section that did not run leaves its default).
#[derive(Default)]
struct Reports {
    crash: idemdb_reliability::sweep::SweepReport,
    concurrent: Counts,
    kills: KillReport,
    http: idemdb_reliability::http_flow::HttpFlowReport,
    http_runs: u64,
    edges: idemdb_reliability::http_edges::HttpEdgesReport,
    edge_keys: u64,
    races: RaceReport,
    clock: ClockFaultReport,
    outbox: OutboxSweepReport,
    operators: OperatorReport,
    backups: LiveBackupReport,
    /// Bad inputs refused with a typed error, and tried.
    bad: (u64, u64),
    bites: Vec<(&'static str, Counts)>,
    bites_caught: u64,
    fuzz_execs: u64,
    fuzz_crashes: u64,
    fuzz_min: u64,
    damage: idemdb_reliability::journal_damage::DamageReport,
    aliases: idemdb_reliability::journal_aliases::AliasReport,
    replace: idemdb_reliability::journal_replace::ReplaceReport,
    sequences: idemdb_reliability::operator_sequences::SequenceReport,
    atomicity: idemdb_reliability::batch_atomicity::AtomicityReport,
    audit: idemdb_reliability::audit_durability::AuditDurabilityReport,
}

/// The store under crashes: the crash sweep, crash points in shared commits, `kill -9`.
fn storage_sections(run: &mut Run<'_>, r: &mut Reports, child: Option<&PathBuf>) -> Result<(), String> {
    let (size, seed) = (run.size, run.seed);
    // 1. Crash sweep.
    let mut crash = idemdb_reliability::sweep::SweepReport::default();
    if run.runs("sweep") {
        let t = Instant::now();
        let scenarios = SweepConfig::all_scenarios();
        let exhaustive: u64 = scenarios.iter().map(|s| probe_ops(*s) * (size.seeds_per_point + 2)).sum();
        let random_points = size.crash_points.saturating_sub(exhaustive);
        crash = sweep(&SweepConfig {
            scenarios,
            seeds_per_point: size.seeds_per_point,
            random_points,
            threads: threads(),
            seed,
        });
        run.timings.push(("crash sweep", t.elapsed()));
        println!(
            "  crash sweep: {} points ({} exhaustive, {} random) in {:.1?}",
            group(crash.points),
            group(crash.exhaustive_points),
            group(random_points),
            t.elapsed()
        );
        for (scenario, ops, counts) in &crash.per_scenario {
            println!(
                "    {:<10} {:<9} {:>4} ops  {:>8} runs  verified {:>9}  rolled back {:>7}  lost {} double {} reopen-fail {} integrity {} protocol {}",
                scenario.workload.name(),
                scenario.mode(),
                ops,
                group(counts.runs),
                group(counts.completions_verified),
                group(counts.rolled_back),
                counts.lost,
                counts.double,
                counts.reopen_failures,
                counts.integrity_failures,
                counts.unexpected
            );
        }
        print_notes("crash sweep", &crash.total.notes);
    }

    // 1b. Crash points inside shared group commits.
    let mut concurrent = Counts::default();
    if run.runs("concurrent") {
        let t = Instant::now();
        concurrent = run_concurrent(size.concurrent_points, seed);
        run.timings.push(("concurrent crash points", t.elapsed()));
        println!(
            "  concurrent crash points: {} ({} faults fired, {} outcomes verified) in {:.1?}",
            group(concurrent.runs),
            group(concurrent.faults_fired),
            group(concurrent.completions_verified),
            t.elapsed()
        );
        print_notes("concurrent", &concurrent.notes);
    }

    // 2. Kill -9.
    let mut kills = KillReport::default();
    if let (true, Some(child)) = (run.runs("kill"), child) {
        let t = Instant::now();
        kills = run_kills(&KillConfig {
            child: child.clone(),
            kills: size.kills,
            kills_per_file: 10,
            intents_per_child: 8,
            seed,
            dir: None,
        })
        .map_err(|e| format!("kill test: {e}"))?;
        run.timings.push(("kill -9", t.elapsed()));
        println!(
            "  kill -9: {} kills ({} before the store was open, {} of them while the file was being created; {} files), {} completions reported, in {:.1?}",
            group(kills.kills),
            group(kills.kills_before_open),
            group(kills.kills_during_creation),
            kills.files,
            group(kills.completions_reported),
            t.elapsed()
        );
        print_notes("kill -9", &kills.notes);
    }

    r.crash = crash;
    r.concurrent = concurrent;
    r.kills = kills;
    Ok(())
}

/// The payments service over HTTP: the flow under kills, and its edges.
fn service_sections(run: &mut Run<'_>, r: &mut Reports) -> Result<(), String> {
    let (size, seed) = (run.size, run.seed);
    // 2b. The HTTP flow: the payments service killed and hung up on.
    let mut http = idemdb_reliability::http_flow::HttpFlowReport::default();
    let http_runs = size.http_rounds * HTTP_KEYS_PER_ROUND;
    if run.runs("http") {
        let t = Instant::now();
        let service = build_payments()?;
        http = idemdb_reliability::http_flow::run(&idemdb_reliability::http_flow::HttpFlowConfig {
            service,
            rounds: size.http_rounds,
            keys_per_round: HTTP_KEYS_PER_ROUND,
            seed,
            store_args: Vec::new(),
        })
        .map_err(|e| format!("http flow: {e}"))?;
        run.timings.push(("http flow", t.elapsed()));
        println!(
            "  http flow: {} runs, {} kills, every final answer within {} ms of its round; clients: {} waited, {} cut their request, {} hung up after sending, {} cut the answer; {} acknowledged; retries: {} replayed, {} ran fresh, {} waits; unresolved {} double {} lost {} unexpected {} in {:.1?}",
            group(http.runs),
            http.kills,
            http.slowest_final_ms,
            http.waited,
            http.cut_requests,
            http.hung_up,
            http.cut_answers,
            http.acknowledged,
            http.replayed_on_retry,
            http.fresh_on_retry,
            http.waits,
            http.unresolved,
            http.double,
            http.lost,
            http.unexpected,
            t.elapsed()
        );
        print_notes("http flow", &http.notes);
    }

    // 2c. The HTTP edges: a slow provider, doubles, operators racing the dispatcher, SIGTERM.
    let mut edges = idemdb_reliability::http_edges::HttpEdgesReport::default();
    let mut edge_keys = 0;
    if run.runs("http-edges") {
        let t = Instant::now();
        let config =
            idemdb_reliability::http_edges::HttpEdgesConfig::scaled(build_payments()?, seed, size.http_edges_scale);
        edge_keys = config.keys();
        edges = idemdb_reliability::http_edges::run(&config).map_err(|e| format!("http edges: {e}"))?;
        run.timings.push(("http edges", t.elapsed()));
        println!(
            "  http edges: {} keys, {} payment requests, {} provider calls counted, {} charges, {} payments; unresolved {} double {} disagreements {} inconsistent {} unexpected {} over the call bound {} unclean exits {} in {:.1?}",
            group(edges.keys),
            group(edges.requests()),
            group(edges.calls()),
            group(edges.charges()),
            group(edges.payments()),
            edges.unresolved,
            edges.double,
            edges.disagreements,
            edges.inconsistent,
            edges.unexpected,
            edges.slow.over_bound,
            edges.sigterm.unclean,
            t.elapsed()
        );
        for line in edges.lines() {
            println!("    {line}");
        }
        print_notes("http edges", &edges.notes);
        println!("  http edges: {}", if edges.clean() && edges.keys >= edge_keys { "PASS" } else { "FAIL" });
    }

    r.http = http;
    r.http_runs = http_runs;
    r.edges = edges;
    r.edge_keys = edge_keys;
    Ok(())
}

/// Races, clock faults and the outbox flow's crash points.
fn fault_sections(run: &mut Run<'_>, r: &mut Reports) -> Result<(), String> {
    let (size, seed) = (run.size, run.seed);
    // 3. Races.
    let mut races = RaceReport::default();
    if run.runs("races") {
        let t = Instant::now();
        races = run_races(&RaceConfig { attempts: size.races, threads: 8, keys: 16, file_every: 16, seed })
            .map_err(|e| format!("races: {e}"))?;
        run.timings.push(("races", t.elapsed()));
        println!(
            "  races: {} attempts in {} rounds ({} on files) in {:.1?}",
            group(races.attempts),
            group(races.rounds),
            races.file_rounds,
            t.elapsed()
        );
        print_notes("races", &races.notes);
    }

    // 3b. Clock faults.
    let mut clock = ClockFaultReport::default();
    if run.runs("clock") {
        let t = Instant::now();
        clock = run_clock_faults(&ClockFaultConfig {
            scenarios: size.clock_scenarios,
            threads: threads(),
            seed,
            wall_clock_only: false,
        });
        run.timings.push(("clock faults", t.elapsed()));
        println!(
            "  clock faults: {} scenarios, {} calls, {} jumps forward and {} back ({} put right), {} clean and {} killed reopens, {} completions, {} retries within retention, largest stamp lag {} ms, in {:.1?}",
            group(clock.scenarios),
            group(clock.calls),
            group(clock.jumps_forward),
            group(clock.jumps_back),
            group(clock.corrections),
            group(clock.reopens_clean),
            group(clock.reopens_killed),
            group(clock.completions),
            group(clock.retries_within_retention),
            group(clock.max_stamp_lag_ms),
            t.elapsed()
        );
        print_notes("clock faults", &clock.notes);
    }

    // 3b'. Crash points of the outbox flow.
    let mut outbox = OutboxSweepReport::default();
    if run.runs("outbox") {
        let t = Instant::now();
        // Each seed sweeps every operation index of its run: enough seeds for the size.
        let per_seed = idemdb_reliability::outbox::probe(seed).max(1);
        let seeds = size.outbox_points.div_ceil(per_seed) + 1;
        outbox = outbox_sweep(&OutboxSweepConfig { seeds, seed, threads: threads() });
        run.timings.push(("outbox crash points", t.elapsed()));
        println!(
            "  outbox crash points: {} ({} crashed), {} provider effects, {} resolved by a provider query, {} provider keys with two effects, {} unsettled intents, in {:.1?}",
            group(outbox.crash_points),
            group(outbox.crashes),
            group(outbox.effects),
            group(outbox.reconciled),
            outbox.double_effects,
            outbox.unresolved,
            t.elapsed()
        );
        print_notes("outbox", &outbox.notes);
    }

    r.races = races;
    r.clock = clock;
    r.outbox = outbox;
    Ok(())
}

/// Operators and live backups beside a writer.
fn operator_sections(run: &mut Run<'_>, r: &mut Reports, child: Option<&PathBuf>) -> Result<(), String> {
    let (size, seed) = (run.size, run.seed);
    // 3c. Operators beside a writer.
    let mut operators = OperatorReport::default();
    if let (true, Some(child)) = (run.runs("operators"), child) {
        let t = Instant::now();
        let cli = build_cli()?;
        operators = run_operators(&OperatorConfig {
            child: child.clone(),
            cli,
            races: size.operator_races,
            intents_per_race: 4,
            races_per_file: 25,
            seed,
            dir: None,
        })
        .map_err(|e| format!("operators: {e}"))?;
        run.timings.push(("operators", t.elapsed()));
        let kinds: Vec<String> = operators.commands.iter().map(|(kind, n)| format!("{kind} {}", group(*n))).collect();
        println!(
            "  operators beside a writer: {} races ({} files), {} commands ({}; {} done, {} refused while the store was open, {} killed), {} writers killed, {} completions reported, {} verified, {} imported records verified, in {:.1?}",
            group(operators.races),
            operators.files,
            group(operators.commands_run()),
            kinds.join(", "),
            group(operators.commands_done),
            group(operators.commands_refused),
            group(operators.operators_killed),
            group(operators.writers_killed),
            group(operators.completions_reported),
            group(operators.completions_verified),
            group(operators.imports_verified),
            t.elapsed()
        );
        print_notes("operators", &operators.notes);
    }

    let mut backups = LiveBackupReport::default();
    if let (true, Some(child)) = (run.runs("backup"), child) {
        let (t, config) = (
            Instant::now(),
            LiveBackupConfig {
                child: child.clone(),
                backups: size.backups,
                backups_per_child: 4,
                children_per_file: 8,
                seed,
            },
        );
        backups = run_live_backups(&config).map_err(|e| format!("live backup: {e}"))?;
        run.timings.push(("live backup", t.elapsed()));
        println!("  live backup: {}, in {:.1?}", backups.summary(), t.elapsed());
        print_notes("live backup", &backups.notes);
    }

    r.operators = operators;
    r.backups = backups;
    Ok(())
}

/// Bad inputs, the harness biting, fuzzing.
fn check_sections(run: &mut Run<'_>, r: &mut Reports) -> Result<(), String> {
    let (size, seed, fuzz_seconds, fuzz) = (run.size, run.seed, run.fuzz_seconds, run.fuzz);
    // 4. Bad inputs (mutated seeds through the fuzz target bodies, in process).
    let mut bad = (0, 0);
    if run.runs("bad-inputs") {
        let t = Instant::now();
        bad = bad_inputs(size.bad_inputs, seed)?;
        run.timings.push(("bad inputs", t.elapsed()));
        println!(
            "  bad inputs: {} refused with a typed error (of {} tried) in {:.1?}",
            group(bad.0),
            group(bad.1),
            t.elapsed()
        );
    }

    // 5. The harness bites: broken adapters must be caught.
    let mut bites = Vec::new();
    if run.runs("self-check") {
        let t = Instant::now();
        bites = self_check(seed);
        run.timings.push(("self-check", t.elapsed()));
        for (name, counts) in &bites {
            println!(
                "  self-check, broken {name}: lost {} double {} reopen-fail {}",
                counts.lost, counts.double, counts.reopen_failures
            );
        }
    }
    let bites_caught = bites.iter().filter(|(_, c)| c.lost + c.double > 0).count() as u64;

    // 6. Fuzzing.
    let mut fuzz_execs = 0u64;
    let mut fuzz_crashes = 0u64;
    let mut fuzz_min = u64::MAX;
    if fuzz {
        let t = Instant::now();
        let results = run_fuzz(fuzz_seconds)?;
        run.timings.push(("fuzz (build + run)", t.elapsed()));
        for (target, execs, crashed) in &results {
            println!(
                "  fuzz {target}: {} executions in {fuzz_seconds} s{}",
                group(*execs),
                if *crashed { ", CRASHED (see fuzz/artifacts)" } else { "" }
            );
            fuzz_execs += execs;
            fuzz_min = fuzz_min.min(*execs);
            fuzz_crashes += u64::from(*crashed);
        }
    }

    r.bad = bad;
    r.bites = bites;
    r.bites_caught = bites_caught;
    r.fuzz_execs = fuzz_execs;
    r.fuzz_crashes = fuzz_crashes;
    r.fuzz_min = fuzz_min;
    Ok(())
}

/// The journal's files and operators, and the transaction contract.
fn journal_sections(run: &mut Run<'_>, r: &mut Reports) -> Result<(), String> {
    let (size, seed, args) = (run.size, run.seed, run.args);
    // 3c. Journal damage across generations.
    let mut damage = idemdb_reliability::journal_damage::DamageReport::default();
    if run.runs("journal-damage") {
        let t = Instant::now();
        damage = idemdb_reliability::journal_damage::run(size.journal_damage, seed, threads());
        run.timings.push(("journal damage", t.elapsed()));
        println!(
            "  journal damage: {} scenarios ({} damaged journals recovered a prefix, {} refused with a typed error), {} later acknowledgements verified, {} stale, {} lost, {} not a prefix, {} unopenable, in {:.1?}",
            group(damage.scenarios),
            group(damage.recovered),
            group(damage.refused),
            group(damage.verified),
            damage.stale,
            damage.lost,
            damage.not_prefix,
            damage.unopenable,
            t.elapsed()
        );
        print_notes("journal damage", &damage.notes);
    }

    // 3d. Aliases and twins of a journaled store file.
    let mut aliases = idemdb_reliability::journal_aliases::AliasReport::default();
    if run.runs("journal-aliases") {
        let t = Instant::now();
        let child = build_child()?;
        aliases = idemdb_reliability::journal_aliases::run(&child, size.journal_aliases, seed);
        run.timings.push(("journal aliases", t.elapsed()));
        println!(
            "  journal aliases: {} scenarios (symlink {}, hard link {}, rename {}, copy {}, swapped journals {}), {} acknowledged completions verified, {} typed refusals of a journal not its own, {} lost, {} foreign applied, {} failures, in {:.1?}",
            group(aliases.total()),
            group(aliases.scenarios[0]),
            group(aliases.scenarios[1]),
            group(aliases.scenarios[2]),
            group(aliases.scenarios[3]),
            group(aliases.scenarios[4]),
            group(aliases.verified),
            group(aliases.refused),
            aliases.lost,
            aliases.foreign_applied,
            aliases.failures,
            t.elapsed()
        );
        print_notes("journal aliases", &aliases.notes);
    }

    // 3e. Rebuilds replacing the file beside a writer, with the window widened.
    let mut replace = idemdb_reliability::journal_replace::ReplaceReport::default();
    if run.runs("journal-replace") {
        let t = Instant::now();
        let child = build_child()?;
        replace = idemdb_reliability::journal_replace::run(&child, size.journal_replace, seed);
        run.timings.push(("journal replace", t.elapsed()));
        println!(
            "  journal replace: {} races, {} rebuilds (window widened by up to 5 ms), {} acknowledged completions verified, {} lost, {} failures, in {:.1?}",
            group(replace.races),
            group(replace.rebuilds),
            group(replace.checks.verified),
            replace.checks.lost,
            replace.checks.failures,
            t.elapsed()
        );
        print_notes("journal replace", &replace.checks.notes);
    }

    // 3f. Operator sequences beside a journaling writer.
    let mut sequences = idemdb_reliability::operator_sequences::SequenceReport::default();
    if run.runs("operator-sequences") {
        let t = Instant::now();
        sequences = crate::sequences::operator_sequences(size, seed, args)?;
        run.timings.push(("operator sequences", t.elapsed()));
    }

    // 3g. The transaction contract: failed calls in shared batches, audit events across kill -9.
    let mut atomicity = idemdb_reliability::batch_atomicity::AtomicityReport::default();
    if run.runs("batch-atomicity") {
        let t = Instant::now();
        atomicity = crate::contract::batch_atomicity(size, seed);
        run.timings.push(("batch atomicity", t.elapsed()));
    }
    let mut audit = idemdb_reliability::audit_durability::AuditDurabilityReport::default();
    if run.runs("audit-durability") {
        let t = Instant::now();
        audit = crate::contract::audit_durability(size, seed)?;
        run.timings.push(("audit durability", t.elapsed()));
    }

    r.damage = damage;
    r.aliases = aliases;
    r.replace = replace;
    r.sequences = sequences;
    r.atomicity = atomicity;
    r.audit = audit;
    Ok(())
}

/// The promises' rows: what was lost, doubled or left unopenable, and the services' rows.
fn promise_rows(run: &Run<'_>, r: &Reports) -> Vec<Row> {
    let Reports { crash, concurrent, kills, http, edges, races, clock, outbox, operators, backups, .. } = r;
    let http_runs = r.http_runs;
    let edge_keys = r.edge_keys;
    let size = run.size;
    let lost = crash.total.lost + concurrent.lost + kills.lost + races.wrong_answers + operators.lost;
    let lost = lost + outbox.unresolved + backups.lost;
    let double = crash.total.double
        + concurrent.double
        + kills.double
        + races.double
        + clock.double
        + operators.double
        + outbox.double_effects;
    let unopenable = crash.total.reopen_failures
        + concurrent.reopen_failures
        + kills.unopenable
        + operators.unopenable
        + outbox.reopen_failures
        + backups.unopenable;
    let integrity = crash.total.integrity_failures
        + concurrent.integrity_failures
        + kills.integrity_failures
        + operators.integrity_failures
        + backups.integrity_failures;
    let protocol = crash.total.unexpected
        + concurrent.unexpected
        + kills.child_errors
        + races.unexpected
        + races.missing
        + clock.unexpected
        + operators.protocol_errors
        + backups.child_errors;
    let promises =
        ["sweep", "concurrent", "kill", "races", "clock", "operators", "backup", "outbox"].iter().any(|s| run.runs(s));
    let files = ["sweep", "concurrent", "kill", "operators", "backup", "outbox"].iter().any(|s| run.runs(s));
    let zero = |v: u64| Some(("0", v == 0));
    let at_least = |target: u64| format!(">= {}", group(target));
    let mut rows = Vec::new();
    let mut push = |ran: bool, row: Row| {
        if ran {
            rows.push(row);
        }
    };
    push(
        run.runs("sweep"),
        row(
            "crash points tried",
            crash.points,
            Some((&at_least(size.crash_points), crash.points >= size.crash_points)),
        ),
    );
    push(promises, row("lost completions", lost, zero(lost)));
    push(promises, row("double effects", double, zero(double)));
    push(files, row("reopen failures", unopenable, zero(unopenable)));
    push(files, row("integrity failures", integrity, zero(integrity)));
    push(promises, row("protocol errors", protocol, zero(protocol)));
    push(run.runs("kill"), row("kills", kills.kills, Some((&at_least(size.kills), kills.kills >= size.kills))));
    push(run.runs("http"), row("HTTP flow runs", http.runs, Some((&at_least(http_runs), http.runs >= http_runs))));
    push(run.runs("http"), row("HTTP keys left without answer", http.unresolved, zero(http.unresolved)));
    push(run.runs("http"), row("HTTP double effects", http.double, zero(http.double)));
    push(run.runs("http"), row("HTTP acknowledged answers lost", http.lost, zero(http.lost)));
    push(run.runs("http"), row("HTTP unexpected answers", http.unexpected, zero(http.unexpected)));
    push(
        run.runs("http-edges"),
        row("HTTP edge keys", edges.keys, Some((&at_least(edge_keys), edge_keys > 0 && edges.keys >= edge_keys))),
    );
    push(run.runs("http-edges"), row("HTTP edge keys without answer", edges.unresolved, zero(edges.unresolved)));
    push(run.runs("http-edges"), row("HTTP edge double effects", edges.double, zero(edges.double)));
    push(run.runs("http-edges"), row("HTTP edge disagreements", edges.disagreements, zero(edges.disagreements)));
    push(run.runs("http-edges"), row("operator actions vs ledger", edges.inconsistent, zero(edges.inconsistent)));
    push(run.runs("http-edges"), row("HTTP edge unexpected answers", edges.unexpected, zero(edges.unexpected)));
    let over = edges.slow.over_bound;
    let bound = format!("0 (<= {} calls a key)", idemdb_reliability::http_edges::SLOW_CALL_BOUND);
    push(run.runs("http-edges"), row("slow provider, keys over bound", over, Some((&bound, over == 0))));
    push(
        run.runs("http-edges"),
        row("unclean exits after SIGTERM", edges.sigterm.unclean, zero(edges.sigterm.unclean)),
    );
    let charged_failed = edges.operators.charged_but_failed;
    push(run.runs("http-edges"), row("charged, answered failed", charged_failed, zero(charged_failed)));
    let backups_ok = backups.backups >= size.backups && backups.clean() && backups.completions_checked > 0;
    push(
        run.runs("backup"),
        row("live backups, complete and verified", backups.backups, Some((&at_least(size.backups), backups_ok))),
    );
    rows
}

/// The engine's rows: completions verified, races, clock faults, the outbox, journal damage.
fn engine_rows(run: &Run<'_>, r: &Reports) -> Vec<Row> {
    let Reports { crash, concurrent, kills, races, clock, outbox, damage, .. } = r;
    let size = run.size;
    let zero = |v: u64| Some(("0", v == 0));
    let at_least = |target: u64| format!(">= {}", group(target));
    let mut rows = Vec::new();
    let mut push = |ran: bool, row: Row| {
        if ran {
            rows.push(row);
        }
    };
    push(
        run.runs("sweep") || run.runs("kill"),
        row(
            "completions verified",
            crash.total.completions_verified + concurrent.completions_verified + kills.completions_verified,
            Some((
                "> 0",
                (!run.runs("sweep") || crash.total.completions_verified > 0)
                    && (!run.runs("kill") || kills.completions_verified > 0),
            )),
        ),
    );
    push(
        run.runs("races"),
        row("race attempts", races.attempts, Some((&at_least(size.races), races.attempts >= size.races))),
    );
    push(
        run.runs("clock"),
        row(
            "clock-fault scenarios",
            clock.scenarios,
            Some((&at_least(size.clock_scenarios), clock.scenarios >= size.clock_scenarios)),
        ),
    );
    push(run.runs("clock"), row("keys made unknown early", clock.acquired_early, zero(clock.acquired_early)));
    push(run.runs("clock"), row("leases revived", clock.leases_revived, zero(clock.leases_revived)));
    push(
        run.runs("clock"),
        row(
            "retries within retention",
            clock.retries_within_retention,
            Some(("> 0", clock.retries_within_retention > 0)),
        ),
    );
    push(
        run.runs("outbox"),
        row(
            "outbox crash points",
            outbox.crash_points,
            Some((&at_least(size.outbox_points), outbox.crash_points >= size.outbox_points)),
        ),
    );
    push(run.runs("outbox"), row("provider keys with two effects", outbox.double_effects, zero(outbox.double_effects)));
    push(
        run.runs("journal-damage"),
        row(
            "journal damage scenarios",
            damage.scenarios,
            Some((&at_least(size.journal_damage), damage.scenarios >= size.journal_damage)),
        ),
    );
    let damage_lost = damage.lost + damage.not_prefix;
    push(run.runs("journal-damage"), row("older records applied", damage.stale, zero(damage.stale)));
    push(run.runs("journal-damage"), row("lost after journal damage", damage_lost, zero(damage_lost)));
    push(run.runs("journal-damage"), row("unopenable after damage", damage.unopenable, zero(damage.unopenable)));
    push(run.runs("journal-damage"), row("damaged journals refused", damage.refused, None));
    rows
}

/// The journal files', operators' and harness's rows.
fn harness_rows(run: &Run<'_>, r: &Reports) -> Vec<Row> {
    let Reports {
        crash, concurrent, kills, operators, bad, bites, aliases, replace, sequences, atomicity, audit, ..
    } = r;
    let bites_caught = r.bites_caught;
    let fuzz_execs = r.fuzz_execs;
    let fuzz_crashes = r.fuzz_crashes;
    let fuzz_min = r.fuzz_min;
    let size = run.size;
    let fuzz = run.fuzz;
    let zero = |v: u64| Some(("0", v == 0));
    let at_least = |target: u64| format!(">= {}", group(target));
    let fuzz_target = format!("each target ran {} s, 0 crashes", run.fuzz_seconds);
    let mut rows = Vec::new();
    let mut push = |ran: bool, row: Row| {
        if ran {
            rows.push(row);
        }
    };
    push(
        run.runs("journal-aliases"),
        row(
            "alias and twin scenarios",
            aliases.total(),
            Some((&at_least(size.journal_aliases), aliases.total() >= size.journal_aliases)),
        ),
    );
    push(run.runs("journal-aliases"), row("lost through another name", aliases.lost, zero(aliases.lost)));
    push(
        run.runs("journal-aliases"),
        row("foreign records applied", aliases.foreign_applied, zero(aliases.foreign_applied)),
    );
    push(run.runs("journal-aliases"), row("alias scenario failures", aliases.failures, zero(aliases.failures)));
    push(
        run.runs("journal-replace"),
        row(
            "replace-beside-writer races",
            replace.races,
            Some((&at_least(size.journal_replace), replace.races >= size.journal_replace)),
        ),
    );
    let replace_bad = replace.checks.lost + replace.checks.failures;
    push(run.runs("journal-replace"), row("lost beside a replace", replace_bad, zero(replace_bad)));
    for sequence_row in crate::sequences::rows(sequences, size, at_least) {
        push(run.runs("operator-sequences"), sequence_row);
    }
    for contract_row in crate::contract::atomicity_rows(atomicity, size, at_least) {
        push(run.runs("batch-atomicity"), contract_row);
    }
    for contract_row in crate::contract::audit_rows(audit, size, at_least) {
        push(run.runs("audit-durability"), contract_row);
    }
    push(
        run.runs("operators"),
        row(
            "operator races",
            operators.races,
            Some((&at_least(size.operator_races), operators.races >= size.operator_races)),
        ),
    );
    push(
        run.runs("operators"),
        row(
            "operator completions verified",
            operators.completions_verified + operators.imports_verified,
            Some(("> 0", operators.completions_verified > 0 && operators.imports_verified > 0)),
        ),
    );
    push(
        fuzz || run.runs("fuzz"),
        row(
            "fuzz executions",
            fuzz_execs,
            if fuzz {
                Some((fuzz_target.as_str(), fuzz_crashes == 0 && fuzz_min > 0))
            } else {
                Some(("skipped (--no-fuzz)", false))
            },
        ),
    );
    push(
        run.runs("bad-inputs"),
        row("bad inputs tried", bad.1, Some((&at_least(size.bad_inputs), bad.1 >= size.bad_inputs))),
    );
    push(
        run.runs("concurrent"),
        row(
            "concurrent crash points",
            concurrent.runs,
            Some((&at_least(size.concurrent_points), concurrent.runs >= size.concurrent_points)),
        ),
    );
    push(run.runs("kill"), row("kills during store creation", kills.kills_during_creation, None));
    push(
        run.runs("sweep") || run.runs("concurrent"),
        row("power cuts simulated", crash.total.power_cuts + concurrent.power_cuts, None),
    );
    push(run.runs("sweep"), row("eventual-mode rollbacks", crash.total.rolled_back, None));
    push(run.runs("operators"), row("operator commands run", operators.commands_run(), None));
    push(
        run.runs("operators"),
        row("operator-side kills", operators.operators_killed + operators.writers_killed, None),
    );
    push(
        run.runs("self-check"),
        row(
            "broken adapters caught",
            bites_caught,
            Some((&format!("{} of {}", bites.len(), bites.len()), bites_caught == bites.len() as u64)),
        ),
    );
    rows
}

/// Prints the table, the time each section took and the missed rows; whether every row passed.
fn print_table(run: &Run<'_>, rows: &[Row], started: Instant) -> bool {
    let size = run.size;
    println!();
    println!("| {:<30} | {:>13} | {:<34} | {:<6} |", "row", "value", format!("target ({})", size.name), "status");
    println!("|{:-<32}|{:->15}|{:-<36}|{:-<8}|", "", "", "", "");
    let mut ok = true;
    for r in rows {
        let status = match r.pass {
            Some(true) => "PASS",
            Some(false) => {
                ok = false;
                "MISS"
            }
            None => "",
        };
        println!("| {:<30} | {:>13} | {:<34} | {:<6} |", r.name, group(r.value), r.target, status);
    }
    println!();
    let times: Vec<String> = run.timings.iter().map(|(name, d)| format!("{name} {:.0?}", d)).collect();
    println!("time: {} — total {:.0?}", times.join(", "), started.elapsed());
    // The rows that failed, once more on their own (a log cut short keeps its end).
    for r in rows.iter().filter(|r| r.pass == Some(false)) {
        println!("  MISS: {} = {} (target {})", r.name, group(r.value), r.target);
    }
    println!("{}", if ok { "RESULT: PASS" } else { "RESULT: FAIL" });
    ok
}
