//! Integers and floats as Redis reads and prints them in arguments and configuration values.
//! It depends on nothing of the server, so the configuration tables and the command table can
//! parse numbers without importing the handlers' helpers.

/// Redis's strict integer syntax (no sign `+`, no spaces).
pub(crate) fn int_arg(b: &[u8]) -> Option<i64> {
    if b.first() == Some(&b'+') {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// A float as INCRBYFLOAT and HINCRBYFLOAT read one (`strtold` on the whole string): no
/// spaces, no NaN.
pub(crate) fn parse_f64(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.bytes().any(|c| c.is_ascii_whitespace()) {
        return None;
    }
    s.parse::<f64>().ok().filter(|f| !f.is_nan())
}

/// A float the way INCRBYFLOAT stores it: no exponent, no trailing zeros (Rust's shortest
/// round-trip form prints `10.6`, not `10.5999999999999996`).
pub(crate) fn format_f64(f: f64) -> String {
    if f == 0.0 {
        return "0".into();
    }
    format!("{f}")
}
