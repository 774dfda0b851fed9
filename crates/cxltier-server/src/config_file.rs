//! A Redis configuration file (`redis.conf`), as `redis-server FILE` reads one: a directive and its
//! arguments per line, `#` comments, arguments split as Redis's `sdssplitargs` splits them
//! (double quotes with `\n`, `\xHH` ... escapes, single quotes), `include` of other files.
//!
//! [`read`] turns a file into [`ConfigFile`]: what `cxltier serve` decides at start (the address,
//! the password, the databases, the limits on clients, the working directory, where the log
//! goes) and the rest of Redis's parameters, which the server applies before it serves the first
//! client with CONFIG SET's own checks ([`crate::ServerConfig::settings`]), immutable ones
//! included, as Redis applies its file. A directive Redis does not know, a wrong number of
//! arguments, or one that cxltier cannot honour (`daemonize yes`, `rename-command`,
//! `loadmodule`) refuses the file, naming the file, the line and what to do.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use crate::limits::OutputBufferLimit;

/// Largest configuration file read (Redis has no bound; a file this large is no configuration).
const MAX_FILE_BYTES: u64 = 16 << 20;
/// How deep `include` may nest (a file that includes itself is refused long before).
const MAX_INCLUDE_DEPTH: usize = 16;

/// Where a directive was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub file: PathBuf,
    /// 1-based.
    pub line: usize,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// One of Redis's parameters set by the file, applied by the server at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// Lower case, as the file spells it (an alias stays an alias).
    pub name: String,
    /// The arguments joined by spaces, as CONFIG SET takes a multi-word value (`save 900 1`).
    pub value: String,
    pub origin: Origin,
}

/// What a configuration file says.
#[derive(Debug, Default, Clone)]
pub struct ConfigFile {
    /// `port` (Redis's default 6379 when only `bind` is given).
    pub port: Option<u16>,
    /// The first address of `bind` (Redis binds each; cxltier serve listens on one).
    pub bind: Option<IpAddr>,
    pub requirepass: Option<String>,
    pub max_clients: Option<usize>,
    pub databases: Option<usize>,
    pub client_query_buffer_limit: Option<usize>,
    /// `client-output-buffer-limit normal HARD SOFT SECONDS`.
    pub client_output_buffer_limit: Option<OutputBufferLimit>,
    /// `dir`: the working directory, entered before the store is opened (Redis enters it as it
    /// reads the line).
    pub dir: Option<PathBuf>,
    /// `logfile`: `Some(None)` for `logfile ""` (standard output), `Some(Some(path))` to append
    /// to a file.
    pub log_file: Option<Option<PathBuf>>,
    /// `pidfile`: written with the server's pid once it listens.
    pub pid_file: Option<PathBuf>,
    /// The rest of Redis's parameters, in the file's order.
    pub settings: Vec<Setting>,
    /// `user` lines (ACL rules), in the file's order.
    pub users: Vec<(Vec<String>, Origin)>,
    /// What is accepted but not done, for the operator (a second `bind` address, `unixsocket`).
    pub warnings: Vec<String>,
}

impl ConfigFile {
    /// The address to listen on: `bind` and `port`, each defaulting as Redis's.
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        if self.port.is_none() && self.bind.is_none() {
            return None;
        }
        let ip = self.bind.unwrap_or(IpAddr::from([127, 0, 0, 1]));
        Some(SocketAddr::new(ip, self.port.unwrap_or(6379)))
    }
}

/// Why a configuration file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("reading the configuration file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{origin}: {message}")]
    Directive { origin: Origin, message: String },
}

impl cxltier_error::Classify for ConfigFileError {
    fn class(&self) -> cxltier_error::Class {
        match self {
            ConfigFileError::Read { source, .. }
                if source.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                cxltier_error::Class::Permission
            }
            _ => cxltier_error::Class::BadInput,
        }
    }
}

fn refuse(origin: &Origin, message: impl Into<String>) -> ConfigFileError {
    ConfigFileError::Directive {
        origin: origin.clone(),
        message: message.into(),
    }
}

/// Reads `path` (and the files it includes).
pub fn read(path: &Path) -> Result<ConfigFile, ConfigFileError> {
    let mut out = ConfigFile::default();
    read_into(path, 0, &mut out)?;
    Ok(out)
}

