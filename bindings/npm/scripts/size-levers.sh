#!/usr/bin/env bash
# Measures what each lever does to the size of the engine's .wasm (raw and gzipped, after
# wasm-bindgen with the name and producers sections removed, as the build ships it). A
# measuring tool, not part of the test command: each lever is a fresh release build in its own
# target directory (a few minutes each on 2 cores).
#
#   bash bindings/npm/scripts/size-levers.sh [lever ...]
#
# Levers: baseline, opt-s, wasm-opt-oz, wasm-opt-os, keep-sections, tracing-off,
# immediate-abort, no-location, fmt-debug-shallow, nightly-tracing-off, optimize-for-size, shipped. Needs wasm-bindgen (the pinned version),
# and for the nightly levers the nightly toolchain with rust-src; wasm-opt from the npm
# `binaryen` package (installed into target/size-levers/binaryen when missing).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
OUT="$ROOT/target/size-levers"
mkdir -p "$OUT"
LEVERS=("$@")
[ ${#LEVERS[@]} -gt 0 ] || LEVERS=(baseline opt-s wasm-opt-oz wasm-opt-os keep-sections tracing-off immediate-abort no-location fmt-debug-shallow nightly-tracing-off optimize-for-size shipped)
BINARYEN_VERSION=132.0.0

# raw, gzip level 9 and brotli quality 11 bytes of a file.
gz() { node -e "const z=require('zlib');const b=require('fs').readFileSync(process.argv[1]);console.log(b.length, z.gzipSync(b,{level:9}).length, z.brotliCompressSync(b,{params:{[z.constants.BROTLI_PARAM_QUALITY]:11,[z.constants.BROTLI_PARAM_SIZE_HINT]:b.length}}).length)" "$1"; }

wasm_opt() {
  if [ ! -x "$OUT/binaryen/node_modules/.bin/wasm-opt" ]; then
    mkdir -p "$OUT/binaryen"
    (cd "$OUT/binaryen" && echo '{"private":true}' > package.json && npm install --silent --no-audit --no-fund "binaryen@$BINARYEN_VERSION" >/dev/null)
  fi
  "$OUT/binaryen/node_modules/.bin/wasm-opt" "$@"
}

# build NAME TOOLCHAIN [cargo args...]; env RUSTFLAGS as given. Prints the cargo output's path.
build() {
  local name=$1 toolchain=$2; shift 2
  (cd "$ROOT" && CARGO_TARGET_DIR="$OUT/$name" cargo "+$toolchain" build --quiet -p idemdb-wasm --target wasm32-unknown-unknown --profile wasm-release "$@" >&2)
  echo "$OUT/$name/wasm32-unknown-unknown/wasm-release/idemdb_wasm.wasm"
}

bindgen() { # bindgen INPUT OUTDIR [extra flags]; prints the .wasm path
  local input=$1 dir=$2; shift 2
  rm -rf "$dir"
  wasm-bindgen --target web --weak-refs "$@" --out-dir "$dir" "$input" >&2
  echo "$dir/idemdb_wasm_bg.wasm"
}
STRIP=(--remove-name-section --remove-producers-section)

report() { printf '%-20s %10s %10s %10s   %s\n' "$1" $(gz "$2") "$3"; }
printf '%-20s %10s %10s %10s   %s\n' lever raw gzip brotli note

for lever in "${LEVERS[@]}"; do
  case $lever in
    baseline)
      report baseline "$(bindgen "$(build baseline stable)" "$OUT/baseline/bg" "${STRIP[@]}")" 'opt-level z, LTO, 1 CGU, panic=abort (shipped)' ;;
    opt-s)
      report opt-s "$(bindgen "$(CARGO_PROFILE_WASM_RELEASE_OPT_LEVEL=s build opt-s stable)" "$OUT/opt-s/bg" "${STRIP[@]}")" 'opt-level s' ;;
    wasm-opt-oz | wasm-opt-os)
      flag=-O${lever##*-o}
      input=$(bindgen "$(build baseline stable)" "$OUT/baseline/bg" "${STRIP[@]}")
      wasm_opt "$flag" "$input" -o "$OUT/$lever.wasm"
      report "$lever" "$OUT/$lever.wasm" "npm binaryen $BINARYEN_VERSION wasm-opt $flag after wasm-bindgen" ;;
    keep-sections)
      report keep-sections "$(bindgen "$(build baseline stable)" "$OUT/keep/bg")" 'baseline without --remove-name-section / --remove-producers-section' ;;
    tracing-off)
      report tracing-off "$(bindgen "$(build tracing-off stable --features idemdb-wasm/tracing-off)" "$OUT/tracing-off/bg" "${STRIP[@]}")" 'tracing max_level_off' ;;
    immediate-abort)
      input=$(RUSTFLAGS='-Zunstable-options -Cpanic=immediate-abort' build immediate-abort nightly -Zbuild-std=std,panic_abort)
      report immediate-abort "$(bindgen "$input" "$OUT/immediate-abort/bg" "${STRIP[@]}")" 'nightly build-std, -Cpanic=immediate-abort' ;;
    no-location)
      input=$(RUSTFLAGS='-Zunstable-options -Cpanic=immediate-abort -Zlocation-detail=none' build no-location nightly -Zbuild-std=std,panic_abort)
      report no-location "$(bindgen "$input" "$OUT/no-location/bg" "${STRIP[@]}")" 'immediate-abort + -Zlocation-detail=none' ;;
    fmt-debug-shallow)
      input=$(RUSTFLAGS='-Zunstable-options -Cpanic=immediate-abort -Zlocation-detail=none -Zfmt-debug=shallow' build fmt-debug-shallow nightly -Zbuild-std=std,panic_abort)
      report fmt-debug-shallow "$(bindgen "$input" "$OUT/fmt-debug-shallow/bg" "${STRIP[@]}")" 'no-location + -Zfmt-debug=shallow (Debug prints type names only)' ;;
    optimize-for-size)
      input=$(RUSTFLAGS='-Zunstable-options -Cpanic=immediate-abort -Zlocation-detail=none' build optimize-for-size nightly -Zbuild-std=std,panic_abort -Zbuild-std-features=optimize_for_size --features idemdb-wasm/tracing-off)
      report optimize-for-size "$(bindgen "$input" "$OUT/optimize-for-size/bg" "${STRIP[@]}")" 'no-location + tracing-off + std optimize_for_size' ;;
    nightly-tracing-off)
      input=$(RUSTFLAGS='-Zunstable-options -Cpanic=immediate-abort -Zlocation-detail=none' build nightly-tracing-off nightly -Zbuild-std=std,panic_abort --features idemdb-wasm/tracing-off)
      out=$(bindgen "$input" "$OUT/nightly-tracing-off/bg" "${STRIP[@]}")
      report nightly-tracing-off "$out" 'no-location + tracing-off'
      wasm_opt -Oz "$out" -o "$OUT/nightly-tracing-off-oz.wasm"
      report nightly+wasm-opt-oz "$OUT/nightly-tracing-off-oz.wasm" 'the above, then wasm-opt -Oz' ;;
    shipped)
      STD_O3=(--config profile.wasm-release.package.std.opt-level=3 --config profile.wasm-release.package.core.opt-level=3 --config profile.wasm-release.package.alloc.opt-level=3)
      input=$(RUSTFLAGS='-Zunstable-options -Cpanic=immediate-abort -Zlocation-detail=none' build shipped nightly -Zbuild-std=std,panic_abort --features idemdb-wasm/tracing-off "${STD_O3[@]}")
      report shipped "$(bindgen "$input" "$OUT/shipped/bg" "${STRIP[@]}")" 'nightly-tracing-off with std/core/alloc at opt-level 3 (scripts/build.mjs)' ;;
    *) echo "unknown lever $lever" >&2; exit 2 ;;
  esac
done
