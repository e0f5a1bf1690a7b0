//! The lines of an `idemdb export`, read and checked by one piece of code for both imports
//! (into a store file, into PostgreSQL) before anything is written.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use idemdb::{Policy, Record, ScopedKey};

use crate::error::CliError;
use crate::view::RecordView;

/// Reads and checks every line before anything is written: each must parse, describe a record
/// the engine could have written ([`Record::validate`], the rules the store itself applies),
/// and name a key no earlier line named.
pub(crate) fn read_input(input: &Path) -> Result<Vec<(ScopedKey, Record, bool)>, CliError> {
    let reader: Box<dyn Read> = if input == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(File::open(input).map_err(|error| CliError::runtime_ctx(input, "cannot read the input", &error))?)
    };
    let mut records = Vec::new();
    let mut first_line: HashMap<Vec<u8>, usize> = HashMap::new();
    // `import` opens the store with the default policies: the same limit the store enforces.
    let limit = Policy::default().max_result_bytes();
    for (index, line) in BufReader::new(reader).lines().enumerate() {
        let number = index + 1;
        let line = line.map_err(|error| CliError::runtime_ctx(input, &format!("line {number}"), &error))?;
        if line.trim().is_empty() {
            continue;
        }
        let view: RecordView = serde_json::from_str(&line)
            .map_err(|error| CliError::runtime_ctx(input, &format!("line {number}"), &error))?;
        let refuse = |message: String| CliError::runtime_msg(Some(input), format!("line {number}: {message}"));
        let record = view.to_record().map_err(refuse)?;
        record.1.validate(limit).map_err(|error| refuse(format!("not a record the engine writes: {error}")))?;
        if let Some(first) = first_line.insert(record.0.encode(), number) {
            return Err(refuse(format!("the key appears more than once (first on line {first})")));
        }
        records.push(record);
    }
    Ok(records)
}
