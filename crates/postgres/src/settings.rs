//! Connection settings as PostgreSQL's own tools take them: a URL or `key=value` string (either
//! optional), the standard `PG*` environment variables for what it leaves out, and a password
//! from a file — so that no password needs to be on a command line. Passwords are never part of
//! what [`describe`] prints.

use std::path::{Path, PathBuf};

use tokio_postgres::Config;
use tokio_postgres::config::{Host, SslMode};

use crate::error::ConnectError;

/// The environment variables read, as libpq reads them: each fills in what the URL does not say.
///
/// | variable | setting |
/// |---|---|
/// | `PGHOST` | host name, IP address or Unix socket directory (comma-separated list) |
/// | `PGPORT` | port (comma-separated, one per host, or one for all; a `postgresql://` URL without a port means 5432) |
/// | `PGUSER` | user (default: the `USER` of the process) |
/// | `PGPASSWORD` | password (prefer a password file) |
/// | `PGDATABASE` | database (default: the user's name, as libpq) |
/// | `PGPASSFILE` | the password file (default `~/.pgpass`) |
/// | `PGSSLMODE` | `disable`, `prefer` or `require` (`verify-*` need a TLS connector: refused) |
/// | `PGAPPNAME` | `application_name` |
/// | `PGCONNECT_TIMEOUT` | seconds to connect |
pub const ENVIRONMENT: &[&str] = &[
    "PGHOST",
    "PGPORT",
    "PGUSER",
    "PGPASSWORD",
    "PGDATABASE",
    "PGPASSFILE",
    "PGSSLMODE",
    "PGAPPNAME",
    "PGCONNECT_TIMEOUT",
];

/// Connection settings from `url` (a `postgresql://` URL or `key=value` pairs; `None`: none),
/// completed by the `PG*` environment variables ([`ENVIRONMENT`]), then the password: the
/// URL's, else the first line of `password_file`, else `PGPASSWORD`, else the matching line of
/// the password file (`PGPASSFILE` or `~/.pgpass`, `host:port:database:user:password` with `*`
/// wildcards, ignored when group or others can read it, as libpq does).
///
/// # Errors
/// [`ConnectError::Config`] for a URL or variable that does not parse, or an unreadable
/// `password_file`; the message never holds a password.
pub fn connection_config(url: Option<&str>, password_file: Option<&Path>) -> Result<Config, ConnectError> {
    connection_config_from(url, password_file, &|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
}

/// [`connection_config`] with the environment given as a function (for tests).
pub(crate) fn connection_config_from(
    url: Option<&str>,
    password_file: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConnectError> {
    let mut config = match url {
        // The parser's messages name the option, never its value.
        Some(url) => {
            url.parse::<Config>().map_err(|error| ConnectError::Config(format!("connection string: {error}")))?
        }
        None => Config::new(),
    };
    if config.get_hosts().is_empty()
        && let Some(hosts) = env("PGHOST")
    {
        for host in hosts.split(',').filter(|h| !h.is_empty()) {
            if host.starts_with('/') {
                config.host_path(host);
            } else {
                config.host(host);
            }
        }
    }
    if config.get_hosts().is_empty() {
        config.host("localhost");
    }
    if config.get_ports().is_empty()
        && let Some(ports) = env("PGPORT")
    {
        for port in ports.split(',') {
            let port =
                port.trim().parse::<u16>().map_err(|_| ConnectError::Config("PGPORT is not a port number".into()))?;
            config.port(port);
        }
    }
    if config.get_user().is_none()
        && let Some(user) = env("PGUSER").or_else(|| env("USER"))
    {
        config.user(&user);
    }
    if config.get_dbname().is_none() {
        if let Some(database) = env("PGDATABASE") {
            config.dbname(&database);
        } else if let Some(user) = config.get_user().map(str::to_string) {
            config.dbname(&user);
        }
    }
    if config.get_application_name().is_none()
        && let Some(name) = env("PGAPPNAME")
    {
        config.application_name(&name);
    }
    if let Some(seconds) = env("PGCONNECT_TIMEOUT") {
        let seconds = seconds
            .trim()
            .parse::<u64>()
            .map_err(|_| ConnectError::Config("PGCONNECT_TIMEOUT is not a number".into()))?;
        config.connect_timeout(std::time::Duration::from_secs(seconds.max(2)));
    }
    if let Some(mode) = env("PGSSLMODE") {
        config.ssl_mode(match mode.as_str() {
            "disable" => SslMode::Disable,
            "allow" | "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            other => {
                return Err(ConnectError::Config(format!(
                    "PGSSLMODE={other} is not supported here (disable, allow, prefer, require)"
                )));
            }
        });
    }
    if config.get_password().is_none() {
        if let Some(file) = password_file {
            let text = std::fs::read_to_string(file)
                .map_err(|error| ConnectError::Config(format!("password file {}: {}", file.display(), error.kind())))?;
            config.password(text.lines().next().unwrap_or(""));
        } else if let Some(password) = env("PGPASSWORD") {
            config.password(&password);
        } else if let Some(password) = from_passfile(&config, env) {
            config.password(&password);
        }
    }
    Ok(config)
}

/// The password file's line for the first host of `config`, if any.
fn from_passfile(config: &Config, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let path =
        env("PGPASSFILE").map(PathBuf::from).or_else(|| env("HOME").map(|home| Path::new(&home).join(".pgpass")))?;
    let text = read_private(&path)?;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        #[cfg(unix)]
        Some(Host::Unix(_)) => "localhost".to_string(),
        None => "localhost".to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432).to_string();
    let database = config.get_dbname().unwrap_or("");
    let user = config.get_user().unwrap_or("");
    text.lines().filter(|line| !line.starts_with('#')).find_map(|line| {
        let fields = split_passfile_line(line);
        let [h, p, d, u, password] = fields.as_slice() else { return None };
        let matches = |pattern: &str, value: &str| pattern == "*" || pattern == value;
        (matches(h, &host) && matches(p, &port) && matches(d, database) && matches(u, user)).then(|| password.clone())
    })
}

