#!/usr/bin/env bash
# Builds the WebAssembly engine and the npm package, packs it, installs the tarball into a
# scratch project, and runs every JS-side test: Node (ESM and CommonJS), headless Chromium
# (OPFS, reloads, killed workers, browser restart, two tabs, idempotentFetch, the README worker
# with and without esbuild), workerd (memory and Durable Object stores on local disk across
# restarts), typings per documented setup, the .wasm size budget, and the native cross-read of
# store files. Idempotent: installs only what is missing.
#
#   bash bindings/npm/scripts/test-all.sh
#
# Ends with one line "N passed, M failed". Browser tests are skipped (with a message) when
# Chromium is missing and cannot be installed (not root).
set -uo pipefail
PKG="$(cd "$(dirname "$0")/.." && pwd)"
ROOT="$(cd "$PKG/../.." && pwd)"
SCRATCH="$PKG/.scratch"
export CARGO_TERM_COLOR=never
PASSED=0
FAILED=0
NOTES=()

step() { printf '\n==> %s\n' "$*"; }
fail_step() { echo "FAILED: $*"; FAILED=$((FAILED + 1)); }

# Runs `node --test` on files and adds its counts (TAP "# pass N" / "# fail N").
node_suite() {
  local name=$1; shift
  local out
  out=$(mktemp)
  "$@" 2>&1 | tee "$out" | grep -Ev '^\s*(duration_ms|\.\.\.|---|type:)' | grep -E '^(not ok|ok|# (pass|fail|skip))|^\s+(not ok|ok) |error|Error' | sed 's/^/  /'
  local pass fail
  pass=$(grep -E '^# pass [0-9]+' "$out" | awk '{s+=$3} END {print s+0}')
  fail=$(grep -E '^# fail [0-9]+' "$out" | awk '{s+=$3} END {print s+0}')
  # A file whose event loop ends with a test still pending reports its tests "not ok" without
  # counting them in "# fail": count failed tests (not the suites above them) from the lines.
  local failed_lines
  failed_lines=$(( $(grep -cE '^\s*not ok ' "$out") - $(grep -cE "failureType: 'subtestsFailed'" "$out") ))
  if [ "$failed_lines" -gt "$fail" ]; then fail=$failed_lines; fi
  if [ "$pass" -eq 0 ] && [ "$fail" -eq 0 ]; then
    echo "  $name: no test result (runner failed?)"; tail -n 30 "$out"; fail=1
  fi
  if [ "$fail" -gt 0 ]; then grep -E -A 30 '^\s*not ok' "$out" | head -n 120; fi
  echo "  $name: $pass passed, $fail failed" | sed 's/ passed, / ok, /'
  PASSED=$((PASSED + pass)); FAILED=$((FAILED + fail))
  rm -f "$out"
}

step "toolchain: wasm32 target and wasm-bindgen-cli of the pinned version"
rustup target list --installed 2>/dev/null | grep -q '^wasm32-unknown-unknown$' || rustup target add wasm32-unknown-unknown
WB_VERSION=$(sed -nE 's/^wasm-bindgen = "=([0-9.]+)".*/\1/p' "$ROOT/bindings/wasm/Cargo.toml")
if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != "$WB_VERSION" ]; then
  cargo install wasm-bindgen-cli --version "$WB_VERSION" --force
fi
wasm-bindgen --version
# The shipped .wasm is built with nightly's build-std (see scripts/build.mjs): the nightly
# toolchain and its std sources.
rustup toolchain list 2>/dev/null | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^rust-src' || rustup component add rust-src --toolchain nightly
rustc +nightly --version

step "Chromium"
CHROMIUM=$(command -v chromium || true)
if [ -z "$CHROMIUM" ]; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || true
    CHROMIUM=$(command -v chromium || true)
  fi
fi
if [ -z "$CHROMIUM" ]; then
  NOTES+=("browser tests SKIPPED: chromium is not installed (run as root, or apt-get install chromium)")
  echo "${NOTES[-1]}"
else
  "$CHROMIUM" --version 2>/dev/null | head -n 1
fi

step "npm dependencies (npm ci)"
cd "$PKG"
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund || { fail_step "npm ci"; }
else
  echo "node_modules up to date"
fi

step "build: wasm (release), wasm-bindgen, TypeScript"
if ! node scripts/build.mjs; then
  fail_step "build"
  echo; echo "$PASSED passed, $FAILED failed"; exit 1
fi

