//! The child process of the `kill -9` test (see `idemdb_reliability::kill`) and, as
//! `reliability-child writer ...`, the writer of the operators test (see
//! `idemdb_reliability::operators`), and as `reliability-child backup-writer ...` the writer that
//! takes backups on request (see `idemdb_reliability::live_backup`), and as
//! `reliability-child audit-writer ...` the writer of the audit durability test (see
//! `idemdb_reliability::audit_durability`).
#![forbid(unsafe_code)]

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.split_first() {
        Some((mode, rest)) if mode == "writer" => idemdb_reliability::operators::writer_main(rest),
        Some((mode, rest)) if mode == "journal-writer" => idemdb_reliability::journal_aliases::child_main(rest),
        Some((mode, rest)) if mode == "seq-writer" => idemdb_reliability::operator_sequences::child_main(rest),
        Some((mode, rest)) if mode == "backup-writer" => idemdb_reliability::live_backup::backup_writer_main(rest),
        Some((mode, rest)) if mode == "audit-writer" => idemdb_reliability::audit_durability::child_main(rest),
        _ => idemdb_reliability::kill::child_main(&args),
    };
    if let Err(error) = outcome {
        println!("X {}", error.replace('\n', " "));
        std::process::exit(1);
    }
}
