//! The QEMU lab suite's harness.
//!
//! A lab test boots one topology with `lab/run`, runs a check script from `lab/checks/` inside the
//! guest, and reads back what the script printed on the guest console:
//!
//! - `CHECK <name> PASS|FAIL @<uptime>s <detail>`: one result of a check made inside the guest;
//! - `BEGIN-DATA <name>` ... `END-DATA <name>`: a block of raw output (for example
//!   `cxltier topo --json`) kept for checks made on the host, which add their own results with
//!   [`Report::check`].
//!
//! [`Report::verdict`] then compares the results against the list of checks the test expects: it
//! fails listing every `FAIL`, every expected check that never reported (a check that did not run is
//! a failure), every check reported twice and every check that is not on the list.

pub mod host;
pub mod ras;
pub mod tierd;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// The check's name, unique within a topology.
    pub name: String,
    /// Whether it passed.
    pub pass: bool,
    /// What was seen, for people.
    pub detail: String,
}

/// What one guest run reported: check results and data blocks.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// The topology booted.
    pub topology: String,
    /// Results in the order they were reported.
    pub checks: Vec<Check>,
    /// Data blocks by name.
    pub data: BTreeMap<String, String>,
    /// Lines that were neither checks nor data (command noise), kept for diagnosis.
    pub other: Vec<String>,
    /// `lab/run`'s exit status (`None` if it was killed by a signal or could not start).
    pub status: Option<i32>,
    /// What `lab/run` printed on stderr.
    pub stderr: String,
    /// Wall time of the boot, build included.
    pub elapsed: Duration,
}

impl Report {
    /// Parses the guest's console output.
    pub fn parse(topology: &str, output: &str) -> Report {
        let mut report = Report {
            topology: topology.to_string(),
            ..Report::default()
        };
        let mut block: Option<(String, String)> = None;
        for line in output.lines() {
            if let Some((name, text)) = block.as_mut() {
                if line.strip_prefix("END-DATA ").map(str::trim) == Some(name.as_str()) {
                    let (name, text) = block.take().expect("inside a block");
                    report.data.insert(name, text);
                } else {
                    text.push_str(line);
                    text.push('\n');
                }
                continue;
            }
            if let Some(name) = line.strip_prefix("BEGIN-DATA ") {
                block = Some((name.trim().to_string(), String::new()));
            } else if let Some(rest) = line.strip_prefix("CHECK ") {
                let mut parts = rest.splitn(3, ' ');
                let name = parts.next().unwrap_or_default().to_string();
                let verdict = parts.next().unwrap_or_default();
                let detail = parts.next().unwrap_or_default().trim().to_string();
                match verdict {
                    "PASS" | "FAIL" => report.checks.push(Check {
                        name,
                        pass: verdict == "PASS",
                        detail,
                    }),
                    _ => report.other.push(line.to_string()),
                }
            } else if !line.trim().is_empty() {
                report.other.push(line.to_string());
            }
        }
        if let Some((name, text)) = block {
            // An unterminated block: keep what came, the checks that need it will say so.
            report.data.insert(name, text);
        }
        report
    }

    /// Adds the result of a check made on the host.
    pub fn check(&mut self, name: &str, pass: bool, detail: impl Into<String>) {
        self.checks.push(Check {
            name: name.to_string(),
            pass,
            detail: detail.into(),
        });
    }

    /// A data block, or an explanation of why it is missing.
    pub fn data(&self, name: &str) -> Result<&str, String> {
        self.data
            .get(name)
            .map(String::as_str)
            .ok_or_else(|| format!("the guest sent no data block '{name}'"))
    }

