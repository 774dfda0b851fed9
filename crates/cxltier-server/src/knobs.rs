//! The parameters CONFIG SET stores and CONFIG GET reports (Redis's encoding knobs among them,
//! which OBJECT ENCODING answers by): their names, aliases and defaults, and the values set.

/// A parameter that CONFIG SET stores: its name, the name it is an alias of (Redis 7 keeps the
/// ziplist names of 6.2 as aliases of the listpack ones) and its default; its type is Redis's
/// ([`Param`]).
pub(crate) struct Knob {
    pub(crate) name: &'static str,
    pub(crate) canonical: &'static str,
    pub(crate) default: &'static str,
}

const fn knob(name: &'static str, default: &'static str) -> Knob {
    Knob {
        name,
        canonical: name,
        default,
    }
}

const fn alias(name: &'static str, canonical: &'static str) -> Knob {
    Knob {
        name,
        canonical,
        default: "",
    }
}

/// Stored and reported; only the encoding thresholds are used (by OBJECT ENCODING). Redis 7.0's
/// defaults.
pub(crate) static KNOBS: &[Knob] = &[
    knob("hash-max-listpack-entries", "128"),
    alias("hash-max-ziplist-entries", "hash-max-listpack-entries"),
    knob("hash-max-listpack-value", "64"),
    alias("hash-max-ziplist-value", "hash-max-listpack-value"),
    knob("set-max-intset-entries", "512"),
    knob("set-max-listpack-entries", "128"),
    knob("set-max-listpack-value", "64"),
    knob("zset-max-listpack-entries", "128"),
    alias("zset-max-ziplist-entries", "zset-max-listpack-entries"),
    knob("zset-max-listpack-value", "64"),
    alias("zset-max-ziplist-value", "zset-max-listpack-value"),
    knob("list-max-listpack-size", "-2"),
    alias("list-max-ziplist-size", "list-max-listpack-size"),
    knob("list-compress-depth", "0"),
    knob("hll-sparse-max-bytes", "3000"),
    knob("stream-node-max-bytes", "4096"),
    knob("stream-node-max-entries", "100"),
    knob("timeout", "0"),
    // Used: the most keys the client-side caching table keeps (0: no cap).
    knob("tracking-table-max-keys", "1000000"),
    knob("save", ""),
    knob("hz", "10"),
    knob("slowlog-log-slower-than", "10000"),
    knob("slowlog-max-len", "128"),
    knob("latency-monitor-threshold", "0"),
    knob("latency-tracking", "yes"),
    knob("latency-tracking-info-percentiles", "50 99 99.9"),
    knob("lua-time-limit", "5000"),
    alias("busy-reply-threshold", "lua-time-limit"),
    knob("activerehashing", "yes"),
    knob("lazyfree-lazy-user-del", "no"),
    knob("lazyfree-lazy-expire", "no"),
    knob("lazyfree-lazy-eviction", "no"),
    knob("lazyfree-lazy-user-flush", "no"),
    knob("active-expire-effort", "1"),
    knob("maxmemory-samples", "5"),
    knob("maxmemory-eviction-tenacity", "10"),
    knob("lfu-log-factor", "10"),
    knob("lfu-decay-time", "1"),
    // Replication knobs: min-replicas-to-write and min-replicas-max-lag decide NOREPLICAS, and
    // repl-ping-replica-period the replicas' PING; the rest (no backlog for partial resyncs,
    // no RDB/AOF files) are accepted and reported so that tools and tests that set them go on.
    knob("min-replicas-to-write", "0"),
    alias("min-slaves-to-write", "min-replicas-to-write"),
    knob("min-replicas-max-lag", "10"),
    alias("min-slaves-max-lag", "min-replicas-max-lag"),
    knob("repl-ping-replica-period", "10"),
    alias("repl-ping-slave-period", "repl-ping-replica-period"),
    knob("repl-timeout", "60"),
    knob("repl-backlog-size", "1048576"),
    knob("replica-serve-stale-data", "yes"),
    alias("slave-serve-stale-data", "replica-serve-stale-data"),
    knob("replica-read-only", "yes"),
    alias("slave-read-only", "replica-read-only"),
    knob("rdb-key-save-delay", "0"),
    knob("key-load-delay", "0"),
];

/// Redis's parameter flags ([`Param::flags`]).
pub mod pf {
    /// Set only at start: CONFIG SET refuses it ("can't set immutable config").
    pub const IMMUTABLE: u8 = 1 << 0;
    /// Listed by CONFIG GET only when asked for by its exact name, never by a pattern.
    pub const HIDDEN: u8 = 1 << 1;
    /// Refused by CONFIG SET unless `enable-protected-configs` allows it (it does not here).
    pub const PROTECTED: u8 = 1 << 2;
    /// Its value is several words (`save 3600 1`).
    pub const MULTI_ARG: u8 = 1 << 3;
    pub const DENY_LOADING: u8 = 1 << 4;
    pub const SENSITIVE: u8 = 1 << 5;
    pub const VOLATILE: u8 = 1 << 6;
}