fn read_into(path: &Path, depth: usize, out: &mut ConfigFile) -> Result<(), ConfigFileError> {
    let text = read_text(path)?;
    for (i, line) in text.lines().enumerate() {
        let origin = Origin {
            file: path.to_path_buf(),
            line: i + 1,
        };
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let words = crate::arg_line::split_args(line.as_bytes()).ok_or_else(|| {
            refuse(
                &origin,
                "unbalanced quotes in configuration line: close the quote or escape it",
            )
        })?;
        let words: Vec<String> = words
            .iter()
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect();
        let Some((name, args)) = words.split_first() else {
            continue;
        };
        let name = name.to_ascii_lowercase();
        if name == "include" {
            let [file] = args else {
                return Err(refuse(&origin, "include takes one file"));
            };
            if depth + 1 >= MAX_INCLUDE_DEPTH {
                return Err(refuse(
                    &origin,
                    format!("include nested deeper than {MAX_INCLUDE_DEPTH} files (a file that includes itself?)"),
                ));
            }
            read_into(Path::new(file), depth + 1, out)?;
            continue;
        }
        directive(&name, args, &origin, out)?;
    }
    Ok(())
}

fn read_text(path: &Path) -> Result<String, ConfigFileError> {
    use std::io::Read as _;
    let err = |source| ConfigFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(err)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(err)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "larger than {} MiB: not a configuration file",
                MAX_FILE_BYTES >> 20
            ),
        )));
    }
    String::from_utf8(bytes).map_err(|_| {
        err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not UTF-8 text",
        ))
    })
}

fn one<'a>(name: &str, args: &'a [String], origin: &Origin) -> Result<&'a str, ConfigFileError> {
    match args {
        [v] => Ok(v),
        _ => Err(bad_directive(name, origin)),
    }
}

fn bad_directive(name: &str, origin: &Origin) -> ConfigFileError {
    refuse(
        origin,
        format!("'{name}': Bad directive or wrong number of arguments (Redis 7.0's names and syntax; see CONFIG GET * for the parameters known)"),
    )
}

fn number<T: std::str::FromStr>(
    name: &str,
    args: &[String],
    origin: &Origin,
    what: &str,
) -> Result<T, ConfigFileError> {
    one(name, args, origin)?
        .parse()
        .map_err(|_| refuse(origin, format!("'{name}' must be {what}")))
}