    /// A summary table of every result, for people.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "lab {}: {} checks, {} passed, {} failed, boot and run {:.1} s\n",
            self.topology,
            self.checks.len(),
            self.checks.iter().filter(|c| c.pass).count(),
            self.checks.iter().filter(|c| !c.pass).count(),
            self.elapsed.as_secs_f64()
        );
        let width = self.checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
        for c in &self.checks {
            let verdict = if c.pass { "PASS" } else { "FAIL" };
            let _ = writeln!(out, "  {verdict}  {:width$}  {}", c.name, c.detail);
        }
        out
    }

    /// `Ok` when every expected check reported exactly once and passed, and nothing else reported;
    /// otherwise every problem, one a line.
    pub fn verdict(&self, expected: &[&str]) -> Result<(), String> {
        let mut problems = Vec::new();
        if self.status != Some(0) {
            problems.push(format!(
                "lab/run exited with {} (the check script must exit 0)",
                self.status
                    .map_or_else(|| "no status (killed)".to_string(), |s| s.to_string())
            ));
        }
        for c in self.checks.iter().filter(|c| !c.pass) {
            problems.push(format!("FAIL {}: {}", c.name, c.detail));
        }
        for name in expected {
            match self.checks.iter().filter(|c| c.name == *name).count() {
                0 => problems.push(format!("MISSING {name}: the check never reported")),
                1 => {}
                n => problems.push(format!("DUPLICATE {name}: reported {n} times")),
            }
        }
        for c in &self.checks {
            if !expected.contains(&c.name.as_str()) {
                problems.push(format!(
                    "UNEXPECTED {}: not in the test's list of checks",
                    c.name
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            let mut out = format!("lab {}: {} problem(s)\n", self.topology, problems.len());
            for p in problems {
                let _ = writeln!(out, "  {p}");
            }
            if !self.other.is_empty() {
                out.push_str("  other guest output:\n");
                for line in self.other.iter().take(40) {
                    let _ = writeln!(out, "    {line}");
                }
            }
            if !self.stderr.trim().is_empty() {
                out.push_str("  lab/run stderr:\n");
                for line in self
                    .stderr
                    .lines()
                    .rev()
                    .take(20)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                {
                    let _ = writeln!(out, "    {line}");
                }
            }
            Err(out)
        }
    }
}

/// A JSON data block, parsed.
pub fn host_json(report: &Report, name: &str) -> Result<serde_json::Value, String> {
    let text = report.data(name)?;
    serde_json::from_str(text.trim()).map_err(|e| format!("data '{name}' is not JSON ({e})"))
}

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("lab/ has a parent")
        .to_path_buf()
}

/// Where the suite's failed tests leave their problems: `scripts/test` prints this file last, so a
/// CI log cut to its tail still says why the lab suite failed (with `--nocapture` each panic's
/// message is printed in the middle of the guests' output).
pub fn failures_file() -> PathBuf {
    repo_root().join("lab/cache/failures.txt")
}

/// Append a failed test's problems to [`failures_file`] (best effort: the test fails anyway).
pub fn record_failure(test: &str, problems: &str) {
    use std::io::Write as _;
    let path = failures_file();
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        let _ = writeln!(f, "---- {test}\n{problems}");
    }
}

/// How many times a boot is made again after QEMU aborted on its own assertion (see
/// [`emulator_aborted`]). At the rate seen here (one abort in three RAS injection runs, rarer at a
/// plain `cxl` boot) a single reboot would still fail about one run in nine; an abort on the last
/// boot fails the test.
pub const EMULATOR_ABORT_REBOOTS: usize = 2;

/// Whether `lab/run`'s stderr shows QEMU 10.0.2 (TCG) aborting in `iotlb_to_section`
/// (`Assertion 'section_index < d->map.sections_nb' failed`): the guest's memory map changed under
/// a vCPU's cached translation (CXL decoders committed while the `cxl` guest boots, a link reset
/// while it recovers from an injected fatal error). That is a fault of the emulator, not a result
/// of anything the guest ran, so nothing the guest reported in that run is judged. Only this exact
/// message counts: any other crash of QEMU fails the test as it is.
pub fn emulator_aborted(lab_run_stderr: &str) -> bool {
    lab_run_stderr.contains("iotlb_to_section")
}

/// Runs `boot` and, while its run shows [`emulator_aborted`] (`stderr_of` gives `lab/run`'s
/// stderr), runs it again, at most [`EMULATOR_ABORT_REBOOTS`] times, saying so on stdout each
/// time. Returns the last run.
pub fn boot_again_on_emulator_abort<T>(
    what: &str,
    mut boot: impl FnMut() -> T,
    stderr_of: impl Fn(&T) -> &str,
) -> T {
    let mut run = boot();
    for reboot in 1..=EMULATOR_ABORT_REBOOTS {
        if !emulator_aborted(stderr_of(&run)) {
            break;
        }
        println!(
            "QEMU aborted in iotlb_to_section (its own assertion, not a result of the guest's \
             checks); booting {what} again ({reboot} of at most {EMULATOR_ABORT_REBOOTS})"
        );
        run = boot();
    }
    run
}

/// Boots TOPOLOGY with `lab/run`, running `sh /lab/SCRIPT` from `lab/checks/` inside the guest, and
/// parses what it printed. `timeout` bounds the whole boot (LAB_TIMEOUT). A boot in which QEMU
/// aborted on its own assertion is made again ([`boot_again_on_emulator_abort`]).
pub fn boot(topology: &str, script: &str, timeout: Duration) -> Report {
    boot_with(
        topology,
        script,
        timeout,
        &repo_root().join("lab/checks"),
        &[],
    )
}

/// [`boot`] with `files` as the guest's /lab (a copy of `lab/checks/` with more in it) and more
/// environment for `lab/run` (`LAB_KERNEL`, ...).
pub fn boot_with(
    topology: &str,
    script: &str,
    timeout: Duration,
    files: &Path,
    env: &[(&str, &str)],
) -> Report {
    boot_again_on_emulator_abort(
        &format!("topology {topology}"),
        || boot_once(topology, script, timeout, files, env),
        |report| &report.stderr,
    )
}

