#!/usr/bin/env bash
# Runs every test of idemdb. Installs what the tests need (idempotently, skipping work already
# done) and ends with one summary line "N passed, M failed".
#
#   bash scripts/test-all.sh
#
# Environment: PROPTEST_CASES (default 1000) sets the model test's case count.
# The Rust tests run beside a throwaway PostgreSQL server (scripts/with-postgres.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
export CARGO_TERM_COLOR=never
FAILED_STEPS=()

step() { printf '\n==> %s\n' "$*"; }

run_logged() {
  # Runs a command, echoing its output and keeping it for the final count.
  local name=$1; shift
  if ! "$@" 2>&1 | tee -a "$LOG"; then
    FAILED_STEPS+=("$name")
  fi
}

step "toolchain"
rustup target list --installed 2>/dev/null | grep -q wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown
# The README's curl lines run as a test of the payments example.
command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl; }

step "lints: cargo clippy (warnings are errors)"
run_logged clippy cargo clippy --workspace --all-targets -- -D warnings

step "Rust tests: unit, integration, CLI end-to-end, doctests, PostgreSQL adapter"
# Beside a throwaway PostgreSQL server: scripts/with-postgres.sh starts it on loopback (as an
# unprivileged user when this runs as root; it installs Debian's postgresql package if no
# binaries are found) and stops it when the tests end, also on failure. It sets
# IDEMDB_PG_REQUIRED=1, so the adapter's tests fail rather than report themselves ignored
# when no server is there (plain `cargo test` reports them ignored).
run_logged cargo-test bash scripts/with-postgres.sh cargo test --workspace --no-fail-fast
if ! grep -q '^idemdb-postgres: running the [0-9]* PostgreSQL tests against a server' "$LOG"; then
  echo "the PostgreSQL adapter's tests did not run"
  FAILED_STEPS+=("postgres")
fi

step "core and store build for wasm32-unknown-unknown"
run_logged wasm-check cargo check -p idemdb-core -p idemdb --target wasm32-unknown-unknown

android_build() {
  # The crate as an Android app bundles it: built for aarch64-linux-android. blake3's build
  # script compiles its NEON C code for the target; Debian's clang cross-compiles it, with
  # Debian's aarch64 libc headers standing in for the NDK's sysroot (blake3_neon.c needs only
  # <assert.h>, <string.h> and <arm_neon.h>). Installs the target, clang and the headers once.
  rustup target list --installed 2>/dev/null | grep -q '^aarch64-linux-android$' || rustup target add aarch64-linux-android
  if ! command -v clang >/dev/null || ! command -v llvm-ar >/dev/null || [ ! -f /usr/aarch64-linux-gnu/include/string.h ]; then
    if [ "$(id -u)" = 0 ]; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang llvm libc6-dev-arm64-cross >/dev/null
    else
      echo "clang, llvm-ar or the aarch64 libc headers are missing (apt-get install clang llvm libc6-dev-arm64-cross as root)"
      return 1
    fi
  fi
  CC_aarch64_linux_android=clang AR_aarch64_linux_android=llvm-ar \
    CFLAGS_aarch64_linux_android="--target=aarch64-linux-android -isystem /usr/aarch64-linux-gnu/include" \
    cargo build -p idemdb --target aarch64-linux-android
}
step "idemdb builds for aarch64-linux-android"
run_logged android android_build

if [ -f crates/xtask/Cargo.toml ]; then
  step "reliability report (CI-sized run)"
  run_logged reliability cargo xtask reliability --quick
fi

bench_smoke() {
  # The benchmark harness end to end at small sizes (SQLite baselines included); a smoke test
  # of the command, not a timing check: it fails only if the harness fails or does not print a
  # verdict (PASS or MISS) for each of the 11 goal rows.
  local out status=0 verdicts
  out=$(mktemp)
  cargo bench -p idemdb-benches --features sqlite -- --quick >"$out" || status=$?
  verdicts=$(grep -cE '\| (PASS|MISS) +\|$' "$out" || true)
  echo "benchmark smoke: $verdicts goal rows with a verdict"
  if [ "$status" -eq 0 ] && [ "$verdicts" -lt 11 ]; then status=1; fi
  grep -E '^\| (group commit|replay lookup vs|durable reserve, 1 caller)' "$out" || true
  rm -f "$out"
  return $status
}
step "benchmark harness smoke (cargo bench ... -- --quick)"
run_logged bench-smoke bench_smoke

