//! The child process of the `kill -9` test (see `idemdb_reliability::kill`).
#![forbid(unsafe_code)]

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(error) = idemdb_reliability::kill::child_main(&args) {
        println!("X {}", error.replace('\n', " "));
        std::process::exit(1);
    }
}
