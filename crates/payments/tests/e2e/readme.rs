//! The READMEs' `curl` lines, run as written against the example: the root README's 201, replay,
//! 409 and 422, then the ledger; the crate README's webhooks and reconciliation queue.

use std::process::Command;

use crate::support::*;

/// The lines between the `<!-- NAME:start -->` and `<!-- NAME:end -->` markers of `readme`
/// (relative to this crate), continuation lines joined: the run command and the curl lines.
fn demo_lines(readme: &str, name: &str) -> (String, Vec<String>) {
    let readme = std::fs::read_to_string(format!("{}/{readme}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let start = readme.find(&format!("<!-- {name}:start -->")).expect("start marker");
    let end = readme.find(&format!("<!-- {name}:end -->")).expect("end marker");
    let block = &readme[start..end];
    let run = block.lines().find(|l| l.starts_with("cargo run")).expect("the run command").to_string();
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in block.lines().skip_while(|l| !l.starts_with("curl")) {
        if line.starts_with("```") {
            break;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(line);
                lines.push(std::mem::take(&mut current));
            }
        }
    }
    (run, lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_curl_lines_show_a_201_a_replay_a_409_and_a_422() {
    let (run, lines) = demo_lines("../../README.md", "curl-demo");
    assert_eq!(lines.len(), 5, "{lines:#?}");
    // The README starts the example with a slow provider so that the 409 is visible.
    let latency = run.split("--provider-latency-ms ").nth(1).and_then(|s| s.split_whitespace().next()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--provider-latency-ms", latency]);
    let host = server.url.trim_start_matches("http://");
    let outputs = run_lines(&lines, host);
    assert!(outputs[0].starts_with("http/1.1 201"), "{}", outputs[0]);
    assert!(
        outputs[1].starts_with("http/1.1 201") && outputs[1].contains("idempotent-replayed: true"),
        "{}",
        outputs[1]
    );
    assert!(
        outputs[2].contains("http/1.1 409") && outputs[2].contains("urn:idemdb:problem:in-progress"),
        "{}",
        outputs[2]
    );
    assert!(outputs[3].starts_with("http/1.1 422") && outputs[3].contains("key-mismatch"), "{}", outputs[3]);
    let ledger: serde_json::Value = serde_json::from_str(&outputs[4]).unwrap();
    assert_eq!(ledger["payments"].as_array().unwrap().len(), 2, "order-842 and order-843, once each");
    for charge in ledger["provider_charges"].as_array().unwrap() {
        assert_eq!(charge["calls"], 1, "{charge}");
    }
}

/// Runs each line with `sh` against `host`: the outputs, lower case.
fn run_lines(lines: &[String], host: &str) -> Vec<String> {
    let mut outputs = Vec::new();
    for line in lines {
        let line = line.replace("127.0.0.1:8080", host);
        let output = Command::new("sh").arg("-c").arg(&line).output().expect("sh runs curl");
        assert!(output.status.success(), "{line}: {}", String::from_utf8_lossy(&output.stderr));
        outputs.push(String::from_utf8_lossy(&output.stdout).to_lowercase());
    }
    outputs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crate_readme_curl_lines_show_webhook_dedupe_the_version_guard_and_the_queue() {
    let (run, lines) = demo_lines("README.md", "workflow-demo");
    assert_eq!(lines.len(), 5, "{lines:#?}");
    let lost = run.split("--provider-lose-responses-to ").nth(1).and_then(|s| s.split_whitespace().next()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // The README's interval (60 s) is longer than the demo; the test holds the reconciler off
    // for good so a loaded machine cannot race it.
    assert!(run.contains("--reconcile-interval-secs 60"), "{run}");
    let server =
        Server::start(dir.path(), &["--provider-lose-responses-to", lost, "--reconcile-interval-secs", "3600"]);
    let outputs = run_lines(&lines, server.url.trim_start_matches("http://"));
    let json = |i: usize| -> serde_json::Value { serde_json::from_str(&outputs[i]).unwrap() };
    let (applied, duplicate, stale) = (json(0), json(1), json(2));
    assert_eq!((applied["outcome"].as_str(), applied["object"]["version"].as_u64()), (Some("applied"), Some(2)));
    assert_eq!(duplicate["outcome"], "duplicate");
    assert_eq!(duplicate["earlier"]["outcome"], "applied");
    assert_eq!((stale["outcome"].as_str(), stale["current_version"].as_u64()), (Some("stale"), Some(2)));
    assert_eq!(stale["object"]["version"], 2, "the late, older version did not move the object back");
    assert!(outputs[3].starts_with("http/1.1 502") && outputs[3].contains("provider-uncertain"), "{}", outputs[3]);
    let queue = json(4);
    let entries = queue["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{queue}");
    assert_eq!(
        (entries[0]["provider_key"].as_str(), entries[0]["state"].as_str()),
        (Some("order-900:charge-v1"), Some("uncertain"))
    );
    let effects = effects(&http(), &server.url, "acme").await;
    assert_eq!((effects.payments_of("order-900"), effects.calls_of("order-900")), (0, 1));
}
