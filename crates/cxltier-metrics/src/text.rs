//! Prometheus' text format 0.0.4: families (HELP, TYPE, samples) written in one pass.
//!
//! A family is opened with [`Writer::gauge`], [`Writer::counter`], [`Writer::info`] or
//! [`Writer::histogram`], which write its HELP and TYPE lines, and its samples follow through
//! the [`Family`] handle. Label values are escaped (`\`, `"`, newline), as is help text, so a
//! process name or an error string cannot break the exposition.

use std::fmt::{Display, Write as _};

/// One label: its name (a code constant) and its value (anything displayable; escaped).
pub type Label<'a> = (&'a str, &'a dyn Display);

/// The exposition being written.
#[derive(Debug, Default)]
pub struct Writer {
    out: String,
    /// A label value's text before escaping (kept to spare an allocation per label).
    scratch: String,
}

/// A sample's value: integers are written exactly, floats as Prometheus reads them (`NaN`,
/// `+Inf`, `-Inf`).
pub trait SampleValue: Copy {
    fn write_to(self, out: &mut String);
}

macro_rules! integer_value {
    ($($t:ty),*) => {$(
        impl SampleValue for $t {
            fn write_to(self, out: &mut String) {
                let _ = write!(out, "{self}");
            }
        }
    )*};
}
integer_value!(u8, u32, u64, usize, i64);

impl SampleValue for f64 {
    fn write_to(self, out: &mut String) {
        if self.is_nan() {
            out.push_str("NaN");
        } else if self.is_infinite() {
            out.push_str(if self > 0.0 { "+Inf" } else { "-Inf" });
        } else {
            let _ = write!(out, "{self}");
        }
    }
}

impl Writer {
    pub fn new() -> Writer {
        Writer::default()
    }

    /// A value that goes up and down.
    pub fn gauge(&mut self, name: &str, help: &str) -> Family<'_> {
        self.family(name, "gauge", help)
    }

    /// A count that only grows (until the process restarts): its name ends in `_total`.
    pub fn counter(&mut self, name: &str, help: &str) -> Family<'_> {
        debug_assert!(
            name.ends_with("_total"),
            "counter {name} must end in _total"
        );
        self.family(name, "counter", help)
    }

    /// Facts as labels on a constant 1 (a build, a configuration): its name ends in `_info`.
    pub fn info(&mut self, name: &str, help: &str) -> Family<'_> {
        debug_assert!(
            name.ends_with("_info"),
            "info metric {name} must end in _info"
        );
        self.family(name, "gauge", help)
    }

    /// A [`Histogram`]: `_bucket` (cumulative, by `le`), `_sum` and `_count`.
    pub fn histogram(&mut self, name: &str, help: &str) -> Family<'_> {
        self.family(name, "histogram", help)
    }

    /// The text written so far.
    pub fn finish(self) -> String {
        self.out
    }

    fn family(&mut self, name: &str, kind: &str, help: &str) -> Family<'_> {
        debug_assert!(valid_name(name, true), "bad metric name {name:?}");
        let _ = write!(self.out, "# HELP {name} ");
        for c in help.chars() {
            match c {
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                c => self.out.push(c),
            }
        }
        let _ = writeln!(self.out, "\n# TYPE {name} {kind}");
        Family {
            writer: self,
            name: name.to_string(),
        }
    }
}

/// An open family: its samples.
pub struct Family<'w> {
    writer: &'w mut Writer,
    name: String,
}

