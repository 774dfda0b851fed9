//! Sizes as people write them: `4096`, `64K`, `64M`, `1G`, `64MiB`, `1.5G`, `100MB`.
//!
//! `K`, `M`, `G`, `T` (with or without `iB`) are powers of 1024, as in `numactl`, `free` and
//! `dd`; `KB`, `MB`, `GB`, `TB` are powers of 1000, as in `dd`. Unit letters are case-insensitive; a
//! trailing `B` alone means bytes. Fractions are allowed when the result is a whole number of bytes
//! after rounding down.

//!
//! The parser is `cxltier_topo::size`; this wraps its error as a [`ControlError::BadSize`].

use crate::ControlError;

/// Parse a size into bytes; at least 1.
pub fn parse_size(text: &str) -> Result<u64, ControlError> {
    cxltier_topo::size::parse_size(text).map_err(|e| ControlError::BadSize {
        text: e.text,
        reason: e.reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Classify;

    #[test]
    fn a_bad_size_is_bad_input_with_the_same_message() {
        let e = parse_size("64Q").unwrap_err();
        assert_eq!(e.class(), crate::Class::BadInput);
        assert_eq!(
            e.to_string(),
            cxltier_topo::size::parse_size("64Q")
                .unwrap_err()
                .to_string()
        );
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
    }
}
