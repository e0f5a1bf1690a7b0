//! The bad-input pass: mutated seed inputs through the bodies of the non-storage fuzz targets,
//! in process.

use idemdb_reliability::fuzzing;
use idemdb_reliability::rng::Rng;

use crate::binaries::workspace_root;

/// Mutations of the seed inputs (bit flips, cuts, insertions, random bytes) through the bodies
/// of the non-storage fuzz targets. Returns (refused, tried); a panic would abort the run.
pub(crate) fn bad_inputs(total: u64, seed: u64) -> Result<(u64, u64), String> {
    let root = workspace_root().join("fuzz/seeds");
    let targets: Vec<(&str, fuzzing::Target)> = fuzzing::TARGETS
        .into_iter()
        .filter(|(name, _)| !matches!(*name, "ops" | "journal_records" | "journal_header"))
        .collect();
    let mut rng = Rng::new(seed ^ 0xbad);
    let (mut refused, mut tried) = (0u64, 0u64);
    let per_target = total.div_ceil(targets.len() as u64);
    for (name, target) in targets {
        let mut seeds = Vec::new();
        for entry in std::fs::read_dir(root.join(name)).map_err(|e| format!("{name} seeds: {e}"))? {
            let path = entry.map_err(|e| e.to_string())?.path();
            seeds.push(std::fs::read(&path).map_err(|e| e.to_string())?);
        }
        if seeds.is_empty() {
            return Err(format!("no seeds for {name}"));
        }
        let mut done = 0;
        while done < per_target {
            let mut data = seeds[usize::try_from(rng.below(seeds.len() as u64)).unwrap_or(0)].clone();
            for _ in 0..1 + rng.below(4) {
                mutate(&mut data, &mut rng);
            }
            tried += 1;
            done += 1;
            if !target(&data) {
                refused += 1;
            }
        }
    }
    Ok((refused, tried))
}

fn mutate(data: &mut Vec<u8>, rng: &mut Rng) {
    let len = data.len() as u64;
    let at = |rng: &mut Rng| usize::try_from(rng.below(len.max(1))).unwrap_or(0);
    match rng.below(6) {
        0 if !data.is_empty() => {
            let i = at(rng);
            data[i] ^= 1 << rng.below(8);
        }
        1 if !data.is_empty() => data.truncate(at(rng)),
        2 => {
            let i = at(rng).min(data.len());
            data.insert(i, rng.next_u64() as u8);
        }
        3 if !data.is_empty() => {
            let i = at(rng);
            data.remove(i);
        }
        4 if !data.is_empty() => {
            let i = at(rng);
            data[i] =
                [0x00, 0xff, b'"', b'{', b'[', b'\\', b'.', b'e', b'-'][usize::try_from(rng.below(9)).unwrap_or(0)];
        }
        _ => {
            let i = at(rng).min(data.len());
            let junk: Vec<u8> = (0..rng.below(8)).map(|_| rng.next_u64() as u8).collect();
            data.splice(i..i, junk);
        }
    }
}