impl Family<'_> {
    /// One sample of the family's metric.
    pub fn sample(&mut self, labels: &[Label<'_>], value: impl SampleValue) -> &mut Self {
        self.write_sample("", labels, None, value);
        self
    }

    /// The constant 1 of an `_info` metric.
    pub fn info(&mut self, labels: &[Label<'_>]) -> &mut Self {
        self.sample(labels, 1u8)
    }

    /// A histogram's series for one label set: a cumulative `_bucket` per bound and `+Inf`,
    /// then `_sum` and `_count`.
    pub fn histogram(&mut self, labels: &[Label<'_>], h: &Histogram) -> &mut Self {
        let mut cumulative = 0u64;
        for (i, n) in h.counts.iter().enumerate() {
            cumulative += n;
            match h.bounds.get(i) {
                Some(le) => self.write_sample("_bucket", labels, Some(*le), cumulative),
                None => self.write_sample("_bucket", labels, Some(f64::INFINITY), cumulative),
            }
        }
        self.write_sample("_sum", labels, None, h.sum);
        self.write_sample("_count", labels, None, h.count);
        self
    }

    fn write_sample(
        &mut self,
        suffix: &str,
        labels: &[Label<'_>],
        le: Option<f64>,
        value: impl SampleValue,
    ) {
        let w = &mut *self.writer;
        w.out.push_str(&self.name);
        w.out.push_str(suffix);
        if !labels.is_empty() || le.is_some() {
            w.out.push('{');
            for (i, (name, value)) in labels.iter().enumerate() {
                debug_assert!(
                    valid_name(name, false) && *name != "le",
                    "bad label name {name:?}"
                );
                if i > 0 {
                    w.out.push(',');
                }
                w.scratch.clear();
                let _ = write!(w.scratch, "{value}");
                w.out.push_str(name);
                w.out.push_str("=\"");
                escape_label_value(&w.scratch, &mut w.out);
                w.out.push('"');
            }
            if let Some(le) = le {
                if !labels.is_empty() {
                    w.out.push(',');
                }
                w.out.push_str("le=\"");
                le.write_to(&mut w.out);
                w.out.push('"');
            }
            w.out.push('}');
        }
        w.out.push(' ');
        value.write_to(&mut w.out);
        w.out.push('\n');
    }
}

/// One family of a table whose figures are all read alike from each item of a list (the
/// commands a server ran, the targets tierd follows): its type, name and help text, and how to
/// read its figure from an item. [`Writer::figures`] writes such a table.
pub struct Figure<T, V = u64> {
    counter: bool,
    name: &'static str,
    help: &'static str,
    value: fn(&T) -> V,
}

impl<T, V: SampleValue> Figure<T, V> {
    /// A gauge ([`Writer::gauge`]) of `value` of each item.
    pub fn gauge(name: &'static str, help: &'static str, value: fn(&T) -> V) -> Figure<T, V> {
        Figure {
            counter: false,
            name,
            help,
            value,
        }
    }

    /// A counter ([`Writer::counter`]) of `value` of each item.
    pub fn counter(name: &'static str, help: &'static str, value: fn(&T) -> V) -> Figure<T, V> {
        Figure {
            counter: true,
            name,
            help,
            value,
        }
    }
}

impl Writer {
    /// A family for each figure of `table`, in order, each with a sample for every item of
    /// `items` in order: the item's labels, and the figure read from it.
    pub fn figures<'l, T, V: SampleValue, L: AsRef<[Label<'l>]>>(
        &mut self,
        table: &[Figure<T, V>],
        items: &[(L, T)],
    ) {
        for figure in table {
            let mut family = if figure.counter {
                self.counter(figure.name, figure.help)
            } else {
                self.gauge(figure.name, figure.help)
            };
            for (labels, item) in items {
                family.sample(labels.as_ref(), (figure.value)(item));
            }
        }
    }
}

/// A label value as the text format quotes it: backslash, double quote and newline escaped.
pub fn escape_label_value(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*` for metric names; no `:` in label names.
fn valid_name(name: &str, metric: bool) -> bool {
    let ok = |c: char, first: bool| {
        c.is_ascii_alphabetic()
            || c == '_'
            || (metric && c == ':')
            || (!first && c.is_ascii_digit())
    };
    let mut chars = name.chars();
    chars.next().is_some_and(|c| ok(c, true)) && chars.all(|c| ok(c, false))
}

/// Request latency buckets in seconds, 10 µs to 10 s: a command served from memory lands in
/// the first few, one that read NVMe or ran a script further up.
pub const LATENCY_SECONDS: &[f64] = &[
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Observations counted into fixed buckets: a scan of the bounds and two additions per
/// observation, memory fixed by the bounds.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// Upper bounds (`le`), ascending; the `+Inf` bucket is implied.
    bounds: &'static [f64],
    /// Observations per bucket (not cumulative): one per bound, then `+Inf`.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// Empty, over `bounds` (ascending and finite).
    pub fn new(bounds: &'static [f64]) -> Histogram {
        debug_assert!(
            bounds.windows(2).all(|w| w[0] < w[1]) && bounds.iter().all(|b| b.is_finite())
        );
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    /// Count `value` in the first bucket whose bound is at least it (`le`: less or equal).
    pub fn observe(&mut self, value: f64) {
        // A scan from the smallest bound, not a binary search: observations crowd the low
        // buckets (a server's command times, mostly under 10 µs, stop at the first).
        let i = self
            .bounds
            .iter()
            .position(|&b| b >= value)
            .unwrap_or(self.bounds.len());
        self.counts[i] += 1;
        self.sum += value;
        self.count += 1;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// Forget every observation (CONFIG RESETSTAT).
    pub fn reset(&mut self) {
        self.counts.iter_mut().for_each(|c| *c = 0);
        self.sum = 0.0;
        self.count = 0;
    }
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram::new(LATENCY_SECONDS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_have_help_type_and_escaped_labels() {
        let mut w = Writer::new();
        w.gauge("x_bytes", "Bytes.\nTwo lines, a \\ too.")
            .sample(&[("name", &"a\"b\\c\nd"), ("n", &7u32)], 5u64);
        w.counter("y_total", "Count.").sample(&[], 3u64);
        w.gauge("z_ratio", "Floats.")
            .sample(&[], 0.25f64)
            .sample(&[("k", &"nan")], f64::NAN)
            .sample(&[("k", &"inf")], f64::INFINITY);
        let text = w.finish();
        assert_eq!(
            text,
            "# HELP x_bytes Bytes.\\nTwo lines, a \\\\ too.\n# TYPE x_bytes gauge\n\
             x_bytes{name=\"a\\\"b\\\\c\\nd\",n=\"7\"} 5\n\
             # HELP y_total Count.\n# TYPE y_total counter\ny_total 3\n\
             # HELP z_ratio Floats.\n# TYPE z_ratio gauge\nz_ratio 0.25\n\
             z_ratio{k=\"nan\"} NaN\nz_ratio{k=\"inf\"} +Inf\n"
        );
    }

    #[test]
    fn histograms_are_cumulative_with_inf_sum_and_count() {
        static BOUNDS: &[f64] = &[0.001, 0.01, 0.1];
        let mut h = Histogram::new(BOUNDS);
        for v in [0.0005, 0.001, 0.002, 0.05, 3.0] {
            h.observe(v);
        }
        let mut w = Writer::new();
        w.histogram("lat_seconds", "Latency.")
            .histogram(&[("cmd", &"get")], &h);
        let text = w.finish();
        let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "lat_seconds_bucket{cmd=\"get\",le=\"0.001\"} 2",
                "lat_seconds_bucket{cmd=\"get\",le=\"0.01\"} 3",
                "lat_seconds_bucket{cmd=\"get\",le=\"0.1\"} 4",
                "lat_seconds_bucket{cmd=\"get\",le=\"+Inf\"} 5",
                "lat_seconds_sum{cmd=\"get\"} 3.0535",
                "lat_seconds_count{cmd=\"get\"} 5",
            ]
        );
        h.reset();
        assert_eq!((h.count(), h.sum()), (0, 0.0));
    }

    #[test]
    fn info_is_a_constant_one() {
        let mut w = Writer::new();
        crate::build_info(&mut w);
        let text = w.finish();
        assert!(text.contains("# TYPE cxltier_build_info gauge\n"), "{text}");
        assert!(
            text.contains(&format!(
                "cxltier_build_info{{version=\"{}\",",
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
        assert!(text.trim_end().ends_with("} 1"), "{text}");
    }

    #[test]
    fn names_are_checked() {
        assert!(valid_name("cxltier_a:b_1", true));
        assert!(!valid_name("1abc", true));
        assert!(!valid_name("a-b", true));
        assert!(!valid_name("a:b", false));
        assert!(!valid_name("", false));
    }
}
