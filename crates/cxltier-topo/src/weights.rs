//! Weighted-interleave weights as people write them, in order: `3:1`, `5:2:1`, `7`.
//!
//! One parser for every layer that takes weights in order (the planner's candidates, the probe's
//! interleaved targets, `apply`/`run --weights 3:1`, tierd's starting split), with the rules of
//! the kernel's table: each weight a whole number from 1 to 255 (digits only: no sign, no
//! fraction). How many weights there must be (one per tier, one per node) is the caller's to
//! check, since only it knows what they are for. It lives here, next to the interleave table it
//! feeds, because every crate that takes weights depends on this one.

/// The largest weight the kernel's weighted-interleave table takes.
pub const MAX_WEIGHT: u32 = 255;

/// Weights in order (fastest tier, or first node, first), each from 1 to 255.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Weights(Vec<u32>);

/// Weights that do not parse: the text and what is wrong with it (and so how to fix it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid weights {text:?}: {reason}")]
pub struct WeightsError {
    pub text: String,
    pub reason: String,
}

impl cxltier_error::Classify for WeightsError {
    fn class(&self) -> cxltier_error::Class {
        cxltier_error::Class::BadInput
    }

    fn hint(&self) -> Option<String> {
        Some("write whole numbers from 1 to 255 separated by ':', fastest first, e.g. 3:1".into())
    }
}

impl Weights {
    /// Parse `3:1`: whole numbers from 1 to 255 separated by `:` (spaces around each allowed).
    pub fn parse(text: &str) -> Result<Weights, WeightsError> {
        let err = |reason: String| WeightsError {
            text: text.to_string(),
            reason,
        };
        if text.trim().is_empty() {
            return Err(err(
                "expected weights in tier order, fastest first, like 3:1".to_string(),
            ));
        }
        let mut weights = Vec::new();
        for part in text.split(':') {
            let t = part.trim();
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err(format!(
                    "{t:?} is not a weight (a whole number from 1 to 255)"
                )));
            }
            // Digits only: a parse failure is an overflow, out of range as any value above 255.
            let w = t.parse::<u32>().unwrap_or(u32::MAX);
            if !(1..=MAX_WEIGHT).contains(&w) {
                return Err(err(format!(
                    "weight {t} is outside 1..=255, the range the kernel accepts"
                )));
            }
            weights.push(w);
        }
        Ok(Weights(weights))
    }

    /// The weights, in order.
    pub fn as_slice(&self) -> &[u32] {
        &self.0
    }

    /// The weights, in order.
    pub fn into_vec(self) -> Vec<u32> {
        self.0
    }

    /// How many weights there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true for parsed weights (at least one is required); here for completeness.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::str::FromStr for Weights {
    type Err = WeightsError;
    fn from_str(text: &str) -> Result<Weights, WeightsError> {
        Weights::parse(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_whole_numbers_in_range() {
        assert_eq!(Weights::parse("3:1").unwrap().as_slice(), &[3, 1]);
        assert_eq!(Weights::parse(" 5 : 2 :1").unwrap().as_slice(), &[5, 2, 1]);
        assert_eq!(Weights::parse("7").unwrap().as_slice(), &[7]);
        assert_eq!(Weights::parse("255:1").unwrap().as_slice(), &[255, 1]);
    }

    #[test]
    fn refuses_what_the_kernel_would_not_take_naming_the_problem() {
        for bad in ["", "3:", ":1", "3:x", "3,1", "-3:1", "+3:1", "3.5:1"] {
            let e = Weights::parse(bad).unwrap_err();
            assert!(e.to_string().starts_with("invalid weights"), "{bad:?}: {e}");
        }
        let e = Weights::parse("0:1").unwrap_err();
        assert!(e.reason.contains("weight 0 is outside 1..=255"), "{e}");
        let e = Weights::parse("300:1").unwrap_err();
        assert!(e.reason.contains("weight 300 is outside 1..=255"), "{e}");
        let e = Weights::parse("99999999999:1").unwrap_err();
        assert!(e.reason.contains("outside 1..=255"), "{e}");
        let e = Weights::parse("3:x").unwrap_err();
        assert!(e.reason.contains("\"x\" is not a weight"), "{e}");
    }
}
