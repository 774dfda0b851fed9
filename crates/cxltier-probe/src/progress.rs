//! Progress for people: a bar on stderr while the probe runs (hidden when stderr is not a
//! terminal), driven by estimated seconds per phase.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::Duration;

/// Receives the probe's progress.
pub trait Progress: Sync {
    /// The probe starts; it expects to take about `total_s` seconds.
    fn start(&self, total_s: f64);
    /// A new phase begins.
    fn phase(&self, text: &str);
    /// Work estimated at `secs` seconds is done.
    fn advance(&self, secs: f64);
    /// The probe is done.
    fn finish(&self);
}

/// No progress output.
pub struct Silent;

impl Progress for Silent {
    fn start(&self, _: f64) {}
    fn phase(&self, _: &str) {}
    fn advance(&self, _: f64) {}
    fn finish(&self) {}
}

/// An indicatif bar on stderr, in tenths of a second of estimated work.
pub struct Bar {
    bar: ProgressBar,
}

impl Bar {
    /// A bar on stderr; `hidden` forces it off (it is off anyway when stderr is not a terminal).
    pub fn new(hidden: bool) -> Bar {
        let target = if hidden {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        };
        let bar = ProgressBar::with_draw_target(Some(0), target);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] [{bar:28}] {percent:>3}% (~{eta} left) {msg}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        Bar { bar }
    }
}

impl Progress for Bar {
    fn start(&self, total_s: f64) {
        self.bar.set_length((total_s * 10.0).ceil().max(1.0) as u64);
        self.bar.enable_steady_tick(Duration::from_millis(200));
    }
    fn phase(&self, text: &str) {
        self.bar.set_message(text.to_string());
    }
    fn advance(&self, secs: f64) {
        self.bar.inc((secs * 10.0).round() as u64);
    }
    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
