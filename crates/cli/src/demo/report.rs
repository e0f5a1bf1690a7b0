//! The demo's result: a side-by-side table for people, one JSON object for scripts.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::demo::client::Tally;
use crate::output::{self, Align, Table};

/// Both runs and how they were made.
pub(crate) struct Summary<'a> {
    pub(crate) path: &'a Path,
    pub(crate) seed: u64,
    pub(crate) intents: u64,
    pub(crate) durability: &'static str,
    pub(crate) idem: &'a Tally,
    pub(crate) naive: &'a Tally,
    pub(crate) restarts: u64,
    pub(crate) elapsed: Duration,
}

/// The rows of the table: label, then the count in each run (`None`: does not apply).
fn rows(t: &Tally, keyed: bool) -> Vec<(&'static str, Option<u64>)> {
    let keyed_only = |n: u64| keyed.then_some(n);
    vec![
        ("intents", Some(t.intents)),
        ("attempts (requests sent)", Some(t.attempts)),
        ("lost requests", Some(t.lost_requests)),
        ("lost responses", Some(t.lost_responses)),
        ("timeouts", Some(t.timeouts)),
        ("server crashes", Some(t.crashes)),
        ("double submits", Some(t.double_submits)),
        ("replays", keyed_only(t.replays)),
        ("conflicts (same key, other body)", keyed_only(t.conflicts)),
        ("in-progress refusals", keyed_only(t.in_progress_refusals)),
        ("reconciliations", keyed_only(t.reconciliations)),
        ("declined (card)", Some(t.declined)),
        ("completed intents", Some(t.completed)),
        ("gave up", Some(t.gave_up)),
        ("effects (charges at provider)", Some(t.effects)),
        ("duplicate effects", Some(t.duplicate_effects)),
    ]
}

fn tally_json(t: &Tally) -> serde_json::Map<String, Value> {
    let pairs = [
        ("intents", t.intents),
        ("attempts", t.attempts),
        ("effects", t.effects),
        ("duplicate_effects", t.duplicate_effects),
        ("replays", t.replays),
        ("conflicts", t.conflicts),
        ("lost_requests", t.lost_requests),
        ("lost_responses", t.lost_responses),
        ("timeouts", t.timeouts),
        ("crashes", t.crashes),
        ("double_submits", t.double_submits),
        ("in_progress_refusals", t.in_progress_refusals),
        ("reconciliations", t.reconciliations),
        ("completed", t.completed),
        ("declined", t.declined),
        ("gave_up", t.gave_up),
        ("inconsistent", t.inconsistent),
    ];
    pairs.into_iter().map(|(name, n)| (name.to_string(), json!(n))).collect()
}

impl Summary<'_> {
    /// The idemdb client caused no duplicate effect, and the store agrees with the provider.
    pub(crate) fn sound(&self) -> bool {
        self.idem.duplicate_effects == 0 && self.idem.inconsistent == 0
    }

    pub(crate) fn json(&self) -> Value {
        let mut object = tally_json(self.idem);
        object.insert("seed".into(), json!(self.seed));
        object.insert("store".into(), json!(self.path.display().to_string()));
        object.insert("durability".into(), json!(self.durability));
        object.insert("server_restarts".into(), json!(self.restarts));
        object.insert("new_key_per_retry".into(), Value::Object(tally_json(self.naive)));
        object.insert("ok".into(), json!(self.sound()));
        Value::Object(object)
    }

    pub(crate) fn table(&self) -> String {
        let mut table =
            Table::new(&[("", Align::Left), ("idemdb (same key)", Align::Right), ("new key per retry", Align::Right)]);
        for ((label, idem), (_, naive)) in rows(self.idem, true).into_iter().zip(rows(self.naive, false)) {
            let cell = |n: Option<u64>| n.map(output::count).unwrap_or_else(|| "-".to_string());
            table.row(vec![label.to_string(), cell(idem), cell(naive)]);
        }
        let mut text = format!(
            "idemdb demo: {} payment intents, seed {} (rerun with --seed {})\n\
             store: {} (fresh; durability {})\n\n",
            output::count(self.intents),
            self.seed,
            self.seed,
            self.path.display(),
            self.durability,
        );
        if self.durability == "eventual" {
            text.push_str(
                "note: durability eventual: commits were flushed to disk once, at the end. A simulated\n      \
                 crash closes the store handle, which keeps them; a real crash could lose the latest\n      \
                 commits, so real stores use immediate (the library's default). Rerun with\n      \
                 --durability immediate to pay for one fsync per commit.\n\n",
            );
        }
        text.push_str(&table.render());
        text.push('\n');
        if self.sound() {
            text.push_str(&format!(
                "idemdb: {} effects for {} completed intents, 0 duplicates;\n        \
                 every stored result names the provider's only charge for its intent.\n",
                output::count(self.idem.effects),
                output::count(self.idem.completed),
            ));
        } else {
            text.push_str(&format!(
                "PROBLEM: the idemdb client saw {} duplicate effects and {} intents where store and provider disagree.\n",
                self.idem.duplicate_effects, self.idem.inconsistent
            ));
        }
        text.push_str(&format!(
            "new key per retry: {} duplicate charges, each one a refund and a support ticket.\n",
            output::count(self.naive.duplicate_effects)
        ));
        text.push_str(&format!(
            "\nran in {} ({} server restarts); look inside: idemdb stats {}\n",
            output::duration(self.elapsed),
            self.restarts,
            self.path.display()
        ));
        text
    }
}
