//! `promtool check metrics` on an exposition: the test suites' check that what tierd and serve
//! publish parses and follows Prometheus' naming rules (base units, `_total` counters, HELP).

use std::io::Write;
use std::process::{Command, Stdio};

/// The environment variable that makes a missing promtool a failure (CI sets it).
pub const REQUIRE_VAR: &str = "CXLTIER_REQUIRE_PROMTOOL";

/// What promtool said about an exposition.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No problem found.
    Clean,
    /// Problems, as promtool words them (its exit status and output).
    Problems(String),
    /// promtool is not installed (Debian's `prometheus` package has it).
    Missing,
}

/// Run `promtool check metrics` with `text` on its standard input.
pub fn check(text: &str) -> Verdict {
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Verdict::Missing,
        Err(e) => return Verdict::Problems(format!("promtool could not start: {e}")),
    };
    // promtool reads all of its input before it writes: writing first cannot dead-lock.
    let written = child
        .stdin
        .take()
        .map(|mut stdin| stdin.write_all(text.as_bytes()));
    let out = match child.wait_with_output() {
        Ok(o) => o,
        Err(e) => return Verdict::Problems(format!("waiting for promtool: {e}")),
    };
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    match written {
        Some(Err(e)) => Verdict::Problems(format!("writing to promtool: {e}; it said: {said}")),
        _ if out.status.success() && said.trim().is_empty() => Verdict::Clean,
        _ => Verdict::Problems(format!("promtool check metrics: {}: {said}", out.status)),
    }
}

/// For tests: panic with promtool's words unless `text` is clean. Without promtool the check
/// is skipped with a message on stderr, unless [`REQUIRE_VAR`] is `1`: then that is a failure
/// too. Returns whether promtool ran.
pub fn assert_clean(what: &str, text: &str) -> bool {
    match check(text) {
        Verdict::Clean => true,
        Verdict::Problems(p) => panic!("{what}: {p}\n--- the exposition:\n{text}"),
        Verdict::Missing if std::env::var(REQUIRE_VAR).as_deref() == Ok("1") => panic!(
            "{what}: promtool is not installed and {REQUIRE_VAR}=1 requires it (apt-get install prometheus; scripts/deps does)"
        ),
        Verdict::Missing => {
            // Through the stderr handle rather than eprintln!, which the test harness captures
            // and hides for a test that passes: a skipped check must show in the run's output.
            let _ = writeln!(
                std::io::stderr(),
                "WARNING: {what}: promtool is not installed: `promtool check metrics` NOT run (apt-get install prometheus; set {REQUIRE_VAR}=1 to make this a failure)"
            );
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promtool_finds_a_counter_without_total_and_passes_a_clean_one() {
        let bad = "# HELP x_pages Pages.\n# TYPE x_pages counter\nx_pages 1\n";
        match check(bad) {
            Verdict::Missing => {
                assert_ne!(
                    std::env::var(REQUIRE_VAR).as_deref(),
                    Ok("1"),
                    "promtool is not installed and {REQUIRE_VAR}=1 requires it"
                );
                return;
            }
            Verdict::Problems(p) => assert!(p.contains("_total"), "{p}"),
            Verdict::Clean => panic!("promtool passed a counter without _total"),
        }
        let mut w = crate::Writer::new();
        crate::build_info(&mut w);
        w.counter("x_total", "Things.")
            .sample(&[("k", &"a\"b")], 1u64);
        assert!(assert_clean("a clean exposition", &w.finish()));
        assert!(matches!(check("garbage{{\n"), Verdict::Problems(_)));
    }
}
