//! `cargo xtask reliability [--quick|--full]`.
fn main() {}