step "size budget of the .wasm (gzipped)"
# The budget (WASM_GZIP_BUDGET in scripts/build.mjs) is what the build reaches with the levers
# that paid (see the README's "Size"); a change that grows the .wasm past it fails here.
BUDGET=$(node -p "require('./dist/wasm-size.json').budget")
GZIP=$(node -p "require('./dist/wasm-size.json').gzip")
if [ "$GZIP" -le "$BUDGET" ]; then
  echo "  wasm gzipped: $GZIP bytes, budget $BUDGET: ok"
  PASSED=$((PASSED + 1))
else
  echo "  wasm gzipped: $GZIP bytes, over the budget of $BUDGET bytes"
  FAILED=$((FAILED + 1))
fi

step "pack and install the tarball into a scratch project"
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH/project"
TARBALL=$(npm pack --silent --pack-destination "$SCRATCH" | tail -n 1)
echo "packed $TARBALL ($(du -h "$SCRATCH/$TARBALL" | cut -f1))"
cd "$SCRATCH/project"
printf '{ "name": "idemdb-scratch", "private": true, "type": "module" }\n' > package.json
npm install --no-audit --no-fund --no-package-lock "../$TARBALL" >/dev/null || fail_step "npm install of the tarball"
cp -r "$PKG/test" "$SCRATCH/project/test"
cd "$PKG"

step "native snapshot tool (the Rust crate reading and writing store files)"
if cargo build --quiet -p idemdb-wasm --example snapshot; then
  export IDEMDB_SNAPSHOT_TOOL="${CARGO_TARGET_DIR:-$ROOT/target}/debug/examples/snapshot"
else
  fail_step "native snapshot tool build"
fi
export IDEMDB_CARGO_TOML="$ROOT/Cargo.toml"
export IDEMDB_SCRATCH="$SCRATCH/project"
export IDEMDB_TSC="$PKG/node_modules/typescript/bin/tsc"
export IDEMDB_TYPE_ROOTS="$PKG/node_modules/@types"
export IDEMDB_ESBUILD="$PKG/node_modules"

step "Rust-side tests of the bindings in wasm32 (wasm-bindgen-test-runner, in Node)"
WASM_OUT=$(mktemp)
(cd "$ROOT" && CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
  cargo test -p idemdb-wasm --target wasm32-unknown-unknown --test wasm) > "$WASM_OUT" 2>&1
WASM_STATUS=$?
# Shown as "wasm32 result:" so that a repository-wide runner counting cargo's "test result:"
# lines does not count these twice (they are in this script's closing line).
sed -E 's/test result:/wasm32 result:/' "$WASM_OUT" | grep -E '^(test |wasm32 result|error|failures)' | sed 's/^/  /'
wasm_pass=$(grep -Eo 'test result: [a-zA-Z]+\. [0-9]+ passed' "$WASM_OUT" | awk '{s+=$4} END {print s+0}')
wasm_fail=$(grep -Eo '[0-9]+ passed; [0-9]+ failed' "$WASM_OUT" | awk '{s+=$3} END {print s+0}')
if [ "$WASM_STATUS" -ne 0 ] && [ "$wasm_fail" -eq 0 ]; then tail -n 30 "$WASM_OUT"; wasm_fail=1; fi
echo "  wasm32: $wasm_pass ok, $wasm_fail failed"
PASSED=$((PASSED + wasm_pass)); FAILED=$((FAILED + wasm_fail))
rm -f "$WASM_OUT"

step "Node: ESM and CommonJS against the installed tarball"
cd "$SCRATCH/project"
rm -f payments.idemdb payments.idemdb.lock
node_suite node node --test --test-reporter=tap test/node/api.test.mjs test/node/contract.test.mjs test/node/edges.test.mjs test/node/api.test.cjs test/node/readme.test.mjs test/node/types.test.mjs test/node/package.test.mjs test/node/kill.test.mjs
cd "$PKG"

step "cross-runtime (the reliability report's section): Node and a native process on one file, kill -9 of either"
# The same file as `cargo xtask reliability`'s cross-runtime section would need: it runs here,
# where the package is built. Its summary line is the report's row (docs/reliability.md).
cd "$SCRATCH/project"
IDEMDB_CROSS_ROUNDS="${IDEMDB_CROSS_ROUNDS:-40}" node_suite cross-runtime node --test --test-reporter=tap test/node/cross-runtime.test.mjs
cd "$PKG"

step "workerd: memory and Durable Object stores (local disk, restarts), the README examples"
node_suite workerd node --test --test-reporter=tap test/workerd/workerd.test.mjs

if [ -n "$CHROMIUM" ]; then
  step "Chromium (headless): OPFS durability, tabs, idempotentFetch, snapshots"
  export IDEMDB_CHROMIUM="$CHROMIUM"
  node_suite chromium node --test --test-reporter=tap --test-timeout=240000 test/browser/chromium.test.mjs
fi

echo
for note in "${NOTES[@]}"; do echo "$note"; done
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
