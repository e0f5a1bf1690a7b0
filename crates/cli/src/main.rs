//! The `idemdb` command-line tool.
fn main() {}