/// The file's text, unless group or others may read it (libpq ignores such a file too).
fn read_private(path: &Path) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).ok()?.permissions().mode();
        if mode & 0o077 != 0 {
            tracing::warn!(
                target: "idemdb",
                path = %path.display(),
                "password file ignored: group or others can read it (chmod 0600)"
            );
            return None;
        }
    }
    std::fs::read_to_string(path).ok()
}

/// Splits a password file line on `:`, with `\:` and `\\` escapes.
fn split_passfile_line(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(next), Some(field)) = (chars.next(), fields.last_mut()) {
                    field.push(next);
                }
            }
            ':' => fields.push(String::new()),
            c => {
                if let Some(field) = fields.last_mut() {
                    field.push(c);
                }
            }
        }
    }
    fields
}

/// What the settings connect to, for messages and logs: `user@host:port/database`, never
/// the password.
pub fn describe(config: &Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|host| match host {
            Host::Tcp(name) => name.clone(),
            #[cfg(unix)]
            Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    let port = if ports.is_empty() { String::new() } else { format!(":{}", ports.join(",")) };
    format!("{}@{}{port}/{}", config.get_user().unwrap_or("?"), hosts.join(","), config.get_dbname().unwrap_or("?"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn the_environment_fills_in_what_the_url_leaves_out() {
        let env = env_of(&[("PGHOST", "db.internal"), ("PGPORT", "6432"), ("PGUSER", "app"), ("PGPASSWORD", "s3")]);
        let config = connection_config_from(None, None, &env).unwrap();
        assert_eq!(describe(&config), "app@db.internal:6432/app");
        assert_eq!(config.get_password(), Some(b"s3".as_slice()));
        // The driver's URL parser gives a URL without a port 5432, so PGPORT fills in the
        // `key=value` form and the environment alone, not a URL.
        let config = connection_config_from(Some("user=other host=h dbname=pay"), None, &env).unwrap();
        assert_eq!(describe(&config), "other@h:6432/pay");
        let config = connection_config_from(Some("postgresql://other@h/pay"), None, &env).unwrap();
        assert_eq!(describe(&config), "other@h:5432/pay");
        let config = connection_config_from(Some("postgresql://u:url-pw@h/pay"), None, &env).unwrap();
        assert_eq!(config.get_password(), Some(b"url-pw".as_slice()));
    }

    #[test]
    fn password_files_match_like_libpq_and_never_show() {
        let dir = tempfile::tempdir().unwrap();
        let pass = dir.path().join("pgpass");
        std::fs::write(&pass, "# comment\nother:*:*:*:no\ndb:5432:pay:app:pa\\:ss\n*:*:*:*:fallback\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&pass, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let path: &'static str = Box::leak(pass.display().to_string().into_boxed_str());
        let env = move |name: &str| (name == "PGPASSFILE").then(|| path.to_string());
        let config = connection_config_from(Some("postgresql://app@db/pay"), None, &env).unwrap();
        assert_eq!(config.get_password(), Some(b"pa:ss".as_slice()));
        assert!(!describe(&config).contains("pa:ss"));
        let config = connection_config_from(Some("postgresql://app@elsewhere/pay"), None, &env).unwrap();
        assert_eq!(config.get_password(), Some(b"fallback".as_slice()));
        // A one-line password file given by name wins over the environment.
        let single = dir.path().join("secret");
        std::fs::write(&single, "only-this\n").unwrap();
        let config = connection_config_from(Some("postgresql://app@db/pay"), Some(&single), &env).unwrap();
        assert_eq!(config.get_password(), Some(b"only-this".as_slice()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&pass, std::fs::Permissions::from_mode(0o644)).unwrap();
            let config = connection_config_from(Some("postgresql://app@db/pay"), None, &env).unwrap();
            assert_eq!(config.get_password(), None, "a readable password file is ignored");
        }
    }

    #[test]
    fn bad_settings_are_config_errors_without_the_password() {
        let error = connection_config_from(Some("postgresql://u:hunter2@h:notaport/d"), None, &|_| None).unwrap_err();
        assert!(!error.to_string().contains("hunter2"), "{error}");
        assert!(matches!(error, ConnectError::Config(_)));
        let env = env_of(&[("PGSSLMODE", "verify-full")]);
        assert!(connection_config_from(None, None, &env).is_err());
    }
}
