//! Prometheus exposition shared by `cxltier tierd` and `cxltier serve`.
//!
//! - [`text`]: the text format 0.0.4 writer ([`Writer`]: HELP and TYPE once per family, label
//!   values and help escaped, `_total` counters, `_info` gauges, histograms, tables of
//!   [`Figure`]s read alike from each item of a list) and [`Histogram`], fixed buckets cheap
//!   enough to observe on a request path.
//! - [`http`]: [`Published`] (the latest text, replaced whole by its owner) and [`serve`], a
//!   listener on its own thread that answers `GET /metrics` with it and 404 for other paths.
//!
//! The owner of the figures renders and publishes; the listener only copies a reference to the
//! published text, so a scrape never waits for (or makes wait) the loop that owns the figures.

// A library reports through its return values; only the CLI prints.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod http;
pub mod promtool;
pub mod text;

pub use http::{is_loopback, parse_addr, serve, MetricsError, Published};
pub use text::{Figure, Histogram, Writer};

/// `cxltier_build_info`'s family, the same in every exposition: the version and the target
/// the binary was built for, as labels of a constant 1.
pub fn build_info(w: &mut Writer) {
    w.info(
        "cxltier_build_info",
        "The cxltier build: version, target architecture and OS.",
    )
    .info(&[
        ("version", &env!("CARGO_PKG_VERSION")),
        ("arch", &std::env::consts::ARCH),
        ("os", &std::env::consts::OS),
    ]);
}
