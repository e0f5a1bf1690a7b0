//! Links the shared library with 16 KB page alignment on Linux and Android: Google Play requires
//! it for apps targeting Android 15+ (devices with 16 KB pages cannot load a `.so` whose LOAD
//! segments are aligned to 4 KB). Only the `cdylib` gets the flag; the test command checks the
//! result with `readelf -l`.

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "android" || os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,max-page-size=16384");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
