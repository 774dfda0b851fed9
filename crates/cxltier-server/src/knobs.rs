//! The parameters CONFIG SET stores and CONFIG GET reports (Redis's encoding knobs among them,
//! which OBJECT ENCODING answers by): their names, aliases and defaults, and the values set.

use crate::config_param::Param;

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
