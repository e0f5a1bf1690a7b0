//! Human output (aligned tables, times, sizes), JSON output and progress bars.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Column alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Align {
    Left,
    Right,
}

/// A plain text table: a header row, a rule, then rows; columns padded to their widest cell.
#[derive(Debug)]
pub(crate) struct Table {
    headers: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(columns: &[(&str, Align)]) -> Self {
        Table {
            headers: columns.iter().map(|(name, _)| (*name).to_string()).collect(),
            align: columns.iter().map(|(_, align)| *align).collect(),
            rows: Vec::new(),
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub(crate) fn render(&self) -> String {
        let columns = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let line = |cells: &[String], out: &mut String| {
            let mut text = String::new();
            for (i, width) in widths.iter().enumerate() {
                let cell = cells.get(i).map(String::as_str).unwrap_or("");
                let pad = width.saturating_sub(cell.chars().count());
                if i > 0 {
                    text.push_str("  ");
                }
                match self.align[i] {
                    Align::Left => {
                        text.push_str(cell);
                        text.push_str(&" ".repeat(pad));
                    }
                    Align::Right => {
                        text.push_str(&" ".repeat(pad));
                        text.push_str(cell);
                    }
                }
            }
            out.push_str(text.trim_end());
            out.push('\n');
        };
        line(&self.headers, &mut out);
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        line(&rule, &mut out);
        for row in &self.rows {
            line(row, &mut out);
        }
        out
    }
}

/// Two aligned columns: a label and a value, for one object's fields.
pub(crate) fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(label, _)| label.chars().count()).max().unwrap_or(0);
    let mut out = String::new();
    for (label, value) in pairs {
        out.push_str(&format!("{label:<width$}  {value}\n"));
    }
    out
}

/// Writes text to stdout, ignoring a closed pipe (`idemdb list | head`).
pub(crate) fn print(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

/// Prints one JSON document, pretty, followed by a newline.
pub(crate) fn print_json(value: &serde_json::Value) {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| "null".to_string());
    print(&format!("{text}\n"));
}

/// Text safe to write to a terminal: control characters (C0, DEL, C1: the start of every
/// terminal escape sequence) and invisible formatting characters (bidirectional overrides,
/// zero-width characters) are written as visible escapes (`\n`, `\u{1b}`, `\u{202e}`);
/// everything else is kept. Stored payloads pass through this before `get` or `list` shows
/// them; JSON output escapes them by itself.
pub(crate) fn terminal_safe(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || invisible(c) => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

/// Formatting characters that change how the text around them is shown without showing up.
fn invisible(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// `1234567` → `1,234,567`.
pub(crate) fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A size in bytes for people: `1.5 MiB (1,572,864 bytes)`.
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{} bytes", count(n));
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {} ({} bytes)", UNITS[unit], count(n))
}

/// A duration for people: `950 ms`, `12.3 s`, `4 min 5 s`, `3 h 2 min`, `12 d 4 h`.
pub(crate) fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    let s = d.as_secs();
    match s {
        _ if ms < 1_000 => format!("{ms} ms"),
        0..60 => format!("{:.1} s", d.as_secs_f64()),
        60..3_600 => format!("{} min {} s", s / 60, s % 60),
        3_600..86_400 => format!("{} h {} min", s / 3_600, (s % 3_600) / 60),
        _ => format!("{} d {} h", s / 86_400, (s % 86_400) / 3_600),
    }
}

/// Milliseconds since the Unix epoch as UTC: `2026-05-01 12:34:56Z`. `u64::MAX` is `never`.
pub(crate) fn time(ms: u64) -> String {
    if ms == u64::MAX {
        return "never".to_string();
    }
    let secs = ms / 1_000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}Z", rem / 3_600, (rem % 3_600) / 60, rem % 60)
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// A progress bar on stderr, hidden when stderr is not a terminal or output is JSON.
pub(crate) fn progress(len: u64, json: bool, message: &'static str) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let style = ProgressStyle::with_template("{msg:>13} [{bar:30}] {human_pos}/{human_len} eta {eta}")
        .map(|style| style.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr()).with_style(style).with_message(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(count(12), "12");
        assert_eq!(time(0), "1970-01-01 00:00:00Z");
        assert_eq!(time(1_700_000_000_000), "2023-11-14 22:13:20Z");
        assert_eq!(bytes(1536), "1.5 KiB (1,536 bytes)");
        assert_eq!(duration(Duration::from_secs(125)), "2 min 5 s");
        assert_eq!(terminal_safe("ok \u{1b}[31mred\r\n\u{202e}é"), "ok \\u{1b}[31mred\\r\\n\\u{202e}é");
    }
}
