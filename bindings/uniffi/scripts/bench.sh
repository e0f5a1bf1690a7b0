#!/usr/bin/env bash
# Benchmark (not a test): reserve + complete pairs per second through the Kotlin bindings
# (blocking and suspend) and the Python bindings, against the same calls in Rust (the `idemdb`
# crate), on one store file, in one run. Rounds are interleaved (rust, kotlin, python, ...) and
# the median of each is reported with its ratio to Rust.
#
#   bash bindings/uniffi/scripts/bench.sh [N per round, default 400] [rounds, default 5]
#
# Needs the Kotlin tests compiled once (bash bindings/uniffi/scripts/test.sh kotlin).
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
N=${1:-400}
ROUNDS=${2:-5}
cargo build --quiet --release -p idemdb-uniffi --lib --example bench_rust 2>/dev/null
KC=$TARGET/uniffi-tools/node_modules/kotlin-compiler
KJAR=$TARGET/uniffi-tools/kotlin-tests.jar
[ -f "$KJAR" ] || { echo "run bash bindings/uniffi/scripts/test.sh kotlin first"; exit 1; }
PY=$(mktemp -d)
"$TARGET/debug/uniffi-bindgen" generate --no-format --library "$TARGET/release/libidemdb_uniffi.so" --language python --out-dir "$PY" >/dev/null
cp "$TARGET/release/libidemdb_uniffi.so" "$PY/"
STORE=${IDEMDB_BENCH_FILE:-$PY/bench.idemdb}
OUT=$PY/results
for r in $(seq 1 "$ROUNDS"); do
  "$TARGET/release/examples/bench_rust" "$STORE" "$N" "rust-$r" >>"$OUT"
  java -cp "$KJAR:/usr/share/java/jna.jar:$KC/lib/kotlinx-coroutines-core-jvm.jar:$KC/lib/kotlin-stdlib.jar" \
    -Djna.library.path="$TARGET/release" idemdb.test.BenchKt "$STORE" "$N" "kotlin-$r" >>"$OUT"
  (cd "$PY" && PYTHONPATH=. python3 "$ROOT/bindings/uniffi/bench/bench.py" "$STORE" "$N" "python-$r") >>"$OUT"
done
echo "reserve + complete pairs per second, $N per round, median of $ROUNDS rounds, one store file ($(uname -m), $(nproc) cores)"
python3 - "$OUT" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, value = line.split()
    rows.setdefault(name, []).append(float(value))
rust = statistics.median(rows["rust"])
print(f"| {'caller':<16} | {'ops/s':>8} | {'vs Rust':>7} | {'rounds':<40} |")
print(f"|{'-'*18}|{'-'*10}|{'-'*9}|{'-'*42}|")
for name in ["rust", "rust-thread", "kotlin-blocking", "kotlin-suspend", "python"]:
    m = statistics.median(rows[name])
    print(f"| {name:<16} | {m:>8.1f} | {m / rust:>6.2f}x | {' '.join(f'{v:.0f}' for v in rows[name]):<40} |")
worst = min(statistics.median(rows[n]) for n in ("kotlin-blocking", "kotlin-suspend", "python")) / rust
print(f"bindings cost at 1 caller: {max(0.0, 1 - worst) * 100:.1f} % at worst (goal: <= 10 %)")
PY
rm -rf "$PY"
