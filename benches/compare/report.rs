//! The tables the run prints: targets with PASS/MISS, then the raw numbers.

use crate::measure::Summary;

/// How a target came out.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    Pass,
    Miss,
    /// No threshold: the number is reported.
    Report,
    /// Not measured in this build or run, with why.
    Skipped(String),
}

impl Verdict {
    pub(crate) fn of(pass: bool) -> Verdict {
        if pass { Verdict::Pass } else { Verdict::Miss }
    }

    fn text(&self) -> String {
        match self {
            Verdict::Pass => "PASS".into(),
            Verdict::Miss => "MISS".into(),
            Verdict::Report => "report".into(),
            Verdict::Skipped(why) => format!("skipped: {why}"),
        }
    }
}

/// One row of the targets table.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) name: String,
    pub(crate) measured: String,
    pub(crate) baseline: String,
    pub(crate) ratio: String,
    pub(crate) goal: String,
    pub(crate) verdict: Verdict,
}

impl Target {
    /// A ratio target: `measured / baseline >= goal` (both as rates: higher is better).
    pub(crate) fn ratio_at_least(
        name: impl Into<String>,
        measured: (String, f64),
        baseline: Option<(String, f64)>,
        goal: Option<f64>,
        skipped: &str,
    ) -> Target {
        let name = name.into();
        match baseline {
            None => Target {
                name,
                measured: measured.0,
                baseline: "-".into(),
                ratio: "-".into(),
                goal: goal.map_or("report".into(), |g| format!("≥ {g}×")),
                verdict: Verdict::Skipped(skipped.into()),
            },
            Some((text, value)) => {
                let ratio = measured.1 / value;
                let verdict = match goal {
                    Some(goal) => Verdict::of(ratio.is_finite() && ratio >= goal),
                    None => Verdict::Report,
                };
                Target {
                    name,
                    measured: measured.0,
                    baseline: text,
                    ratio: format!("{ratio:.2}×"),
                    goal: goal.map_or("report".into(), |g| format!("≥ {g}×")),
                    verdict,
                }
            }
        }
    }
}

/// A Markdown table with padded columns (readable as text, pasteable into docs).
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let columns = headers.len();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(columns) {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c}{}", " ".repeat(widths[i].saturating_sub(c.chars().count()))))
            .collect();
        format!("| {} |\n", padded.join(" | "))
    };
    let mut out = line(headers.to_vec());
    out.push_str(&format!("|{}|\n", widths.iter().map(|w| "-".repeat(w + 2)).collect::<Vec<_>>().join("|")));
    for row in rows {
        let mut cells: Vec<&str> = row.iter().map(String::as_str).collect();
        cells.resize(columns, "");
        out.push_str(&line(cells));
    }
    out
}

pub(crate) fn targets_table(targets: &[Target]) -> String {
    let rows: Vec<Vec<String>> = targets
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                t.measured.clone(),
                t.baseline.clone(),
                t.ratio.clone(),
                t.goal.clone(),
                t.verdict.text(),
            ]
        })
        .collect();
    table(&["target", "measured", "baseline", "ratio", "goal", "result"], &rows)
}

pub(crate) fn summaries_table(rows: &[Summary]) -> String {
    let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.filter(|v| v.is_finite()).map_or("n/a".to_string(), f);
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                s.ops.to_string(),
                rate(s.ops_per_sec()),
                micros(s.secs_per_op),
                opt(s.p50, &|v| micros(v)),
                opt(s.p99, &|v| micros(v)),
                opt(s.cpu_per_op, &|v| micros(v)),
                opt(s.syncs_per_op, &|v| if v > 0.0 && v < 0.1 { format!("{v:.4}") } else { format!("{v:.2}") }),
                opt(s.writes_per_op, &|v| format!("{v:.1}")),
                opt(s.bytes_per_op, &|v| format!("{:.1}", v / 1024.0)),
                opt(s.proc_bytes_per_op, &|v| format!("{:.1}", v / 1024.0)),
                s.note.clone(),
            ]
        })
        .collect();
    table(
        &[
            "workload",
            "ops",
            "ops/s",
            "µs/op",
            "p50 µs",
            "p99 µs",
            "CPU µs/op",
            "flushes/op",
            "writes/op",
            "KiB written/op",
            "device KiB/op",
            "notes",
        ],
        &rows,
    )
}

/// Operations per second, compact.
pub(crate) fn rate(ops_per_sec: f64) -> String {
    if !ops_per_sec.is_finite() {
        "n/a".into()
    } else if ops_per_sec >= 100_000.0 {
        format!("{:.0}k", ops_per_sec / 1000.0)
    } else if ops_per_sec >= 100.0 {
        format!("{ops_per_sec:.0}")
    } else {
        format!("{ops_per_sec:.1}")
    }
}

/// Seconds as microseconds, compact.
pub(crate) fn micros(secs: f64) -> String {
    let us = secs * 1e6;
    if !us.is_finite() {
        "n/a".into()
    } else if us >= 100.0 {
        format!("{us:.0}")
    } else if us >= 10.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.2}")
    }
}
