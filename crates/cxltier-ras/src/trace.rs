//! Parsing of tracefs text lines into events with named fields.
//!
//! A line of `trace` or `trace_pipe` looks like
//!
//! ```text
//!   cxl-1234  [001] .....  57.123456: cxl_poison: memdev=mem0 host=0000:0e:00.0 serial=3235774464 ...
//! ```
//!
//! and the CXL events print their fields as `key=value`, `key='quoted value'` or
//! `key: 'quoted value'` (the AER events' `status: '...'`), with stray ` : ` separators between
//! groups. Field values keep the kernel's text; typing them is the job of [`crate::event`].

/// One trace line split into its parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceLine {
    /// The event's name (`cxl_poison`).
    pub event: String,
    /// The trace clock timestamp, in seconds, as the kernel printed it.
    pub timestamp: Option<String>,
    /// The fields in the order they were printed.
    pub fields: Vec<(String, String)>,
}

impl TraceLine {
    /// The value of field `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Splits one line of `trace`/`trace_pipe` output. Returns `None` for comment lines (`# ...`),
/// empty lines and lines that are not events (the header of `trace`, "lost events" notices).
pub fn parse_line(line: &str) -> Option<TraceLine> {
    let line = line.trim_end_matches(['\n', '\r']);
    if line.trim_start().starts_with('#') || line.trim().is_empty() {
        return None;
    }
    // The timestamp is the first token after the `[cpu]` column that ends with ':' and parses as a
    // number; the event name follows it, also ending with ':'.
    let after_cpu = line.find("] ").map(|i| i + 2)?;
    let rest = &line[after_cpu..];
    let mut offset = after_cpu;
    let mut timestamp = None;
    let mut event = None;
    let mut body_start = line.len();
    for token in rest.split_inclusive(' ') {
        let t = token.trim();
        offset += token.len();
        if t.is_empty() {
            continue;
        }
        if timestamp.is_none() {
            if let Some(ts) = t.strip_suffix(':') {
                if ts.parse::<f64>().is_ok() {
                    timestamp = Some(ts.to_string());
                }
            }
            continue;
        }
        if let Some(name) = t.strip_suffix(':') {
            event = Some(name.to_string());
            body_start = offset.min(line.len());
        }
        break;
    }
    let event = event?;
    if event.is_empty()
        || !event
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_')
    {
        return None;
    }
    Some(TraceLine {
        event,
        timestamp,
        fields: parse_fields(&line[body_start..]),
    })
}

/// Splits an event body into `key=value` / `key='value'` / `key: 'value'` fields.
pub fn parse_fields(body: &str) -> Vec<(String, String)> {
    let b = body.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        // Skip separators.
        while i < b.len() && (b[i] == b' ' || b[i] == b':' || b[i] == b',') {
            i += 1;
        }
        let start = i;
        while i < b.len() && b[i] != b'=' && b[i] != b' ' && b[i] != b':' && b[i] != b'\'' {
            i += 1;
        }
        let key = &body[start..i];
        if i >= b.len() {
            break;
        }
        let value_start = match b[i] {
            b'=' => i + 1,
            // `key: 'value'`
            b':' if body[i + 1..].trim_start().starts_with('\'') => {
                i + 1 + (body[i + 1..].len() - body[i + 1..].trim_start().len())
            }
            b'\'' => {
                // A quoted word without a key: skip it.
                i += 1;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
                continue;
            }
            _ => {
                i += 1;
                continue;
            }
        };
        i = value_start;
        let value = if i < b.len() && b[i] == b'\'' {
            let vs = i + 1;
            let mut j = vs;
            while j < b.len() && b[j] != b'\'' {
                j += 1;
            }
            i = (j + 1).min(b.len());
            &body[vs..j.min(b.len())]
        } else {
            let vs = i;
            while i < b.len() && b[i] != b' ' {
                i += 1;
            }
            body[vs..i].trim_end_matches([':', ','])
        };
        if !key.is_empty() {
            out.push((key.to_string(), value.to_string()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_header_and_fields() {
        let l = parse_line(
            "            bash-215     [000] .....    41.123456: cxl_aer_correctable_error: memdev=mem1 host=0000:0e:00.0 serial=3235774464: status: 'Memory Data ECC Error'",
        )
        .unwrap();
        assert_eq!(l.event, "cxl_aer_correctable_error");
        assert_eq!(l.timestamp.as_deref(), Some("41.123456"));
        assert_eq!(l.get("memdev"), Some("mem1"));
        assert_eq!(l.get("host"), Some("0000:0e:00.0"));
        assert_eq!(l.get("serial"), Some("3235774464"));
        assert_eq!(l.get("status"), Some("Memory Data ECC Error"));
    }

    #[test]
    fn quoted_values_and_separators() {
        let f = parse_fields(
            "memdev=mem0 log=Informational : hdr_flags='0x1' dpa_flags='' descriptor='UNCORRECTABLE_EVENT|THRESHOLD_EVENT' hpa=ffffffffffffffff region=",
        );
        let get = |k: &str| f.iter().find(|(a, _)| a == k).map(|(_, v)| v.as_str());
        assert_eq!(get("log"), Some("Informational"));
        assert_eq!(get("hdr_flags"), Some("0x1"));
        assert_eq!(get("dpa_flags"), Some(""));
        assert_eq!(
            get("descriptor"),
            Some("UNCORRECTABLE_EVENT|THRESHOLD_EVENT")
        );
        assert_eq!(get("hpa"), Some("ffffffffffffffff"));
        assert_eq!(get("region"), Some(""));
    }

    #[test]
    fn ignores_comments_and_noise() {
        assert!(parse_line("# tracer: nop").is_none());
        assert!(parse_line("").is_none());
        assert!(parse_line("CPU:1 [LOST 3 EVENTS]").is_none());
        assert!(parse_line("garbage without brackets").is_none());
    }
}
