#!/usr/bin/env bash
# Tests of the UniFFI bindings (bindings/uniffi): builds the library, generates the Kotlin,
# Python and Swift sources from it, compiles the Kotlin tests with a real Kotlin compiler and
# runs them on the JVM against the host library through JNA, runs the Python tests (ctypes),
# checks the shipped Swift sources are current (and runs `swift test` where a toolchain is),
# builds the Android libraries and checks their 16 KB page alignment, reads stores across
# runtimes (Kotlin, the CLI, Node, Rust), and runs the npm, Rust, Kotlin and Python clients
# against one lossy service (part clients).
#
#   bash bindings/uniffi/scripts/test.sh            # everything
#   bash bindings/uniffi/scripts/test.sh kotlin     # one part: kotlin, python, swift, android, cross, clients
#   IDEMDB_CLIENTS_SEED=7 IDEMDB_CLIENTS_INTENTS=25 bash bindings/uniffi/scripts/test.sh clients
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
PARTS=${*:-kotlin python swift android cross clients}
STATUS=0
fail() { echo "uniffi: $*"; STATUS=1; }
want() { [[ " $PARTS " == *" $1 "* ]]; }
KOTLIN_VERSION=2.4

step() { printf '\n--> %s\n' "$*"; }
# Cargo's output goes to a log, shown when a build fails (the store's dead-code warnings
# without its workflow feature would drown the test lines).
CARGO_LOG=$(mktemp)
trap 'rm -f "$CARGO_LOG"' EXIT
quiet_cargo() { "$@" >"$CARGO_LOG" 2>&1 || { cat "$CARGO_LOG"; return 1; }; }

step "build libidemdb_uniffi and uniffi-bindgen"
quiet_cargo cargo build -p idemdb-uniffi --features cli --lib --bin uniffi-bindgen || { echo "uniffi: 0 passed, 1 failed"; exit 1; }
LIB=$TARGET/debug/libidemdb_uniffi.so
BINDGEN=$TARGET/debug/uniffi-bindgen

step "generate the Kotlin, Python and Swift sources (library mode)"
rm -rf "$GEN"
for language in kotlin python swift; do
  "$BINDGEN" generate --no-format --library "$LIB" --language "$language" --out-dir "$GEN/$language" >/dev/null \
    || fail "bindgen for $language"
done

if want kotlin || want cross || want clients; then
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

if want python; then
  step "Python tests (the generated ctypes module, unittest)"
  cp "$LIB" "$GEN/python/"
  (cd "$GEN/python" && IDEMDB_GOLDEN=$ROOT/tests/testdata/golden/store-v1.idemdb PYTHONPATH=. \
    python3 "$CRATE/tests/python/test_bindings.py" 2>&1) | grep -vE '^test_|^ok$|^-+$|^$' || STATUS=1
fi

if want swift; then
  step "Swift: the shipped sources are the ones this library generates"
  SWIFT=$CRATE/swift
  if cmp -s "$GEN/swift/IdemDB.swift" "$SWIFT/Sources/IdemDB/IdemDB.swift" \
      && cmp -s "$GEN/swift/IdemDBFFI.h" "$SWIFT/headers/IdemDBFFI.h" \
      && cmp -s "$GEN/swift/IdemDBFFI.modulemap" "$SWIFT/headers/module.modulemap"; then
    echo "swift: 1 passed, 0 failed (Sources/IdemDB/IdemDB.swift, headers/ current)"
  else
    echo "the shipped Swift sources differ from the generated ones: run bash bindings/uniffi/scripts/test.sh swift-update"
    echo "swift: 0 passed, 1 failed"
    STATUS=1
  fi
  if command -v swift >/dev/null && command -v xcodebuild >/dev/null; then
    bash "$CRATE/scripts/build-xcframework.sh" || STATUS=1
  else
    echo "swift test skipped: no Swift toolchain with Xcode here ($(uname -s)); the XCFramework needs Apple's SDKs."
    echo "  a macOS CI runs: bash bindings/uniffi/scripts/build-xcframework.sh (rustup targets for iOS, the simulator"
    echo "  and macOS, cargo build --release per target, lipo, xcodebuild -create-xcframework, then swift test)"
  fi
fi
if want swift-update; then
  cp "$GEN/swift/IdemDB.swift" "$CRATE/swift/Sources/IdemDB/IdemDB.swift"
  cp "$GEN/swift/IdemDBFFI.h" "$CRATE/swift/headers/IdemDBFFI.h"
  cp "$GEN/swift/IdemDBFFI.modulemap" "$CRATE/swift/headers/module.modulemap"
  echo "Swift sources updated"
