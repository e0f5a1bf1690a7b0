#!/usr/bin/env bash
# Builds bindings/uniffi/swift/IdemDBFFI.xcframework on macOS with Xcode (cc-rs finds the iPhone
# SDK through xcrun, which only Apple's toolchain has), regenerates the Swift sources from the
# same library, and runs `swift test` on the package. What a macOS CI runs:
#
#   bash bindings/uniffi/scripts/build-xcframework.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
SWIFT=$ROOT/bindings/uniffi/swift
TARGETS=(aarch64-apple-ios aarch64-apple-ios-sim x86_64-apple-ios aarch64-apple-darwin x86_64-apple-darwin)
rustup target add "${TARGETS[@]}"
for t in "${TARGETS[@]}"; do
  cargo build --release -p idemdb-uniffi --lib --target "$t"
done
# Swift sources from the host library (the same interface on every target).
cargo build -p idemdb-uniffi --features cli --bin uniffi-bindgen
cargo build --release -p idemdb-uniffi --lib
GEN=$(mktemp -d)
"$TARGET/debug/uniffi-bindgen" generate --library "$TARGET/release/libidemdb_uniffi.dylib" --language swift --out-dir "$GEN"
cp "$GEN/IdemDB.swift" "$SWIFT/Sources/IdemDB/IdemDB.swift"
HEADERS=$GEN/headers
mkdir -p "$HEADERS"
cp "$GEN/IdemDBFFI.h" "$HEADERS/"
cp "$GEN/IdemDBFFI.modulemap" "$HEADERS/module.modulemap"
# One library per platform: the simulator and macOS slices are fat (arm64 + x86_64).
mkdir -p "$GEN/sim" "$GEN/mac"
lipo -create "$TARGET/aarch64-apple-ios-sim/release/libidemdb_uniffi.a" "$TARGET/x86_64-apple-ios/release/libidemdb_uniffi.a" \
  -output "$GEN/sim/libidemdb_uniffi.a"
lipo -create "$TARGET/aarch64-apple-darwin/release/libidemdb_uniffi.a" "$TARGET/x86_64-apple-darwin/release/libidemdb_uniffi.a" \
  -output "$GEN/mac/libidemdb_uniffi.a"
rm -rf "$SWIFT/IdemDBFFI.xcframework"
xcodebuild -create-xcframework \
  -library "$TARGET/aarch64-apple-ios/release/libidemdb_uniffi.a" -headers "$HEADERS" \
  -library "$GEN/sim/libidemdb_uniffi.a" -headers "$HEADERS" \
  -library "$GEN/mac/libidemdb_uniffi.a" -headers "$HEADERS" \
  -output "$SWIFT/IdemDBFFI.xcframework"
(cd "$SWIFT" && swift test)
git -C "$ROOT" diff --exit-code -- bindings/uniffi/swift/Sources || echo "the generated Swift sources changed: commit them"