/// A Redis parameter's type, bounds and default.
#[derive(Debug)]
pub enum Kind {
    Bool {
        default: bool,
    },
    /// A whole number between `min` and `max`; `memory`: written with a unit (`1gb`), shown
    /// in bytes; `percent`: `N%` is accepted and kept as -N; `octal`: written and shown in
    /// base 8.
    Number {
        min: i128,
        max: i128,
        default: i128,
        memory: bool,
        percent: bool,
        octal: bool,
    },
    Enum {
        values: &'static [&'static str],
        default: &'static str,
    },
    /// Words naming bits (`shutdown-on-sigterm nosave now`).
    Flags {
        values: &'static [(&'static str, u32)],
        default: u32,
    },
    Str {
        default: &'static str,
    },
    /// Its own syntax (`save`, `bind`, `client-output-buffer-limit`, ...): checked by
    /// CONFIG's handler.
    Special,
}

/// One of Redis 7.0's parameters ([`crate::config_specs::PARAMS`]).
#[derive(Debug)]
pub struct Param {
    pub name: &'static str,
    pub alias: Option<&'static str>,
    pub flags: u8,
    pub kind: Kind,
}

impl Param {
    pub fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }

    /// Its default as CONFIG GET shows it (a special parameter's is empty).
    pub fn default_text(&self) -> String {
        match &self.kind {
            Kind::Bool { default } => if *default { "yes" } else { "no" }.into(),
            Kind::Number { default, .. } => self.number_text(*default),
            Kind::Enum { default, .. } => (*default).into(),
            Kind::Flags { values, default } => flags_text(values, *default),
            Kind::Str { default } => (*default).into(),
            Kind::Special => String::new(),
        }
    }

    fn number_text(&self, n: i128) -> String {
        match self.kind {
            Kind::Number { percent: true, .. } if n < 0 => format!("{}%", -n),
            Kind::Number { octal: true, .. } => format!("{n:o}"),
            _ => n.to_string(),
        }
    }

    /// `value` checked as Redis's CONFIG SET checks it, and written as CONFIG GET will show
    /// it; the error is Redis's text (after "... argument 'name') - "). `None` for a special
    /// parameter, whose syntax the caller checks.
    pub fn parse(&self, value: &str) -> Option<Result<String, String>> {
        Some(match &self.kind {
            Kind::Bool { .. } => match value.to_ascii_lowercase().as_str() {
                v @ ("yes" | "no") => Ok(v.to_string()),
                _ => Err("argument must be 'yes' or 'no'".into()),
            },
            Kind::Number {
                min,
                max,
                memory,
                percent,
                octal,
                ..
            } => {
                let parsed: Option<i128> = if *memory {
                    crate::limits::parse_memory(value).map(|n| n as i128)
                } else {
                    None
                }
                .or_else(|| {
                    let digits = value.strip_suffix('%').filter(|_| *percent)?;
                    let n = crate::args::int_arg(digits.as_bytes()).filter(|&n| n >= 0)?;
                    Some(-i128::from(n))
                })
                .or_else(|| {
                    if *octal {
                        i64::from_str_radix(value, 8).ok().map(i128::from)
                    } else {
                        None
                    }
                })
                .or_else(|| {
                    if !*memory && !*percent && !*octal {
                        crate::args::int_arg(value.as_bytes()).map(i128::from)
                    } else {
                        None
                    }
                });
                let Some(n) = parsed else {
                    return Some(Err(match (*memory, *percent, *octal) {
                        (true, true, _) => "argument must be a memory or percent value",
                        (true, false, _) => "argument must be a memory value",
                        (_, _, true) => "argument couldn't be parsed as an octal number",
                        _ => "argument couldn't be parsed into an integer",
                    }
                    .into()));
                };
                if *percent && n < 0 {
                    if n < *min {
                        return Some(Err(format!(
                            "percentage argument must be less or equal to {}",
                            -min
                        )));
                    }
                } else if n < *min || n > *max {
                    return Some(Err(if *octal {
                        format!("argument must be between {min:o} and {max:o} inclusive")
                    } else {
                        format!("argument must be between {min} and {max} inclusive")
                    }));
                }
                Ok(self.number_text(n))
            }
            Kind::Enum { values, .. } => values
                .iter()
                .find(|v| v.eq_ignore_ascii_case(value))
                .map(|v| v.to_string())
                .ok_or_else(|| {
                    format!(
                        "argument(s) must be one of the following: {}",
                        values.join(", ")
                    )
                }),
            Kind::Flags { values, .. } => {
                let mut bits = 0;
                for word in value.split_ascii_whitespace() {
                    match values.iter().find(|(n, _)| n.eq_ignore_ascii_case(word)) {
                        Some((_, b)) => bits |= b,
                        None => {
                            let names: Vec<&str> = values.iter().map(|(n, _)| *n).collect();
                            return Some(Err(format!(
                                "argument(s) must be one of the following: {}",
                                names.join(", ")
                            )));
                        }
                    }
                }
                let bit = |name: &str| values.iter().find(|(n, _)| *n == name).map_or(0, |v| v.1);
                if bits & bit("save") != 0 && bits & bit("nosave") != 0 {
                    return Some(Err(
                        "shutdown options SAVE and NOSAVE can't be used simultaneously".into(),
                    ));
                }
                Ok(flags_text(values, bits))
            }
            Kind::Str { .. } => Ok(value.to_string()),
            Kind::Special => return None,
        })
    }
}

