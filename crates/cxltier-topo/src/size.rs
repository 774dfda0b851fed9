//! Sizes as people write them: `4096`, `64K`, `64M`, `1G`, `64MiB`, `1.5G`, `100MB`.
//!
//! `K`, `M`, `G`, `T` (with or without `iB`) are powers of 1024, as in `numactl`, `free` and
//! `dd`; `KB`, `MB`, `GB`, `TB` are powers of 1000, as in `dd`. Unit letters are case-insensitive; a
//! trailing `B` alone means bytes. Fractions are allowed when the result is a whole number of bytes
//! after rounding down.

//!
//! It lives in the topology crate because every layer that takes a size from a person (the store's
//! `--ssd PATH:SIZE`, tierd's `dram_budget`, control's and the CLI's flags) already depends on it.

/// A size that does not parse: the text and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid size {text:?}: {reason} (expected bytes, or a number with a unit: 4096, 64K, 64M, \
     1G, 64MiB, 1.5G; K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB of 1000)"
)]
pub struct SizeError {
    pub text: String,
    pub reason: String,
}

/// Parse a size into bytes; at least 1.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let err = |reason: &str| SizeError {
        text: text.to_string(),
        reason: reason.to_string(),
    };
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    if number.is_empty() || number.starts_with('.') || number.ends_with('.') {
        return Err(err(
            "it does not start with a plain number (digits, optionally one decimal point)",
        ));
    }
    if number.matches('.').count() > 1 {
        return Err(err("the number has more than one decimal point"));
    }
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(err(&format!("unknown unit {:?}", unit.trim()))),
    };
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    let whole: u64 = whole.parse().map_err(|_| err("the number is too large"))?;
    let mut bytes = whole
        .checked_mul(multiplier)
        .ok_or_else(|| err("the size is too large"))?;
    if !frac.is_empty() {
        // Exact decimal arithmetic: frac / 10^len * multiplier, rounded down.
        if frac.len() > 12 {
            return Err(err("too many decimal places"));
        }
        let digits: u128 = frac.parse().map_err(|_| err("bad fraction"))?;
        let scale = 10u128.pow(frac.len() as u32);
        let part = digits * multiplier as u128 / scale;
        bytes = bytes
            .checked_add(part as u64)
            .ok_or_else(|| err("the size is too large"))?;
    }
    if bytes == 0 {
        return Err(err("the size must be at least one byte"));
    }
    Ok(bytes)
}

/// A size as written and in bytes: parsed once where it is read (a flag, a policy file) and
/// shown as the person wrote it (`64M`, not 67108864).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Size {
    bytes: u64,
    text: String,
}

impl Size {
    /// Parse a size ([`parse_size`]' rules), keeping the text.
    pub fn parse(text: &str) -> Result<Size, SizeError> {
        Ok(Size {
            bytes: parse_size(text)?,
            text: text.to_string(),
        })
    }

    /// The size in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for Size {
    type Err = SizeError;
    fn from_str(text: &str) -> Result<Size, SizeError> {
        Size::parse(text)
    }
}

impl TryFrom<String> for Size {
    type Error = SizeError;
    fn try_from(text: String) -> Result<Size, SizeError> {
        Size::parse(&text)
    }
}

impl From<Size> for String {
    fn from(size: Size) -> String {
        size.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4096B").unwrap(), 4096);
        assert_eq!(parse_size("64K").unwrap(), 64 << 10);
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("64m").unwrap(), 64 << 20);
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("2T").unwrap(), 2 << 40);
        assert_eq!(parse_size("100MB").unwrap(), 100_000_000);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size(" 8 M ").unwrap(), 8 << 20);
        assert_eq!(parse_size("0.5K").unwrap(), 512);
    }

    #[test]
    fn rejects_nonsense_with_reason() {
        for (bad, why) in [
            ("", "number"),
            ("M", "number"),
            ("lots", "number"),
            ("-1M", "number"),
            ("64Q", "unknown unit"),
            ("64 megabytes", "unknown unit"),
            ("0", "at least one byte"),
            ("1.2.3M", "decimal point"),
            ("99999999999999999999", "too large"),
            ("20000000T", "too large"),
            ("1.", "number"),
        ] {
            let e = parse_size(bad).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains(why), "{bad:?}: {msg}");
            assert!(msg.contains("64MiB"), "{msg}");
        }
    }
}
