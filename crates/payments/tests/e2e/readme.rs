//! The root README's `curl` lines, run as written against the example: a 201, a replay, a
//! 409 and a 422, then the ledger.

use std::process::Command;

use crate::support::*;

/// The lines between the README's `curl-demo` markers, continuation lines joined.
fn demo_lines() -> (String, Vec<String>) {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let start = readme.find("<!-- curl-demo:start -->").expect("start marker");
    let end = readme.find("<!-- curl-demo:end -->").expect("end marker");
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
    let (run, lines) = demo_lines();
    assert_eq!(lines.len(), 5, "{lines:#?}");
    // The README starts the example with a slow provider so that the 409 is visible.
    let latency = run.split("--provider-latency-ms ").nth(1).and_then(|s| s.split_whitespace().next()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--provider-latency-ms", latency]);
    let host = server.url.trim_start_matches("http://");
    let mut outputs = Vec::new();
    for line in &lines {
        let line = line.replace("127.0.0.1:8080", host);
        let output = Command::new("sh").arg("-c").arg(&line).output().expect("sh runs curl");
        assert!(output.status.success(), "{line}: {}", String::from_utf8_lossy(&output.stderr));
        outputs.push(String::from_utf8_lossy(&output.stdout).to_lowercase());
    }
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
