//! The parameters CONFIG SET stores and CONFIG GET reports (Redis's encoding knobs among them,
//! which OBJECT ENCODING answers by): their names, aliases and defaults, and the values set.

/// A parameter that CONFIG SET stores: its name, the name it is an alias of (Redis 7 keeps the
/// ziplist names of 6.2 as aliases of the listpack ones), its default, and whether it is an
/// integer.
pub(crate) struct Knob {
    pub(crate) name: &'static str,
    pub(crate) canonical: &'static str,
    pub(crate) default: &'static str,
    pub(crate) integer: bool,
}

const fn knob(name: &'static str, default: &'static str, integer: bool) -> Knob {
    Knob {
        name,
        canonical: name,
        default,
        integer,
    }
}

const fn alias(name: &'static str, canonical: &'static str, integer: bool) -> Knob {
    Knob {
        name,
        canonical,
        default: "",
        integer,
    }
}

/// Stored and reported; only the encoding thresholds are used (by OBJECT ENCODING). Redis 7.0's
/// defaults.
pub(crate) static KNOBS: &[Knob] = &[
    knob("hash-max-listpack-entries", "128", true),
    alias(
        "hash-max-ziplist-entries",
        "hash-max-listpack-entries",
        true,
    ),
    knob("hash-max-listpack-value", "64", true),
    alias("hash-max-ziplist-value", "hash-max-listpack-value", true),
    knob("set-max-intset-entries", "512", true),
    knob("set-max-listpack-entries", "128", true),
    knob("set-max-listpack-value", "64", true),
    knob("zset-max-listpack-entries", "128", true),
    alias(
        "zset-max-ziplist-entries",
        "zset-max-listpack-entries",
        true,
    ),
    knob("zset-max-listpack-value", "64", true),
    alias("zset-max-ziplist-value", "zset-max-listpack-value", true),
    knob("list-max-listpack-size", "-2", true),
    alias("list-max-ziplist-size", "list-max-listpack-size", true),
    knob("list-compress-depth", "0", true),
    knob("hll-sparse-max-bytes", "3000", true),
    knob("stream-node-max-bytes", "4096", true),
    knob("stream-node-max-entries", "100", true),
    knob("timeout", "0", true),
    // Used: the most keys the client-side caching table keeps (0: no cap).
    knob("tracking-table-max-keys", "1000000", true),
    knob("save", "", false),
    knob("hz", "10", true),
    knob("slowlog-log-slower-than", "10000", true),
    knob("slowlog-max-len", "128", true),
    knob("latency-monitor-threshold", "0", true),
    knob("latency-tracking", "yes", false),
    knob("latency-tracking-info-percentiles", "50 99 99.9", false),
    knob("lua-time-limit", "5000", true),
    alias("busy-reply-threshold", "lua-time-limit", true),
    knob("activerehashing", "yes", false),
    knob("lazyfree-lazy-user-del", "no", false),
    knob("lazyfree-lazy-expire", "no", false),
    knob("lazyfree-lazy-eviction", "no", false),
    knob("lazyfree-lazy-user-flush", "no", false),
    knob("active-expire-effort", "1", true),
    knob("maxmemory-samples", "5", true),
    knob("maxmemory-eviction-tenacity", "10", true),
    knob("lfu-log-factor", "10", true),
    knob("lfu-decay-time", "1", true),
    // Replication knobs: min-replicas-to-write and min-replicas-max-lag decide NOREPLICAS, and
    // repl-ping-replica-period the replicas' PING; the rest (no backlog for partial resyncs,
    // no RDB/AOF files) are accepted and reported so that tools and tests that set them go on.
    knob("min-replicas-to-write", "0", true),
    alias("min-slaves-to-write", "min-replicas-to-write", true),
    knob("min-replicas-max-lag", "10", true),
    alias("min-slaves-max-lag", "min-replicas-max-lag", true),
    knob("repl-ping-replica-period", "10", true),
    alias("repl-ping-slave-period", "repl-ping-replica-period", true),
    knob("repl-timeout", "60", true),
    knob("repl-backlog-size", "1048576", true),
    knob("replica-serve-stale-data", "yes", false),
    alias("slave-serve-stale-data", "replica-serve-stale-data", false),
    knob("replica-read-only", "yes", false),
    alias("slave-read-only", "replica-read-only", false),
    knob("rdb-key-save-delay", "0", true),
    knob("key-load-delay", "0", true),
];

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