fn directive(
    name: &str,
    args: &[String],
    origin: &Origin,
    out: &mut ConfigFile,
) -> Result<(), ConfigFileError> {
    match name {
        "port" => {
            let port: u16 = number(name, args, origin, "a port number (0-65535)")?;
            out.port = Some(port);
        }
        "bind" => {
            let Some(first) = args.first() else {
                return Err(bad_directive(name, origin));
            };
            // Redis 7: a leading '-' marks an address that may be missing on this host.
            let addr = first.trim_start_matches('-');
            let ip: IpAddr = match addr {
                "*" => IpAddr::from([0, 0, 0, 0]),
                _ => addr.parse().map_err(|_| {
                    refuse(origin, format!("bind: '{first}' is not an IP address"))
                })?,
            };
            out.bind = Some(ip);
            if args.len() > 1 {
                out.warnings.push(format!(
                    "{origin}: bind names {} addresses; cxltier serve listens on the first, {ip}",
                    args.len()
                ));
            }
        }
        "requirepass" => {
            let pass = one(name, args, origin)?;
            out.requirepass = (!pass.is_empty()).then(|| pass.to_string());
        }
        "maxclients" => {
            let n: usize = number(name, args, origin, "a number of clients (1 or more)")?;
            if n == 0 {
                return Err(refuse(origin, "'maxclients' must be 1 or more"));
            }
            out.max_clients = Some(n);
        }
        "databases" => out.databases = Some(number(name, args, origin, "a number of databases")?),
        "client-query-buffer-limit" => {
            let v = one(name, args, origin)?;
            let n = crate::limits::parse_memory(v)
                .filter(|&n| n > 0)
                .ok_or_else(|| refuse(origin, format!("client-query-buffer-limit '{v}' is not a size in bytes (64mb, 1gb)")))?;
            out.client_query_buffer_limit = Some(n);
        }
        "client-output-buffer-limit" => {
            // Redis's syntax: CLASS HARD SOFT SECONDS, several classes on one line.
            if args.is_empty() || args.len() % 4 != 0 {
                return Err(bad_directive(name, origin));
            }
            for class in args.chunks(4) {
                match class[0].to_ascii_lowercase().as_str() {
                    "normal" => {
                        let limit: OutputBufferLimit =
                            class[1..].join(" ").parse().map_err(|e: String| {
                                refuse(origin, format!("client-output-buffer-limit normal: {e}"))
                            })?;
                        out.client_output_buffer_limit = Some(limit);
                    }
                    "replica" | "slave" | "pubsub" => out.warnings.push(format!(
                        "{origin}: client-output-buffer-limit {}: cxltier serve holds every connection to the normal class's limits",
                        class[0]
                    )),
                    other => {
                        return Err(refuse(
                            origin,
                            format!("client-output-buffer-limit: unknown class '{other}' (normal, replica, pubsub)"),
                        ))
                    }
                }
            }
        }
        "dir" => out.dir = Some(PathBuf::from(one(name, args, origin)?)),
        "logfile" => {
            let f = one(name, args, origin)?;
            out.log_file = Some((!f.is_empty()).then(|| PathBuf::from(f)));
        }
        "pidfile" => {
            let f = one(name, args, origin)?;
            out.pid_file = (!f.is_empty()).then(|| PathBuf::from(f));
        }
        "daemonize" => match one(name, args, origin)?.to_ascii_lowercase().as_str() {
            "no" => {}
            "yes" => {
                return Err(refuse(
                    origin,
                    "daemonize yes: cxltier serve stays in the foreground; run it under systemd (Type=simple) or with & and remove the line",
                ))
            }
            _ => return Err(refuse(origin, "'daemonize' must be 'yes' or 'no'")),
        },
        "unixsocket" | "unixsocketperm" => out.warnings.push(format!(
            "{origin}: {name}: cxltier serve listens on TCP only; connect to the port"
        )),
        "user" => {
            if args.is_empty() {
                return Err(bad_directive(name, origin));
            }
            out.users.push((args.to_vec(), origin.clone()));
        }
        "rename-command" | "loadmodule" => {
            return Err(refuse(
                origin,
                format!("{name} is not supported by cxltier serve: remove the line"),
            ))
        }
        // `save ""` clears the save points; several `save` lines add to each other.
        "save" => {
            let value = args.join(" ");
            match out.settings.iter_mut().rev().find(|s| s.name == "save") {
                Some(s) if !value.is_empty() && !s.value.is_empty() => {
                    s.value = format!("{} {value}", s.value)
                }
                _ => out.settings.push(Setting {
                    name: name.into(),
                    value,
                    origin: origin.clone(),
                }),
            }
        }
        _ => {
            if crate::knobs::param(name).is_none() {
                return Err(bad_directive(name, origin));
            }
            if args.is_empty() {
                return Err(bad_directive(name, origin));
            }
            out.settings.push(Setting {
                name: name.into(),
                value: args.join(" "),
                origin: origin.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ConfigFile, ConfigFileError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("redis.conf");
        std::fs::write(&path, text).unwrap();
        read(&path)
    }

    #[test]
    fn splits_arguments_as_redis_does() {
        let split = |line: &str| {
            crate::arg_line::split_args(line.as_bytes()).map(|words| {
                words
                    .into_iter()
                    .map(|w| String::from_utf8(w).unwrap())
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(split("save 900 1").unwrap(), ["save", "900", "1"]);
        assert_eq!(split("logfile ''").unwrap(), ["logfile", ""]);
        assert_eq!(
            split(r#"requirepass "a b\x41\n""#).unwrap(),
            ["requirepass", "a bA\n"]
        );
        assert_eq!(split(r"x 'it\'s'").unwrap(), ["x", "it's"]);
        assert_eq!(split("  ").unwrap(), Vec::<String>::new());
        assert!(split(r#"x "open"#).is_none());
        assert!(
            split(r#"x "a"b"#).is_none(),
            "a closing quote needs a blank after it"
        );
        assert!(split("x 'open").is_none());
    }

    /// The suite's own default.conf, as its non-external mode writes it.
    #[test]
    fn reads_the_redis_suite_s_default_configuration() {
        let c = parse(
            "always-show-logo yes\nnotify-keyspace-events KEA\ndaemonize no\npidfile /var/run/redis.pid\nport 21111\ntimeout 0\nbind 127.0.0.1\nloglevel verbose\nlogfile ''\ndatabases 16\nlatency-monitor-threshold 1\nrepl-diskless-sync-delay 0\nsave 900 1\nrdbcompression yes\ndbfilename dump.rdb\ndir ./\nslave-serve-stale-data yes\nappendonly no\nappendfsync everysec\nno-appendfsync-on-rewrite no\nactiverehashing yes\nenable-protected-configs yes\nenable-debug-command yes\nenable-module-command yes\npropagation-error-behavior panic\nunixsocket /tmp/x/socket\n",
        )
        .unwrap();
        assert_eq!(c.listen_addr(), Some("127.0.0.1:21111".parse().unwrap()));
        assert_eq!(c.databases, Some(16));
        assert_eq!(c.log_file, Some(None));
        assert_eq!(c.pid_file, Some(PathBuf::from("/var/run/redis.pid")));
        let names: Vec<&str> = c.settings.iter().map(|s| s.name.as_str()).collect();
        assert!(names.contains(&"notify-keyspace-events"), "{names:?}");
        assert!(names.contains(&"slave-serve-stale-data"), "{names:?}");
        let save = c.settings.iter().find(|s| s.name == "save").unwrap();
        assert_eq!((save.value.as_str(), save.origin.line), ("900 1", 13));
        assert_eq!(c.warnings.len(), 1, "unixsocket: {:?}", c.warnings);
    }

    #[test]
    fn refuses_what_it_cannot_honour_naming_the_line() {
        for (text, says) in [
            (
                "port 1\nnosuchthing 3\n",
                ":2: 'nosuchthing': Bad directive",
            ),
            (
                "daemonize yes\n",
                ":1: daemonize yes: cxltier serve stays in the foreground",
            ),
            (
                "rename-command FLUSHALL \"\"\n",
                ":1: rename-command is not supported",
            ),
            ("port x\n", ":1: 'port' must be a port number"),
            ("requirepass \"open\n", ":1: unbalanced quotes"),
            ("bind nowhere\n", "bind: 'nowhere' is not an IP address"),
            (
                "client-output-buffer-limit normal 1mb\n",
                "Bad directive or wrong number",
            ),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }

    #[test]
    fn save_lines_add_up_and_an_empty_one_clears() {
        let c = parse("save 900 1\nsave 300 10\n").unwrap();
        let saves: Vec<&str> = c
            .settings
            .iter()
            .filter(|s| s.name == "save")
            .map(|s| s.value.as_str())
            .collect();
        assert_eq!(saves, ["900 1 300 10"]);
        let c = parse("save 900 1\nsave \"\"\n").unwrap();
        let saves: Vec<&str> = c
            .settings
            .iter()
            .filter(|s| s.name == "save")
            .map(|s| s.value.as_str())
            .collect();
        assert_eq!(saves, ["900 1", ""]);
    }

    #[test]
    fn includes_nest_but_not_for_ever() {
        let dir = tempfile::tempdir().unwrap();
        let inner = dir.path().join("inner.conf");
        std::fs::write(&inner, "port 7001\n").unwrap();
        let outer = dir.path().join("outer.conf");
        std::fs::write(
            &outer,
            format!("include {}\ndatabases 4\n", inner.display()),
        )
        .unwrap();
        let c = read(&outer).unwrap();
        assert_eq!((c.port, c.databases), (Some(7001), Some(4)));
        let selfish = dir.path().join("self.conf");
        std::fs::write(&selfish, format!("include {}\n", selfish.display())).unwrap();
        let e = read(&selfish).unwrap_err().to_string();
        assert!(e.contains("nested deeper"), "{e}");
    }

    #[test]
    fn client_limits_and_users_are_read() {
        let c = parse("client-output-buffer-limit normal 10mb 5mb 30 pubsub 32mb 8mb 60\nclient-query-buffer-limit 2mb\nuser alice on >pw ~* +@all\n").unwrap();
        let o = c.client_output_buffer_limit.unwrap();
        assert_eq!((o.hard, o.soft, o.soft_seconds), (10 << 20, 5 << 20, 30));
        assert_eq!(c.client_query_buffer_limit, Some(2 << 20));
        assert_eq!(c.users[0].0, ["alice", "on", ">pw", "~*", "+@all"]);
        assert_eq!(c.warnings.len(), 1, "pubsub class: {:?}", c.warnings);
    }
}
