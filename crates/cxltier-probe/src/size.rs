//! Sizes on the command line: `64M`, `2G`, `512MiB`, `1.5G`, `4096`. Units are binary (K = 1024),
//! as in numactl, MLC and most memory tools.

use crate::ProbeError;

/// Parse a size in bytes.
pub fn parse_size(text: &str) -> Result<u64, ProbeError> {
    let err = |reason: &str| ProbeError::Size {
        given: text.to_string(),
        reason: reason.to_string(),
    };
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(err("expected a number"));
    }
    let value: f64 = num
        .parse()
        .map_err(|_| err(&format!("{num:?} is not a number")))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => return Err(err(&format!("unknown unit {other:?} (use K, M, G or T)"))),
    };
    let bytes = value * mult as f64;
    if !(bytes.is_finite() && bytes >= 1.0) {
        return Err(err("the size must be at least 1 byte"));
    }
    if bytes > (1u64 << 50) as f64 {
        return Err(err("the size is larger than any machine's memory"));
    }
    Ok(bytes.round() as u64)
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
