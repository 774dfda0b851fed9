//! Sizes on the command line (`64M`, `2G`, `512MiB`, `1.5G`, `4096`), parsed as every cxltier
//! command parses them, and short forms for people.

use crate::ProbeError;

/// Parse a size in bytes, with the same syntax as every other cxltier command
/// (`cxltier_control::size`: K/M/G/T and KiB..TiB are binary, KB..TB decimal).
pub fn parse_size(text: &str) -> Result<u64, ProbeError> {
    cxltier_control::size::parse_size(text).map_err(|e| match e {
        cxltier_control::ControlError::BadSize { text, reason } => ProbeError::Size {
            given: text,
            reason,
        },
        other => ProbeError::Size {
            given: text.to_string(),
            reason: other.to_string(),
        },
    })
}

/// Round `bytes` up to a multiple of `to` (a power of two).
pub fn round_up(bytes: u64, to: u64) -> u64 {
    bytes.div_ceil(to) * to
}

/// Round `bytes` down to a multiple of `to` (a power of two).
pub fn round_down(bytes: u64, to: u64) -> u64 {
    bytes / to * to
}

/// A size for people, as short as possible without losing precision that matters: `64M`, `1.5G`,
/// `512K` (the form `--buffer` accepts).
pub fn short(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("T", 1 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ];
    for (u, m) in UNITS {
        if bytes >= m {
            let v = bytes as f64 / m as f64;
            return if (v - v.round()).abs() < 1e-9 {
                format!("{}{u}", v.round() as u64)
            } else {
                format!("{v:.1}{u}")
            };
        }
    }
    format!("{bytes}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5g").unwrap(), 3 << 29);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size(" 8k ").unwrap(), 8192);
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "M", "12Q", "-5M", "0", "1..2G", "99999999T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn short_forms() {
        assert_eq!(short(64 << 20), "64M");
        assert_eq!(short(3 << 29), "1.5G");
        assert_eq!(short(100), "100");
        assert_eq!(parse_size(&short(2 << 30)).unwrap(), 2 << 30);
    }
}