fi

# Every LOAD segment of an ELF shared library aligned to 16 KB (0x4000) or more.
aligned_16k() {
  local so=$1 aligns
  aligns=$(readelf -lW "$so" | awk '$1 == "LOAD" {print $NF}')
  [ -n "$aligns" ] || return 1
  for a in $aligns; do [ $((a)) -ge 16384 ] || return 1; done
  echo "${so#"$ROOT"/}: LOAD alignment $(echo $aligns | tr ' ' ',')"
}

if want android; then
  step "Android: the libraries for aarch64-linux-android and x86_64-linux-android, 16 KB pages"
  passed=0; failed=0
  # The link flag comes from the crate's build.rs; the host library shows it takes effect.
  if aligned_16k "$LIB"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "host library not 16 KB aligned"; fi
  if ! command -v clang >/dev/null || ! command -v llvm-ar >/dev/null || [ ! -f /usr/aarch64-linux-gnu/include/string.h ]; then
    if [ "$(id -u)" = 0 ]; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang llvm libc6-dev-arm64-cross >/dev/null
    else
      echo "clang, llvm-ar or the aarch64 libc headers are missing (apt-get install clang llvm libc6-dev-arm64-cross as root)"
    fi
  fi
  for triple in aarch64-linux-android x86_64-linux-android; do
    rustup target list --installed 2>/dev/null | grep -q "^$triple\$" || rustup target add "$triple" >/dev/null
    arch=${triple%%-*}
    env_triple=${triple//-/_}
    # blake3's C code, compiled by Debian's clang for the target, with Debian's libc headers
    # standing in for the NDK sysroot (see android_build in scripts/test-all.sh).
    headers=/usr/$arch-linux-gnu/include
    [ "$arch" = x86_64 ] && headers="/usr/include -isystem /usr/include/x86_64-linux-gnu"
    linker=""
    if [ -n "${ANDROID_NDK_HOME:-}" ]; then
      linker=$(ls "$ANDROID_NDK_HOME"/toolchains/llvm/prebuilt/*/bin/"${triple}"24-clang 2>/dev/null | head -n 1)
    fi
    if [ -n "$linker" ]; then
      # With an NDK: the real .so, linked against bionic.
      upper=$(echo "$env_triple" | tr a-z A-Z)
      if quiet_cargo env "CARGO_TARGET_${upper}_LINKER=$linker" "CC_$env_triple=$linker" "AR_$env_triple=llvm-ar" \
          cargo build --release -p idemdb-uniffi --lib --target "$triple" \
          && aligned_16k "$TARGET/$triple/release/libidemdb_uniffi.so"; then
        passed=$((passed + 1))
      else
        failed=$((failed + 1))
      fi
    else
      # Without an NDK there is no bionic libc to link a .so against: build the static library
      # (the same objects a .so links) and say what is missing.
      if quiet_cargo env "CC_$env_triple=clang" "AR_$env_triple=llvm-ar" "CFLAGS_$env_triple=--target=$triple -isystem $headers" \
          cargo rustc --release -p idemdb-uniffi --lib --target "$triple" --crate-type staticlib; then
        echo "$triple: libidemdb_uniffi.a built ($(du -h "$TARGET/$triple/release/libidemdb_uniffi.a" | cut -f1)); no NDK (ANDROID_NDK_HOME unset), so the .so is not linked here:"
        echo "  with the NDK: cargo ndk -t arm64-v8a -t x86_64 -o jniLibs build --release -p idemdb-uniffi (build.rs adds -z max-page-size=16384)"
        passed=$((passed + 1))
      else
        failed=$((failed + 1))
      fi
    fi
  done
  echo "android: $passed passed, $failed failed"
  [ "$failed" -eq 0 ] || STATUS=1
fi

if want cross; then
  step "Same file, every runtime: Kotlin, the CLI (Rust), Node (npm), Python"
  passed=0; failed=0
  ok() { passed=$((passed + 1)); echo "ok   $*"; }
  ko() { failed=$((failed + 1)); echo "FAIL $*"; }
  X=$(mktemp -d)
  if "${KRUN[@]}" idemdb.test.WorkerKt cross-write "$X/kotlin.idemdb"; then ok "Kotlin writes a store"; else ko "Kotlin writes a store"; fi
  quiet_cargo cargo build -p idemdb-cli || failed=$((failed + 1))
  CLI=$TARGET/debug/idemdb
  cp "$X/kotlin.idemdb" "$X/cli.idemdb"
  if "$CLI" verify "$X/cli.idemdb" >/dev/null && "$CLI" --json get "$X/cli.idemdb" --tenant acme --operation create_payment --key from-kotlin \
      | python3 -c 'import json,sys; r=json.load(sys.stdin); assert r["state"]=="completed" and r["payload_bytes"]==22, r'; then
    ok "the CLI verifies and reads the Kotlin store"
  else
    ko "the CLI verifies and reads the Kotlin store"
  fi
  cp "$X/kotlin.idemdb" "$X/python.idemdb"
  cp "$LIB" "$GEN/python/"
  if (cd "$GEN/python" && IDEMDB_KOTLIN_STORE=$X/python.idemdb PYTHONPATH=. \
      python3 "$CRATE/tests/python/test_bindings.py" CrossRuntime.test_a_store_written_by_kotlin_opens 2>&1) \
      | grep -q '^python: 1 passed, 0 failed$'; then
    ok "Python (Rust through ctypes) reads the Kotlin store"
  else
    ko "Python reads the Kotlin store"
  fi
  NODE_ENTRY=$ROOT/bindings/npm/dist/esm/node.js
  if [ -f "$NODE_ENTRY" ] && command -v node >/dev/null; then
    cp "$X/kotlin.idemdb" "$X/node-read.idemdb"
    if node "$CRATE/tests/cross/node.mjs" "$NODE_ENTRY" read-kotlin "$X/node-read.idemdb"; then ok "Node reads the Kotlin store"; else ko "Node reads the Kotlin store"; fi
    if node "$CRATE/tests/cross/node.mjs" "$NODE_ENTRY" write "$X/node.idemdb" \
        && "${KRUN[@]}" idemdb.test.WorkerKt cross-read node "$X/node.idemdb"; then
      ok "Kotlin reads a store Node wrote"
    else
      ko "Kotlin reads a store Node wrote"
    fi
  else
    echo "Node part skipped: the npm package is not built ($NODE_ENTRY missing; scripts/test-all.sh builds it in its npm step, before this one)"
  fi
  rm -rf "$X"
  echo "cross: $passed passed, $failed failed"
  [ "$failed" -eq 0 ] || STATUS=1
fi

if want clients; then
  step "One lossy service, four clients: npm, Rust, Kotlin, Python (killed once, resumed)"
  # tests/clients/run.mjs: each client sends its payments to server.mjs, which loses answers
  # after the effect, refuses connections, answers 503, stalls into 409 in-progress, answers
  # another service's 400 and binds some keys to another request (422); each client is killed
  # with SIGKILL once after some sends and resumed on the same store file. Checks one effect per
  # intent answered 201, none for a refused one, at most one per key and per payment, a final
  # answer (or needs attention) for every intent.
  SEED=${IDEMDB_CLIENTS_SEED:-$RANDOM}
  NODE_ENTRY=$ROOT/bindings/npm/dist/esm/node.js
  clients_ok=1
  command -v node >/dev/null || { echo "no node (Node 20+ runs the service and the npm client)"; clients_ok=0; }
  if [ ! -f "$NODE_ENTRY" ]; then
    echo "the npm package is not built ($NODE_ENTRY missing): run bash bindings/npm/scripts/test-all.sh (scripts/test-all.sh runs it first) or npm run build in bindings/npm"
    clients_ok=0
  fi
  [ -f "${KJAR:-}" ] || { echo "the Kotlin tests jar is missing (kotlinc failed above)"; clients_ok=0; }
  if ! quiet_cargo cargo build -p idemdb-http --features client --example lossy_client; then
    echo "cargo build --example lossy_client failed"; clients_ok=0
  fi
  cp "$LIB" "$GEN/python/"
  if [ "$clients_ok" = 1 ]; then
    as_json() { python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$@"; }
    echo "seed $SEED (IDEMDB_CLIENTS_SEED=$SEED reproduces the service's answers)"
    node "$CRATE/tests/clients/run.mjs" --seed "$SEED" --intents "${IDEMDB_CLIENTS_INTENTS:-25}" \
      --client "npm=$(as_json node "$CRATE/tests/clients/npm.mjs" "$NODE_ENTRY")" \
      --client "rust=$(as_json "$TARGET/debug/examples/lossy_client")" \
      --client "kotlin=$(as_json "${KRUN[@]}" idemdb.test.ClientsKt)" \
      --client "python=$(as_json env "PYTHONPATH=$GEN/python" python3 "$CRATE/tests/clients/client.py")" \
      || STATUS=1
  else
    echo "clients: 0 passed, 1 failed"
    STATUS=1
  fi
fi

exit $STATUS
