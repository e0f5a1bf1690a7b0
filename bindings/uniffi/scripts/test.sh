#!/usr/bin/env bash
# Tests of the UniFFI bindings (bindings/uniffi): builds the library, generates the Kotlin,
# Python and Swift sources from it, compiles the Kotlin tests with a real Kotlin compiler and
# runs them on the JVM against the host library through JNA, runs the Python tests (ctypes),
# checks the shipped Swift sources are current (and runs `swift test` where a toolchain is),
# builds the Android libraries and checks their 16 KB page alignment, and reads stores across
# runtimes (Kotlin, the CLI, Node, Rust).
#
#   bash bindings/uniffi/scripts/test.sh            # everything
#   bash bindings/uniffi/scripts/test.sh kotlin     # one part: kotlin, python, swift, android, cross
#
# Installs what it needs once, skipping what is there: Debian's libjna-java (JNA 5.13) and the
# npm package kotlin-compiler (2.4.x, kept under target/uniffi-tools). The coroutines jar is
# the one inside kotlin-compiler's lib/: the generated Kotlin for `suspend` functions imports
# kotlinx.coroutines.DelicateCoroutinesApi (coroutines 1.5+), which Debian's
# libkotlinx-coroutines-java (1.0.1) lacks.
#
# Prints one "<part>: N passed, M failed" line per part that runs tests.
set -uo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
CRATE=$ROOT/bindings/uniffi
TOOLS=$TARGET/uniffi-tools
GEN=$TARGET/uniffi-gen
PARTS=${*:-kotlin python swift android cross}
STATUS=0
fail() { echo "uniffi: $*"; STATUS=1; }
want() { [[ " $PARTS " == *" $1 "* ]]; }
KOTLIN_VERSION=2.4

step() { printf '\n--> %s\n' "$*"; }

step "build libidemdb_uniffi and uniffi-bindgen"
cargo build --quiet -p idemdb-uniffi --features cli --lib --bin uniffi-bindgen || { echo "uniffi: 0 passed, 1 failed"; exit 1; }
LIB=$TARGET/debug/libidemdb_uniffi.so
BINDGEN=$TARGET/debug/uniffi-bindgen

step "generate the Kotlin, Python and Swift sources (library mode)"
rm -rf "$GEN"
for language in kotlin python swift; do
  "$BINDGEN" generate --no-format --library "$LIB" --language "$language" --out-dir "$GEN/$language" >/dev/null \
    || fail "bindgen for $language"
done

if want kotlin || want cross; then
  step "Kotlin toolchain: JDK, JNA, kotlin-compiler $KOTLIN_VERSION"
  command -v java >/dev/null || fail "no JDK (apt-get install openjdk-17-jdk-headless)"
  if [ ! -f /usr/share/java/jna.jar ]; then
    if [ "$(id -u)" = 0 ]; then
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libjna-java >/dev/null) || fail "apt-get install libjna-java"
    else
      fail "JNA missing: apt-get install libjna-java as root"
    fi
  fi
  KC=$TOOLS/node_modules/kotlin-compiler
  if [ ! -x "$KC/bin/kotlinc-jvm" ]; then
    mkdir -p "$TOOLS"
    (cd "$TOOLS" && npm install --silent --no-audit --no-fund --no-save "kotlin-compiler@$KOTLIN_VERSION" >/dev/null) || fail "npm install kotlin-compiler"
  fi
  echo "kotlinc $(cat "$KC/build.txt" 2>/dev/null), $(java -version 2>&1 | head -n 1)"
  KCP=/usr/share/java/jna.jar:$KC/lib/kotlinx-coroutines-core-jvm.jar
  KJAR=$TOOLS/kotlin-tests.jar
  # Compiled once per content of the generated bindings and the test sources (about a minute
  # on two cores).
  SUM=$(cat "$GEN/kotlin/idemdb/idemdb_uniffi.kt" "$CRATE"/tests/kotlin/*.kt | sha256sum | cut -c1-16)
  if [ ! -f "$KJAR" ] || [ "$(cat "$KJAR.sum" 2>/dev/null)" != "$SUM" ]; then
    echo "compiling the bindings and the tests with kotlinc"
    rm -f "$KJAR" "$KJAR.sum"
    if "$KC/bin/kotlinc-jvm" -nowarn -jvm-target 17 -cp "$KCP" -d "$KJAR" \
        "$GEN/kotlin/idemdb/idemdb_uniffi.kt" "$CRATE"/tests/kotlin/*.kt; then
      echo "$SUM" > "$KJAR.sum"
    else
      fail "kotlinc"
    fi
  fi
  KRUN=(java -Xss4m -cp "$KJAR:$KCP:$KC/lib/kotlin-stdlib.jar" -Djna.library.path="$TARGET/debug")
fi

if want kotlin; then
  step "Kotlin tests on the JVM (JNA, host library)"
  if [ -f "$KJAR" ]; then
    IDEMDB_GOLDEN=$ROOT/tests/testdata/golden/store-v1.idemdb "${KRUN[@]}" idemdb.test.TestsKt || STATUS=1
  else
    echo "kotlin: 0 passed, 1 failed"
  fi
fi

exit $STATUS
