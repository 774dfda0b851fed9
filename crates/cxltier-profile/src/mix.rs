//! Read:write traffic mixes, written the way MLC users write them.
//!
//! `R` is read-only; `A:B` is A reads per B writes (`3:1`, `2:1`, `1:1`); a trailing `nt` means the
//! writes are non-temporal stores (`2:1nt`). MLC's traffic codes are accepted as aliases:
//! `W2` = 2:1, `W3` = 3:1, `W5` = 1:1, `W10` = 2:1nt (the codes the published platform tables use).

use serde::{Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// A traffic mix: reads per writes, and whether writes bypass the cache (non-temporal stores).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Mix {
    reads: u32,
    writes: u32,
    non_temporal: bool,
}

impl Mix {
    /// Read-only traffic.
    pub const READ_ONLY: Mix = Mix {
        reads: 1,
        writes: 0,
        non_temporal: false,
    };

    /// The mixes the planner reports when no mix is given: the rows of a typical MLC bandwidth table.
    pub fn common() -> [Mix; 5] {
        [
            Mix::READ_ONLY,
            Mix::new(3, 1, false).expect("valid"),
            Mix::new(2, 1, false).expect("valid"),
            Mix::new(1, 1, false).expect("valid"),
            Mix::new(2, 1, true).expect("valid"),
        ]
    }

    /// A mix of `reads` reads per `writes` writes, reduced to lowest terms.
    pub fn new(reads: u32, writes: u32, non_temporal: bool) -> Result<Mix, MixError> {
        if reads == 0 && writes == 0 {
            return Err(MixError::new(
                "0:0",
                "a mix needs at least one read or write",
            ));
        }
        if writes == 0 && non_temporal {
            return Err(MixError::new(
                "nt",
                "non-temporal applies to writes; a read-only mix has none",
            ));
        }
        let g = gcd(reads, writes);
        Ok(Mix {
            reads: reads / g,
            writes: writes / g,
            non_temporal,
        })
    }

    pub fn reads(&self) -> u32 {
        self.reads
    }
    pub fn writes(&self) -> u32 {
        self.writes
    }
    pub fn is_non_temporal(&self) -> bool {
        self.non_temporal
    }
    pub fn is_read_only(&self) -> bool {
        self.writes == 0
    }

    /// Fraction of requests that are reads, in [0, 1].
    pub fn read_fraction(&self) -> f64 {
        f64::from(self.reads) / f64::from(self.reads + self.writes)
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a.max(1)
    } else {
        gcd(b, a % b)
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.writes == 0 {
            f.write_str("R")
        } else if self.reads == 0 {
            write!(f, "W{}", if self.non_temporal { "nt" } else { "" })
        } else {
            write!(
                f,
                "{}:{}{}",
                self.reads,
                self.writes,
                if self.non_temporal { "nt" } else { "" }
            )
        }
    }
}

impl Serialize for Mix {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A mix that could not be parsed, with what was given and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid mix {given:?}: {reason} (write R, A:B such as 3:1, A:Bnt such as 2:1nt, or W2, W3, W5, W10)")]
pub struct MixError {
    pub given: String,
    pub reason: String,
}

impl cxltier_error::Classify for MixError {
    fn class(&self) -> cxltier_error::Class {
        cxltier_error::Class::BadInput
    }
}

impl MixError {
    fn new(given: &str, reason: &str) -> Self {
        MixError {
            given: given.to_string(),
            reason: reason.to_string(),
        }
    }
}

impl FromStr for Mix {
    type Err = MixError;

    fn from_str(text: &str) -> Result<Mix, MixError> {
        let s = text.trim();
        let err = |reason: &str| MixError::new(text, reason);
        match s.to_ascii_uppercase().as_str() {
            "" => return Err(err("empty")),
            "R" | "W1" => return Ok(Mix::READ_ONLY),
            "W2" => return Mix::new(2, 1, false),
            "W3" => return Mix::new(3, 1, false),
            "W5" => return Mix::new(1, 1, false),
            "W10" => return Mix::new(2, 1, true),
            "W" => return Mix::new(0, 1, false),
            "WNT" => return Mix::new(0, 1, true),
            _ => {}
        }
        let lower = s.to_ascii_lowercase();
        let (body, non_temporal) = match lower.strip_suffix("nt") {
            Some(body) => (body, true),
            None => (lower.as_str(), false),
        };
        let (a, b) = body
            .split_once(':')
            .ok_or_else(|| err("expected reads:writes"))?;
        let parse = |part: &str, what: &str| {
            part.trim()
                .parse::<u32>()
                .map_err(|_| err(&format!("{what} {part:?} is not a whole number")))
        };
        let reads = parse(a, "reads")?;
        let writes = parse(b, "writes")?;
        if reads > 1000 || writes > 1000 {
            return Err(err("ratio terms above 1000 are not meaningful"));
        }
        Mix::new(reads, writes, non_temporal).map_err(|e| err(&e.reason))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_forms_and_aliases() {
        assert_eq!("R".parse::<Mix>().unwrap(), Mix::READ_ONLY);
        assert_eq!("r".parse::<Mix>().unwrap(), Mix::READ_ONLY);
        assert_eq!("W2".parse::<Mix>().unwrap().to_string(), "2:1");
        assert_eq!("W3".parse::<Mix>().unwrap().to_string(), "3:1");
        assert_eq!("W5".parse::<Mix>().unwrap().to_string(), "1:1");
        assert_eq!("W10".parse::<Mix>().unwrap().to_string(), "2:1nt");
        assert_eq!("4:2".parse::<Mix>().unwrap().to_string(), "2:1");
        assert_eq!("2:1NT".parse::<Mix>().unwrap().to_string(), "2:1nt");
        assert_eq!("1:0".parse::<Mix>().unwrap(), Mix::READ_ONLY);
        assert_eq!("0:1".parse::<Mix>().unwrap().to_string(), "W");
    }

    #[test]
    fn read_fraction() {
        assert_eq!(Mix::READ_ONLY.read_fraction(), 1.0);
        assert_eq!("3:1".parse::<Mix>().unwrap().read_fraction(), 0.75);
        assert_eq!("1:1".parse::<Mix>().unwrap().read_fraction(), 0.5);
    }

    #[test]
    fn rejects_nonsense_with_a_reason() {
        for bad in [
            "", "3", "3:x", "0:0", "1:0nt", "3:1:1", "-1:1", "R2", "5000:1",
        ] {
            let e = bad.parse::<Mix>().unwrap_err();
            assert!(e.to_string().contains("invalid mix"), "{bad}: {e}");
        }
    }
}
