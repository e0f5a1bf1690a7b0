//! The sizes of a run (quick, full), its sections, and the command line that picks them.

pub(crate) struct Size {
    pub(crate) name: &'static str,
    pub(crate) crash_points: u64,
    pub(crate) seeds_per_point: u64,
    pub(crate) kills: u64,
    pub(crate) races: u64,
    pub(crate) fuzz_seconds: u64,
    pub(crate) bad_inputs: u64,
    pub(crate) concurrent_points: u64,
    pub(crate) clock_scenarios: u64,
    pub(crate) operator_races: u64,
    pub(crate) outbox_points: u64,
    pub(crate) backups: u64,
    pub(crate) journal_damage: u64,
    pub(crate) journal_aliases: u64,
    pub(crate) journal_replace: u64,
    pub(crate) operator_sequences: u64,
    /// Rounds of concurrent calls that fail after writing (`batch-atomicity`).
    pub(crate) atomicity_rounds: u64,
    /// Children killed while deciding (`audit-durability`).
    pub(crate) audit_kills: u64,
    /// Rounds of the HTTP flow (40 keys each: a run per key).
    pub(crate) http_rounds: u64,
    /// The scale of the HTTP edges (`HttpEdgesConfig::scaled`; 1: 105 keys in ~40 s).
    pub(crate) http_edges_scale: u64,
}

pub(crate) const QUICK: Size = Size {
    name: "quick",
    crash_points: 50_000,
    seeds_per_point: 20,
    kills: 500,
    races: 100_000,
    fuzz_seconds: 10,
    bad_inputs: 100_000,
    concurrent_points: 2_000,
    clock_scenarios: 10_000,
    operator_races: 500,
    outbox_points: 10_000,
    backups: 36,
    journal_damage: 5_000,
    journal_aliases: 500,
    journal_replace: 500,
    operator_sequences: 500,
    atomicity_rounds: 20,
    audit_kills: 5,
    http_rounds: 25,
    http_edges_scale: 1,
};
pub(crate) const FULL: Size = Size {
    name: "full",
    crash_points: 1_000_000,
    seeds_per_point: 100,
    kills: 5_000,
    races: 1_000_000,
    fuzz_seconds: 600,
    bad_inputs: 2_000_000,
    concurrent_points: 50_000,
    clock_scenarios: 200_000,
    operator_races: 10_000,
    outbox_points: 200_000,
    backups: 1_000,
    journal_damage: 100_000,
    journal_aliases: 10_000,
    journal_replace: 10_000,
    operator_sequences: 10_000,
    atomicity_rounds: 500,
    audit_kills: 150,
    http_rounds: 500,
    http_edges_scale: 6,
};

/// The sections of a run, in the order they run.
pub(crate) const SECTIONS: [&str; 19] = [
    "sweep",
    "concurrent",
    "kill",
    "http",
    "http-edges",
    "races",
    "clock",
    "operators",
    "backup",
    "outbox",
    "journal-damage",
    "journal-aliases",
    "journal-replace",
    "operator-sequences",
    "batch-atomicity",
    "audit-durability",
    "bad-inputs",
    "self-check",
    "fuzz",
];

/// Keys per round of the HTTP flow.
pub(crate) const HTTP_KEYS_PER_ROUND: u64 = 40;

pub(crate) fn threads() -> usize {
    std::thread::available_parallelism().map_or(2, usize::from)
}

pub(crate) fn parse_u64(args: &[String], flag: &str) -> Result<Option<u64>, String> {
    match args.iter().position(|a| a == flag) {
        None => Ok(None),
        Some(i) => {
            args.get(i + 1).and_then(|v| v.parse().ok()).map(Some).ok_or_else(|| format!("{flag} needs a number"))
        }
    }
}

/// The sections `--only` names (every section without it).
pub(crate) fn selected_sections(args: &[String]) -> Result<Vec<&'static str>, String> {
    let Some(at) = args.iter().position(|a| a == "--only") else { return Ok(SECTIONS.to_vec()) };
    let list = args.get(at + 1).ok_or("--only needs a list of sections")?;
    let mut chosen = Vec::new();
    for name in list.split(',').map(str::trim).filter(|name| !name.is_empty()) {
        let section = SECTIONS
            .iter()
            .find(|section| **section == name)
            .ok_or_else(|| format!("unknown section `{name}`; the sections are {}", SECTIONS.join(", ")))?;
        chosen.push(*section);
    }
    if chosen.is_empty() {
        return Err("--only needs at least one section".into());
    }
    Ok(chosen)
}
