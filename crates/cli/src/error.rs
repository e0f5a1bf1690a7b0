//! Exit codes and the one-line error reports the tool prints.

use std::error::Error;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// How the process ends (besides clap's usage errors, which exit with 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// 0: success.
    Ok,
    /// 1: `verify` found problems, or `demo` saw a duplicate effect.
    Problems,
    /// 2: an invalid argument (clap reports its own usage errors with 2 as well).
    Usage,
    /// 3: the store could not be opened.
    Open,
    /// 4: any other runtime error.
    Runtime,
}

impl Exit {
    pub(crate) fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Problems => 1,
            Exit::Usage => 2,
            Exit::Open => 3,
            Exit::Runtime => 4,
        }
    }
}

/// A failure reported as `error: <file>: <cause chain>`.
#[derive(Debug)]
pub(crate) struct CliError {
    exit: Exit,
    file: Option<PathBuf>,
    message: String,
}

impl CliError {
    /// The store at `file` could not be opened (exit 3).
    pub(crate) fn open(file: &Path, error: &dyn Error) -> Self {
        CliError { exit: Exit::Open, file: Some(file.to_path_buf()), message: cause_chain(error) }
    }

    /// The store at `file` could not be opened, with a message of our own (exit 3).
    pub(crate) fn open_msg(file: &Path, message: impl Into<String>) -> Self {
        CliError { exit: Exit::Open, file: Some(file.to_path_buf()), message: message.into() }
    }

    /// An argument whose value is invalid, named by its flag (exit 2).
    pub(crate) fn usage(flag: &str, error: &dyn Error) -> Self {
        CliError { exit: Exit::Usage, file: None, message: format!("invalid value for {flag}: {}", cause_chain(error)) }
    }

    /// An argument whose value is invalid, with a message of our own (exit 2).
    pub(crate) fn usage_msg(flag: &str, message: &str) -> Self {
        CliError { exit: Exit::Usage, file: None, message: format!("invalid value for {flag}: {message}") }
    }

    /// A target that is not a file (a database, named by its redacted URL) could not be
    /// opened (exit 3).
    pub(crate) fn open_target(target: &str, error: &dyn Error) -> Self {
        CliError { exit: Exit::Open, file: Some(PathBuf::from(target)), message: cause_chain(error) }
    }

    /// A runtime error concerning a target that is not a file (exit 4).
    pub(crate) fn runtime_target(target: &str, context: &str, error: &dyn Error) -> Self {
        CliError {
            exit: Exit::Runtime,
            file: Some(PathBuf::from(target)),
            message: format!("{context}: {}", cause_chain(error)),
        }
    }

    /// A runtime error concerning `file` (exit 4).
    pub(crate) fn runtime(file: &Path, error: &dyn Error) -> Self {
        CliError { exit: Exit::Runtime, file: Some(file.to_path_buf()), message: cause_chain(error) }
    }

    /// A runtime error concerning `file`, with context before the cause (exit 4).
    pub(crate) fn runtime_ctx(file: &Path, context: &str, error: &dyn Error) -> Self {
        CliError {
            exit: Exit::Runtime,
            file: Some(file.to_path_buf()),
            message: format!("{context}: {}", cause_chain(error)),
        }
    }

    /// A runtime error with a message of our own (exit 4).
    pub(crate) fn runtime_msg(file: Option<&Path>, message: impl Into<String>) -> Self {
        CliError { exit: Exit::Runtime, file: file.map(Path::to_path_buf), message: message.into() }
    }

    pub(crate) fn exit(&self) -> Exit {
        self.exit
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.file {
            Some(file) => write!(f, "error: {}: {}", file.display(), self.message),
            None => write!(f, "error: {}", self.message),
        }
    }
}

/// The error's message followed by each source's, joined by `: `. A source whose text the
/// message already contains (errors that print their cause inline) is not repeated.
pub(crate) fn cause_chain(error: &dyn Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let part = cause.to_string();
        if !part.is_empty() && !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = cause.source();
    }
    text
}

/// The file the command is working on, named in the report of an internal failure.
static CURRENT_FILE: Mutex<Option<PathBuf>> = Mutex::new(None);
/// The message of the last panic, captured instead of printed.
static PANIC_MESSAGE: Mutex<Option<String>> = Mutex::new(None);

/// Records which file the command works on (for reports of internal failures).
pub(crate) fn set_current_file(file: &Path) {
    if let Ok(mut current) = CURRENT_FILE.lock() {
        *current = Some(file.to_path_buf());
    }
}

/// Runs `f`, turning a panic (a bug, or a storage layer tripping over a damaged file) into an
/// error message instead of a backtrace dump. Returns the panic's message on a panic.
pub(crate) fn guard<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let previous = panic::take_hook();
    panic::set_hook(Box::new(|info| {
        let message = if let Some(text) = info.payload().downcast_ref::<&str>() {
            (*text).to_string()
        } else if let Some(text) = info.payload().downcast_ref::<String>() {
            text.clone()
        } else {
            "unknown cause".to_string()
        };
        if let Ok(mut slot) = PANIC_MESSAGE.lock() {
            *slot = Some(message);
        }
    }));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    panic::set_hook(previous);
    result.map_err(|_| {
        PANIC_MESSAGE.lock().ok().and_then(|mut slot| slot.take()).unwrap_or_else(|| "unknown cause".to_string())
    })
}

/// Runs the command; a panic becomes an internal error (exit 4) naming the file in use.
pub(crate) fn catch_panics(f: impl FnOnce() -> Result<Exit, CliError>) -> Result<Exit, CliError> {
    match guard(f) {
        Ok(result) => result,
        Err(message) => {
            let file = CURRENT_FILE.lock().ok().and_then(|current| current.clone());
            let hint = match &file {
                Some(file) => format!(" (the file may be damaged: try `idemdb verify {}`)", file.display()),
                None => String::new(),
            };
            Err(CliError::runtime_msg(file.as_deref(), format!("internal error: {message}{hint}")))
        }
    }
}