/// One boot of [`boot_with`], whatever became of QEMU.
fn boot_once(
    topology: &str,
    script: &str,
    timeout: Duration,
    files: &Path,
    env: &[(&str, &str)],
) -> Report {
    let root = repo_root();
    let started = Instant::now();
    let output = Command::new(root.join("lab/run"))
        .arg(topology)
        .arg("--")
        .arg("sh")
        .arg(format!("/lab/{script}"))
        .env("LAB_FILES", files)
        .env("LAB_TIMEOUT", timeout.as_secs().to_string())
        .envs(env.iter().copied())
        .current_dir(&root)
        .output();
    let elapsed = started.elapsed();
    match output {
        Ok(out) => {
            let mut report = Report::parse(topology, &String::from_utf8_lossy(&out.stdout));
            report.status = out.status.code();
            report.stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            report.elapsed = elapsed;
            report
        }
        Err(err) => Report {
            topology: topology.to_string(),
            stderr: format!("could not start lab/run: {err}"),
            elapsed,
            ..Report::default()
        },
    }
}

/// The unit tests of workspace package `package`'s library, built statically as `lab/run` builds
/// `cxltier` (the same target directory, flags and profile, so that neither build undoes the
/// other's), for a guest to run tests that need a real kernel. Returns the test binary's path.
pub fn static_unit_tests(package: &str) -> Result<PathBuf, String> {
    let root = repo_root();
    let out = Command::new("cargo")
        .args([
            "test",
            "--release",
            "--target",
            "x86_64-unknown-linux-gnu",
            "-p",
            package,
        ])
        .args(["--lib", "--no-run", "--message-format=json"])
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .env("CARGO_TARGET_DIR", root.join("target/lab"))
        .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols")
        .current_dir(&root)
        .output()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "building {package}'s unit tests statically failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let lib = package.replace('-', "_");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == lib.as_str())
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| format!("cargo built no test binary for {package}'s library"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "noise\nCHECK a PASS fine\nCHECK b FAIL 3 != 4\nBEGIN-DATA j\n{\"x\": 1}\nCHECK c PASS inside\nEND-DATA j\nCHECK weird MAYBE\n";

    const ABORT: &str = "lab/run: QEMU failed (exit status 134): qemu-system-x86_64: \
        system/physmem.c:2678: iotlb_to_section: Assertion `section_index < d->map.sections_nb' failed.";

    #[test]
    fn boots_again_only_after_the_emulator_abort_and_at_most_twice() {
        // Aborts, then a clean run: two boots, the clean one returned.
        let mut runs = vec![ABORT, "lab/run: guest ok"].into_iter();
        let mut boots = 0;
        let last = boot_again_on_emulator_abort(
            "t",
            || {
                boots += 1;
                runs.next().unwrap()
            },
            |s| s,
        );
        assert_eq!((boots, last), (2, "lab/run: guest ok"));
        // Always aborting: the first boot and EMULATOR_ABORT_REBOOTS more, then the abort stands.
        let mut boots = 0;
        let last = boot_again_on_emulator_abort(
            "t",
            || {
                boots += 1;
                ABORT
            },
            |s| s,
        );
        assert_eq!((boots, last), (1 + EMULATOR_ABORT_REBOOTS, ABORT));
        // Any other failure of QEMU is not booted again.
        let mut boots = 0;
        let other = "lab/run: QEMU failed (exit status 139): Segmentation fault";
        let last = boot_again_on_emulator_abort(
            "t",
            || {
                boots += 1;
                other
            },
            |s| s,
        );
        assert_eq!((boots, last), (1, other));
    }

    #[test]
    fn parses_checks_and_data() {
        let r = Report::parse("hmat", OUT);
        assert_eq!(r.checks.len(), 2);
        assert_eq!(
            r.checks[1],
            Check {
                name: "b".into(),
                pass: false,
                detail: "3 != 4".into()
            }
        );
        assert_eq!(r.data("j").unwrap(), "{\"x\": 1}\nCHECK c PASS inside\n");
        assert_eq!(r.other, vec!["noise", "CHECK weird MAYBE"]);
        assert!(r.data("k").is_err());
    }

    #[test]
    fn verdict_lists_failures_missing_duplicates_and_unexpected() {
        let mut r = Report::parse("hmat", OUT);
        r.status = Some(0);
        r.check("a", true, "again");
        r.check("z", true, "");
        let err = r.verdict(&["a", "b", "m", "z"]).unwrap_err();
        assert!(err.contains("FAIL b: 3 != 4"), "{err}");
        assert!(err.contains("MISSING m"), "{err}");
        assert!(err.contains("DUPLICATE a"), "{err}");
        assert!(!err.contains("UNEXPECTED z"), "{err}");
        let mut ok = Report::parse("cxl", "CHECK a PASS\n");
        assert!(ok.verdict(&["a"]).is_err(), "no exit status is a failure");
        ok.status = Some(0);
        assert!(ok.verdict(&["a"]).is_ok());
        assert!(ok.verdict(&[]).unwrap_err().contains("UNEXPECTED a"));
    }

    #[test]
    fn unterminated_block_is_kept() {
        let r = Report::parse("cxl", "BEGIN-DATA t\npartial\n");
        assert_eq!(r.data("t").unwrap(), "partial\n");
    }
}