if [ -x bindings/npm/scripts/test-all.sh ] || [ -f bindings/npm/scripts/test-all.sh ]; then
  step "WebAssembly and npm package: Node, Chromium, workerd, cross-reads"
  run_logged npm bash bindings/npm/scripts/test-all.sh
fi

admin_page() {
  # The payments example's operator page (the admin API of idemdb-http) in headless Chromium
  # through playwright-core (from bindings/npm/node_modules, installed by the step above): a
  # lost charge resolved by clicking, then the retry replays 201 and the ledger has one
  # payment. Chromium missing is a failure here, not a skip.
  cargo build -q -p payments-example || return 1
  local out status=0
  out=$(mktemp)
  IDEMDB_CHROMIUM="${IDEMDB_CHROMIUM:-$(command -v chromium || echo /usr/bin/chromium)}" \
    node --test --test-reporter=tap crates/payments/tests/browser/admin-page.test.mjs >"$out" 2>&1 || status=1
  cat "$out"
  local pass fail
  pass=$(sed -nE 's/^# pass ([0-9]+)$/\1/p' "$out" | tail -n 1)
  fail=$(sed -nE 's/^# fail ([0-9]+)$/\1/p' "$out" | tail -n 1)
  echo "js: ${pass:-0} passed, ${fail:-1} failed"
  rm -f "$out"
  return $status
}
step "payments example: the operator page in headless Chromium"
run_logged admin-page admin_page

uniffi_tests() {
  # The Kotlin, Python and Swift bindings (bindings/uniffi/scripts/test.sh): Kotlin compiled
  # with kotlinc and run on the JVM through JNA, Python through ctypes, the Swift sources
  # checked current (swift test where a toolchain is), the Android libraries and their 16 KB
  # alignment, and one store read across Kotlin, the CLI, Python and Node (the npm package
  # built by the step above). It installs JNA and kotlin-compiler once.
  bash bindings/uniffi/scripts/test.sh
}
step "Kotlin, Python and Swift bindings (UniFFI)"
run_logged uniffi uniffi_tests

# One closing line over every runner: cargo's "test result" lines and the other runners' own
# "N passed, M failed" lines.
passed=$(grep -Eo 'test result: [a-zA-Z]+\. [0-9]+ passed' "$LOG" | awk '{s+=$4} END {print s+0}')
failed=$(grep -Eo '[0-9]+ passed; [0-9]+ failed' "$LOG" | awk '{s+=$3} END {print s+0}')
# The bindings' runners print "kotlin: ", "python: ", "swift: ", "android: " and "cross: " lines.
RUNNER_LINE='^((js|kotlin|python|swift|android|cross|clients): )?[0-9]+ passed, [0-9]+ failed'
js_passed=$(grep -E "$RUNNER_LINE" "$LOG" | sed -E 's/^[a-z]+: //' | awk '{s+=$1} END {print s+0}')
js_failed=$(grep -E "$RUNNER_LINE" "$LOG" | sed -E 's/^[a-z]+: //' | awk '{s+=$3} END {print s+0}')
passed=$((passed + js_passed))
failed=$((failed + js_failed))
echo
if [ ${#FAILED_STEPS[@]} -gt 0 ]; then
  # What failed, again at the end where a truncated log still shows it: failed tests, the
  # reliability report's MISS rows and failed sections, compiler and runner errors.
  echo "what failed (from the log above):"
  grep -E '^test .* FAILED$|^---- .* stdout ----$|\| MISS +\|$|: FAIL$|^RESULT: FAIL|^  MISS: |^error(\[|:)|^not ok |^FAIL |^xtask reliability: ' "$LOG" | tail -n 60 || true
  echo "failed steps: ${FAILED_STEPS[*]}"
  [ "$failed" -gt 0 ] || failed=${#FAILED_STEPS[@]}
fi
echo "$passed passed, $failed failed"
[ ${#FAILED_STEPS[@]} -eq 0 ]
