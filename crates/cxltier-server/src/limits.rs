//! The limits a connection is held to, shared by the loop and the commands that set or read
//! them: output buffer limits per kind of client (normal, pub/sub, replica), the margin of
//! proto-max-bulk-len over the largest object, and byte counts as Redis's config writes them.

/// Redis's `proto-max-bulk-len` default: no string may grow past it (SETRANGE, APPEND, SETBIT,
/// BITFIELD).
pub(crate) const MAX_STRING: u64 = 512 * 1024 * 1024;

/// proto-max-bulk-len is the largest object (`--max-object`) and this margin: a bulk that could
/// never be stored is refused from its header, before any of it is buffered.
pub const BULK_MARGIN: usize = 64 << 10;

/// Redis's `client-output-buffer-limit normal`: at `soft` bytes of replies not yet read by the
/// client, its commands stop running (and it is not read) until it reads; a client that stays
/// above `soft` for `soft_seconds` (0: no time limit) or reaches `hard` is closed, with a
/// line on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputBufferLimit {
    pub hard: usize,
    pub soft: usize,
    pub soft_seconds: u64,
}

impl Default for OutputBufferLimit {
    fn default() -> Self {
        OutputBufferLimit {
            hard: 64 << 20,
            soft: 4 << 20,
            soft_seconds: 60,
        }
    }
}

impl std::str::FromStr for OutputBufferLimit {
    type Err = String;
    /// `HARD SOFT SECONDS` (bytes, with k/kb/m/mb/g/gb as Redis writes them).
    fn from_str(text: &str) -> Result<Self, String> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let bad = || {
            format!(
                "client-output-buffer-limit {text:?}: expected HARD SOFT SECONDS, e.g. \"64mb 4mb 60\" (0 SECONDS: no time limit)"
            )
        };
        let [hard, soft, secs] = words[..] else {
            return Err(bad());
        };
        let limit = OutputBufferLimit {
            hard: parse_memory(hard).ok_or_else(bad)?,
            soft: parse_memory(soft).ok_or_else(bad)?,
            soft_seconds: secs.parse().map_err(|_| bad())?,
        };
        if limit.soft == 0 || limit.hard < limit.soft {
            return Err(format!(
                "client-output-buffer-limit {text:?}: the soft limit must be above 0 and at most the hard limit"
            ));
        }
        Ok(limit)
    }
}

/// A byte count as Redis's config writes it: `4194304`, `4mb`, `4m`, `64k`, `1gb`.
pub fn parse_memory(text: &str) -> Option<usize> {
    let t = text.to_ascii_lowercase();
    let digits = t.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit: usize = match &t[digits.len()..] {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1 << 10,
        "m" => 1_000_000,
        "mb" => 1 << 20,
        "g" => 1_000_000_000,
        "gb" => 1 << 30,
        _ => return None,
    };
    digits.parse::<usize>().ok()?.checked_mul(unit)
}

/// Redis's `client-output-buffer-limit pubsub 32mb 8mb 60`.
pub const PUBSUB_OUTPUT_LIMIT: OutputBufferLimit = OutputBufferLimit {
    hard: 32 << 20,
    soft: 8 << 20,
    soft_seconds: 60,
};

/// Redis's `client-output-buffer-limit replica 256mb 64mb 60`: the stream held for a replica
/// (while its snapshot is sent, or while it does not read) may reach 64 MB for 60 s, never
/// 256 MB; past either the replica is dropped, with a line in the log.
pub const REPLICA_OUTPUT_LIMIT: OutputBufferLimit = OutputBufferLimit {
    hard: 256 << 20,
    soft: 64 << 20,
    soft_seconds: 60,
};

/// Descriptors kept for what is not a client: the store's files, the ring, epoll, the
/// listener, the quarantine file (Redis keeps 32 too).
pub const RESERVED_FDS: u64 = 32;

/// How many clients the open-file limit lets the server take ([`fit_max_clients`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientsFit {
    /// The most connections at once.
    pub max_clients: usize,
    /// Set when that is fewer than were asked for: the limits that made it so.
    pub reduced: Option<OpenFilesLimit>,
}

/// The open-file limit that holds clients back, and what the clients asked for would need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFilesLimit {
    pub soft: u64,
    pub hard: u64,
    pub needed: u64,
}

/// `wanted` clients fitted to the open-file limit, as Redis does: the soft limit is raised as
/// far as needed and the hard limit allows; if it is still too low, fewer clients are served
/// (and [`ClientsFit::reduced`] says why). A limit that leaves no descriptor for any client is
/// an error.
pub fn fit_max_clients(wanted: usize) -> Result<ClientsFit, crate::ServerError> {
    let need = wanted as u64 + RESERVED_FDS;
    let (soft, hard) = cxltier_sys::rlimit::open_files_limit()
        .map_err(|e| crate::ServerError::OpenFilesLimit(e.to_string()))?;
    let enough = ClientsFit {
        max_clients: wanted,
        reduced: None,
    };
    if soft >= need {
        return Ok(enough);
    }
    let raised = need.min(hard);
    let soft = match cxltier_sys::rlimit::set_open_files_limit(raised) {
        Ok(()) => raised,
        Err(_) => soft,
    };
    if soft >= need {
        return Ok(enough);
    }
    if soft <= RESERVED_FDS {
        return Err(crate::ServerError::TooFewOpenFiles { soft });
    }
    Ok(ClientsFit {
        max_clients: (soft - RESERVED_FDS) as usize,
        reduced: Some(OpenFilesLimit {
            soft,
            hard,
            needed: need,
        }),
    })
}
