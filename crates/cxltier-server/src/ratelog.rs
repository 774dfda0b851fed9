//! Rate-limited log lines: a failure that repeats every loop turn (background work on a full
//! store, a client over its limit again and again) must not flood stderr. Each kind of message
//! is written at most once per interval; the next one written says how many were held back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hashbrown::HashMap;

/// How often each kind of message may be written by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

/// Where the server's log lines go: the library never prints, its caller decides (the CLI
/// writes each line to stderr after `cxltier serve: `). A line comes without that prefix and
/// without a newline. The default drops them.
#[derive(Clone)]
pub struct LogSink(Arc<dyn Fn(&str) + Send + Sync>);

impl LogSink {
    pub fn new(write: impl Fn(&str) + Send + Sync + 'static) -> LogSink {
        LogSink(Arc::new(write))
    }

    /// A sink that drops every line (tests, embedders that do not want them).
    pub fn discard() -> LogSink {
        LogSink::new(|_| {})
    }

    pub fn write(&self, line: &str) {
        (self.0)(line)
    }
}

impl Default for LogSink {
    fn default() -> Self {
        LogSink::discard()
    }
}

impl std::fmt::Debug for LogSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogSink")
    }
}

/// Decides which log lines are written, and writes them to its sink.
#[derive(Debug)]
pub struct RateLimitedLog {
    interval: Duration,
    /// Per kind: when it was last written, and how many were held back since.
    kinds: HashMap<&'static str, (Instant, u64)>,
    sink: LogSink,
}

impl RateLimitedLog {
    pub fn new(interval: Duration) -> RateLimitedLog {
        RateLimitedLog {
            interval,
            kinds: HashMap::new(),
            sink: LogSink::discard(),
        }
    }

    /// Lines passed to [`RateLimitedLog::emit`] go to `sink`.
    pub fn with_sink(mut self, sink: LogSink) -> RateLimitedLog {
        self.sink = sink;
        self
    }

    /// Writes a line [`RateLimitedLog::line`] let through.
    pub fn emit(&self, line: &str) {
        self.sink.write(line)
    }

    /// The line to write for a message of `kind` whose text is `text`, at `now`: `None` while
    /// that kind was written less than the interval ago (the text may differ, e.g. a client's
    /// address: it is the kind that is limited). Once the interval has passed, the text with
    /// " (repeated K times)" when K were held back.
    pub fn line(&mut self, kind: &'static str, now: Instant, text: &str) -> Option<String> {
        match self.kinds.get_mut(kind) {
            Some((last, held)) if now.saturating_duration_since(*last) < self.interval => {
                *held += 1;
                None
            }
            Some((last, held)) => {
                let line = if *held > 0 {
                    format!("{text} (repeated {held} times)")
                } else {
                    text.to_string()
                };
                *last = now;
                *held = 0;
                Some(line)
            }
            None => {
                self.kinds.insert(kind, (now, 0));
                Some(text.to_string())
            }
        }
    }
}

impl Default for RateLimitedLog {
    fn default() -> Self {
        RateLimitedLog::new(DEFAULT_INTERVAL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_are_held_back_then_counted() {
        let mut log = RateLimitedLog::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(
            log.line("full", at(0), "the store is full").as_deref(),
            Some("the store is full")
        );
        // Nine a second, as the server did: all held back for ten seconds.
        for i in 1..90 {
            assert_eq!(log.line("full", at(i * 111), "the store is full"), None);
        }
        // Another kind is not held back by the first.
        assert_eq!(
            log.line("client", at(5000), "client 1.2.3.4:5 closed")
                .as_deref(),
            Some("client 1.2.3.4:5 closed")
        );
        assert_eq!(
            log.line("client", at(6000), "client 1.2.3.4:6 closed"),
            None
        );
        assert_eq!(
            log.line("full", at(10_000), "the store is full").as_deref(),
            Some("the store is full (repeated 89 times)")
        );
        assert_eq!(log.line("full", at(10_001), "the store is full"), None);
        assert_eq!(
            log.line("full", at(30_000), "x").as_deref(),
            Some("x (repeated 1 times)")
        );
        // A message alone after a quiet spell carries no count.
        assert_eq!(log.line("full", at(40_000), "x").as_deref(), Some("x"));
        assert_eq!(
            log.line("client", at(15_000), "client 1.2.3.4:7 closed")
                .as_deref(),
            Some("client 1.2.3.4:7 closed (repeated 1 times)")
        );
    }
}
