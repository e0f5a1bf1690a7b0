//! The report: the rows of the final table, numbers grouped by thousands, and notes.

use thousands::Separable;

pub(crate) struct Row {
    pub(crate) name: &'static str,
    pub(crate) value: u64,
    pub(crate) target: String,
    pub(crate) pass: Option<bool>,
}

pub(crate) fn row(name: &'static str, value: u64, target: Option<(&str, bool)>) -> Row {
    match target {
        Some((text, pass)) => Row { name, value, target: text.to_string(), pass: Some(pass) },
        None => Row { name, value, target: "(info)".into(), pass: None },
    }
}

pub(crate) fn group(n: u64) -> String {
    n.separate_with_commas()
}

pub(crate) fn print_notes(what: &str, notes: &[String]) {
    for note in notes.iter().take(6) {
        println!("    ! {what}: {note}");
    }
}