/// Bits named as Redis names them: the name of 0 when none is set, else each set bit's name.
fn flags_text(values: &[(&str, u32)], bits: u32) -> String {
    if bits == 0 {
        return values
            .iter()
            .find(|(_, b)| *b == 0)
            .map_or(String::new(), |(n, _)| n.to_string());
    }
    let names: Vec<&str> = values
        .iter()
        .filter(|(_, b)| *b != 0 && bits & b == *b)
        .map(|(n, _)| *n)
        .collect();
    names.join(" ")
}

/// Redis's parameter named `name` (or an alias of it), in any case.
pub fn param(name: &str) -> Option<&'static Param> {
    crate::config_specs::PARAMS.iter().find(|p| {
        p.name.eq_ignore_ascii_case(name) || p.alias.is_some_and(|a| a.eq_ignore_ascii_case(name))
    })
}

/// The stored knobs' values (those set; the rest have their defaults).
#[derive(Debug)]
pub struct Knobs {
    set: hashbrown::HashMap<&'static str, String>,
    /// `min-replicas-to-write` and `min-replicas-max-lag`, parsed when set: every write asks
    /// for them, and a search of the knob list by name per command showed in profiles.
    min_replicas: (i64, i64),
    /// `slowlog-log-slower-than` and `slowlog-max-len`, parsed when set: every command asks.
    slowlog: (i64, u64),
    /// `latency-monitor-threshold` (ms; 0: off) and `latency-tracking`, parsed when set.
    latency: (i64, bool),
}

impl Default for Knobs {
    fn default() -> Self {
        let mut k = Knobs {
            set: hashbrown::HashMap::new(),
            min_replicas: (0, 0),
            slowlog: (0, 0),
            latency: (0, true),
        };
        k.parse_cached();
        k
    }
}

impl Knobs {
    /// Store a knob's value under its canonical name.
    pub(crate) fn store(&mut self, canonical: &'static str, value: String) {
        self.set.insert(canonical, value);
        self.parse_cached();
    }

    fn parse_cached(&mut self) {
        self.min_replicas = (
            self.int("min-replicas-to-write"),
            self.int("min-replicas-max-lag"),
        );
        self.slowlog = (
            self.int("slowlog-log-slower-than"),
            self.int("slowlog-max-len").max(0) as u64,
        );
        self.latency = (
            self.int("latency-monitor-threshold"),
            !self
                .get("latency-tracking")
                .is_some_and(|v| v.eq_ignore_ascii_case("no")),
        );
    }

    /// (`latency-monitor-threshold` in ms, 0: off; `latency-tracking`).
    pub fn latency(&self) -> (i64, bool) {
        self.latency
    }

    /// (`slowlog-log-slower-than` in µs, negative: off; `slowlog-max-len`).
    pub fn slowlog(&self) -> (i64, u64) {
        self.slowlog
    }

    /// (`min-replicas-to-write`, `min-replicas-max-lag`).
    pub fn min_replicas(&self) -> (i64, i64) {
        self.min_replicas
    }

    /// The value CONFIG SET stored for a parameter of Redis's that no knob and no setting of
    /// the server's answers (accepted and reported, meaning nothing here), or its default.
    pub fn param_value(&self, p: &'static Param) -> String {
        self.set
            .get(p.name)
            .cloned()
            .unwrap_or_else(|| p.default_text())
    }

    /// Whether CONFIG SET never stored `name` (a canonical name).
    pub fn is_unset(&self, name: &str) -> bool {
        !self.set.contains_key(name)
    }

    /// The value of a knob by any of its names; `None` for a name that is not a knob.
    pub fn get(&self, name: &str) -> Option<&str> {
        let k = KNOBS.iter().find(|k| k.name == name)?;
        let canonical = KNOBS.iter().find(|c| c.name == k.canonical)?;
        Some(
            self.set
                .get(canonical.name)
                .map(String::as_str)
                .unwrap_or(canonical.default),
        )
    }

    /// An integer knob (the encoding thresholds).
    pub fn int(&self, name: &str) -> i64 {
        self.get(name).and_then(|v| v.parse().ok()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replica_knobs_every_write_asks_for_follow_config_set() {
        let mut k = Knobs::default();
        assert_eq!(k.min_replicas(), (0, 10), "Redis 7.0's defaults");
        k.store("min-replicas-to-write", "2".into());
        assert_eq!(k.min_replicas(), (2, 10));
        k.store("min-replicas-max-lag", "3".into());
        assert_eq!(k.min_replicas(), (2, 3));
        assert_eq!(
            k.int("min-slaves-to-write"),
            2,
            "the alias reads the same knob"
        );
    }
}
