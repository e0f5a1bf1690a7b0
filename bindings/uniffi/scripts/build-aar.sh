#!/usr/bin/env bash
# Assembles an Android library (AAR) of the bindings: classes.jar (the generated Kotlin,
# compiled with kotlinc against JNA) and jni/<abi>/libidemdb_uniffi.so for arm64-v8a and
# x86_64, linked by cargo-ndk with 16 KB pages (build.rs) and checked with readelf.
#
#   ANDROID_NDK_HOME=/path/to/ndk bash bindings/uniffi/scripts/build-aar.sh
#
# The app adds JNA's Android build and coroutines itself
# (net.java.dev.jna:jna:5.13.0@aar, org.jetbrains.kotlinx:kotlinx-coroutines-android).
# Without an NDK it stops after classes.jar and says so: the .so needs bionic's libc.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
OUT=$TARGET/uniffi-aar
KC=$TARGET/uniffi-tools/node_modules/kotlin-compiler
[ -x "$KC/bin/kotlinc-jvm" ] || (mkdir -p "$TARGET/uniffi-tools" && cd "$TARGET/uniffi-tools" && npm install --silent --no-audit --no-fund --no-save kotlin-compiler@2.4)
rm -rf "$OUT" && mkdir -p "$OUT/aar" "$OUT/gen"
cargo build --quiet -p idemdb-uniffi --features cli --lib --bin uniffi-bindgen
"$TARGET/debug/uniffi-bindgen" generate --no-format --library "$TARGET/debug/libidemdb_uniffi.so" --language kotlin --out-dir "$OUT/gen"
"$KC/bin/kotlinc-jvm" -nowarn -jvm-target 1.8 -cp "/usr/share/java/jna.jar:$KC/lib/kotlinx-coroutines-core-jvm.jar" \
  -d "$OUT/classes" "$OUT/gen/idemdb/idemdb_uniffi.kt"
(cd "$OUT/classes" && jar cf "$OUT/aar/classes.jar" .)
cat > "$OUT/aar/AndroidManifest.xml" <<'XML'
<?xml version="1.0" encoding="utf-8"?>
<manifest xmlns:android="http://schemas.android.com/apk/res/android" package="idemdb">
    <uses-sdk android:minSdkVersion="24" />
</manifest>
XML
touch "$OUT/aar/R.txt"
if [ -z "${ANDROID_NDK_HOME:-}" ]; then
  echo "classes.jar built in $OUT/aar; no NDK (ANDROID_NDK_HOME unset): the jni/<abi>/ libraries need one:"
  echo "  cargo install cargo-ndk && ANDROID_NDK_HOME=... bash bindings/uniffi/scripts/build-aar.sh"
  exit 1
fi
command -v cargo-ndk >/dev/null || cargo install cargo-ndk
rustup target add aarch64-linux-android x86_64-linux-android
cargo ndk -t arm64-v8a -t x86_64 -o "$OUT/aar/jni" build --release -p idemdb-uniffi
for so in "$OUT"/aar/jni/*/libidemdb_uniffi.so; do
  aligns=$(readelf -lW "$so" | awk '$1 == "LOAD" {print $NF}')
  for a in $aligns; do [ $((a)) -ge 16384 ] || { echo "$so: LOAD alignment $a < 16 KB"; exit 1; }; done
  echo "$so: LOAD alignment $(echo $aligns | tr ' ' ',')"
done
(cd "$OUT/aar" && rm -f ../idemdb-uniffi.aar && jar cfM ../idemdb-uniffi.aar .)
echo "AAR: $OUT/idemdb-uniffi.aar"
