//! What Redis's configuration parameters are: their flags, types, bounds and defaults, and how
//! CONFIG SET checks a value against them and CONFIG GET shows it. The table of Redis 7.0's
//! parameters (`config_specs`, generated) is made of these; `knobs` keeps the values set.

/// Redis's parameter flags ([`Param::flags`]).
pub mod pf {
    /// Set only at start: CONFIG SET refuses it ("can't set immutable config").
    pub const IMMUTABLE: u8 = 1 << 0;
    /// Listed by CONFIG GET only when asked for by its exact name, never by a pattern.
    pub const HIDDEN: u8 = 1 << 1;
    /// Refused by CONFIG SET unless `enable-protected-configs` allows it (it does not here).
    pub const PROTECTED: u8 = 1 << 2;
    /// Its value is several words (`save 3600 1`).
    pub const MULTI_ARG: u8 = 1 << 3;
    pub const DENY_LOADING: u8 = 1 << 4;
    pub const SENSITIVE: u8 = 1 << 5;
    pub const VOLATILE: u8 = 1 << 6;
}

/// A Redis parameter's type, bounds and default.
#[derive(Debug)]
pub enum Kind {
    Bool {
        default: bool,
    },
    /// A whole number between `min` and `max`; `memory`: written with a unit (`1gb`), shown
    /// in bytes; `percent`: `N%` is accepted and kept as -N; `octal`: written and shown in
    /// base 8.
    Number {
        min: i128,
        max: i128,
        default: i128,
        memory: bool,
        percent: bool,
        octal: bool,
    },
    Enum {
        values: &'static [&'static str],
        default: &'static str,
    },
    /// Words naming bits (`shutdown-on-sigterm nosave now`).
    Flags {
        values: &'static [(&'static str, u32)],
        default: u32,
    },
    Str {
        default: &'static str,
    },
    /// Its own syntax (`save`, `bind`, `client-output-buffer-limit`, ...): checked by
    /// CONFIG's handler.
    Special,
}

/// One of Redis 7.0's parameters ([`crate::config_specs::PARAMS`]).
#[derive(Debug)]
pub struct Param {
    pub name: &'static str,
    pub alias: Option<&'static str>,
    pub flags: u8,
    pub kind: Kind,
}

impl Param {
    pub fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }

    /// Its default as CONFIG GET shows it (a special parameter's is empty).
    pub fn default_text(&self) -> String {
        match &self.kind {
            Kind::Bool { default } => if *default { "yes" } else { "no" }.into(),
            Kind::Number { default, .. } => self.number_text(*default),
            Kind::Enum { default, .. } => (*default).into(),
            Kind::Flags { values, default } => flags_text(values, *default),
            Kind::Str { default } => (*default).into(),
            Kind::Special => String::new(),
        }
    }

    fn number_text(&self, n: i128) -> String {
        match self.kind {
            Kind::Number { percent: true, .. } if n < 0 => format!("{}%", -n),
            Kind::Number { octal: true, .. } => format!("{n:o}"),
            _ => n.to_string(),
        }
    }

    /// `value` checked as Redis's CONFIG SET checks it, and written as CONFIG GET will show
    /// it; the error is Redis's text (after "... argument 'name') - "). `None` for a special
    /// parameter, whose syntax the caller checks.
    pub fn parse(&self, value: &str) -> Option<Result<String, String>> {
        Some(match &self.kind {
            Kind::Bool { .. } => match value.to_ascii_lowercase().as_str() {
                v @ ("yes" | "no") => Ok(v.to_string()),
                _ => Err("argument must be 'yes' or 'no'".into()),
            },
            Kind::Number {
                min,
                max,
                memory,
                percent,
                octal,
                ..
            } => {
                let parsed: Option<i128> = if *memory {
                    crate::limits::parse_memory(value).map(|n| n as i128)
                } else {
                    None
                }
                .or_else(|| {
                    let digits = value.strip_suffix('%').filter(|_| *percent)?;
                    let n = crate::numbers::int_arg(digits.as_bytes()).filter(|&n| n >= 0)?;
                    Some(-i128::from(n))
                })
                .or_else(|| {
                    if *octal {
                        i64::from_str_radix(value, 8).ok().map(i128::from)
                    } else {
                        None
                    }
                })
                .or_else(|| {
                    if !*memory && !*percent && !*octal {
                        crate::numbers::int_arg(value.as_bytes()).map(i128::from)
                    } else {
                        None
                    }
                });
                let Some(n) = parsed else {
                    return Some(Err(match (*memory, *percent, *octal) {
                        (true, true, _) => "argument must be a memory or percent value",
                        (true, false, _) => "argument must be a memory value",
                        (_, _, true) => "argument couldn't be parsed as an octal number",
                        _ => "argument couldn't be parsed into an integer",
                    }
                    .into()));
                };
                if *percent && n < 0 {
                    if n < *min {
                        return Some(Err(format!(
                            "percentage argument must be less or equal to {}",
                            -min
                        )));
                    }
                } else if n < *min || n > *max {
                    return Some(Err(if *octal {
                        format!("argument must be between {min:o} and {max:o} inclusive")
                    } else {
                        format!("argument must be between {min} and {max} inclusive")
                    }));
                }
                Ok(self.number_text(n))
            }
            Kind::Enum { values, .. } => values
                .iter()
                .find(|v| v.eq_ignore_ascii_case(value))
                .map(|v| v.to_string())
                .ok_or_else(|| {
                    format!(
                        "argument(s) must be one of the following: {}",
                        values.join(", ")
                    )
                }),
            Kind::Flags { values, .. } => {
                let mut bits = 0;
                for word in value.split_ascii_whitespace() {
                    match values.iter().find(|(n, _)| n.eq_ignore_ascii_case(word)) {
                        Some((_, b)) => bits |= b,
                        None => {
                            let names: Vec<&str> = values.iter().map(|(n, _)| *n).collect();
                            return Some(Err(format!(
                                "argument(s) must be one of the following: {}",
                                names.join(", ")
                            )));
                        }
                    }
                }
                let bit = |name: &str| values.iter().find(|(n, _)| *n == name).map_or(0, |v| v.1);
                if bits & bit("save") != 0 && bits & bit("nosave") != 0 {
                    return Some(Err(
                        "shutdown options SAVE and NOSAVE can't be used simultaneously".into(),
                    ));
                }
                Ok(flags_text(values, bits))
            }
            Kind::Str { .. } => Ok(value.to_string()),
            Kind::Special => return None,
        })
    }
}

/// Bits named as Redis names them: the name of 0 when none is set, else each set bit's name.
fn flags_text(values: &[(&str, u32)], bits: u32) -> String {
    if bits == 0 {
        return values
            .iter()
            .find(|(_, b)| *b == 0)
            .map_or(String::new(), |(n, _)| n.to_string());
    }
    let names: Vec<&str> = values
        .iter()
        .filter(|(_, b)| *b != 0 && bits & b == *b)
        .map(|(n, _)| *n)
        .collect();
    names.join(" ")
}
