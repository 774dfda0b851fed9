//! Where the probe reports its progress, in estimated seconds per phase. The library draws
//! nothing: the CLI implements [`ProgressSink`] with a bar on stderr.

/// Receives the probe's progress.
pub trait ProgressSink: Sync {
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

impl ProgressSink for Silent {
    fn start(&self, _: f64) {}
    fn phase(&self, _: &str) {}
    fn advance(&self, _: f64) {}
    fn finish(&self) {}
}
