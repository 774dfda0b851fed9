//! The command line's error type and exit codes.
//!
//! Exit codes are part of the interface scripts rely on:
//! - 0: success
//! - 1: a runtime failure (I/O error, a child that could not be started, ...)
//! - 2: bad input (unknown node, malformed profile or mix, invalid weights, bad arguments)
//! - 3: missing privilege (writing sysfs or reading another user's process needs root)
//! - 4: the kernel or platform lacks a feature (no weighted interleave, no NUMA, ...)
//!
//! Every library error implements [`Classify`] (its [`Class`] and a hint), and
//! [`CliError::classified`] is the one conversion from any of them.

use std::fmt;
use std::process::ExitCode;

pub use cxltier_error::{Class, Classify};

/// An error for the user: what went wrong, and (where we know it) how to fix it.
#[derive(Debug)]
pub struct CliError {
    pub kind: Class,
    pub message: String,
    pub hint: Option<String>,
}

impl CliError {
    pub fn new(kind: Class, message: impl Into<String>) -> Self {
        CliError {
            kind,
            message: message.into(),
            hint: None,
        }
    }
    pub fn bad_input(message: impl Into<String>) -> Self {
        Self::new(Class::BadInput, message)
    }
    pub fn runtime(message: impl Into<String>) -> Self {
        Self::new(Class::Runtime, message)
    }
    /// A library's error as the library classifies it: its message, class and hint.
    pub fn classified(err: impl Classify) -> Self {
        CliError {
            kind: err.class(),
            message: err.to_string(),
            hint: err.hint(),
        }
    }
    /// The same message and hint in another class: for what only the command knows, e.g. that
    /// a missing tree was named by the user.
    pub fn with_class(mut self, kind: Class) -> Self {
        self.kind = kind;
        self
    }
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Print the error to stderr and return the exit code.
    pub fn report(&self) -> ExitCode {
        let mut text = format!("cxltier: error: {}\n", self.message);
        if let Some(hint) = &self.hint {
            text.push_str(&format!("  hint: {hint}\n"));
        }
        write_stderr(&text);
        ExitCode::from(self.kind.exit_code())
    }
}

/// Write `text` to stderr in one `write_all` call. `eprintln!` writes each formatted piece
/// separately (stderr is unbuffered), so the messages of processes sharing one pipe — the
/// ranks under `mpirun` — interleaved mid-line; one write of a short text reaches the pipe whole.
pub fn write_stderr(text: &str) {
    use std::io::Write;
    // Nothing useful can be done if stderr itself is gone.
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

impl CliError {
    /// Print the error to stderr as one JSON object (`docs/json.md`: `error`, `hint`,
    /// `exit_code` in the envelope), for a command given `--json`, and return the exit code.
    pub fn report_json(&self, command: &str) -> ExitCode {
        write_stderr(&format!("{}\n", crate::output::error_json(command, self)));
        ExitCode::from(self.kind.exit_code())
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, " (hint: {hint})")?;
        }
        Ok(())
    }
}

impl From<std::io::Error> for CliError {
    fn from(err: std::io::Error) -> Self {
        CliError::runtime(err.to_string())
    }
}

impl From<serde_json::Error> for CliError {
    fn from(err: serde_json::Error) -> Self {
        CliError::runtime(format!("could not encode JSON: {err}"))
    }
}

pub type CliResult = Result<ExitCode, CliError>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Each library's error reaches the same exit codes through the one conversion, with the
    /// library's message and hint.
    #[test]
    fn library_errors_keep_their_exit_codes_and_hints() {
        let cases: Vec<(CliError, u8)> = vec![
            (
                CliError::classified(cxltier_store::StoreError::Config("--dram 1".into())),
                2,
            ),
            (
                CliError::classified(cxltier_store::StoreError::Io {
                    context: "opening the log".into(),
                    source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
                }),
                3,
            ),
            (
                CliError::classified(cxltier_model::PlanError::SingleTier("dram".into())),
                4,
            ),
            (
                CliError::classified(cxltier_ycsb::YcsbError::Connect {
                    addr: "127.0.0.1:1".into(),
                    source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
                }),
                1,
            ),
            (
                CliError::classified(cxltier_control::ControlError::UnknownNode {
                    node: 9,
                    known: vec![0],
                }),
                2,
            ),
            (
                CliError::classified(cxltier_tierd::TierdError::FramesHidden {
                    pagemap: "/proc/1/pagemap".into(),
                }),
                3,
            ),
            (
                CliError::classified(cxltier_qsim::QsimError::Config("too many qubits".into())),
                2,
            ),
        ];
        for (e, code) in &cases {
            assert_eq!(e.kind.exit_code(), *code, "{e}");
        }
        assert_eq!(
            cases[2].0.hint.as_deref(),
            Some("plan needs two or more tiers; pass --profile with a multi-tier profile")
        );
        assert!(cases[3]
            .0
            .hint
            .as_deref()
            .unwrap()
            .contains("cxltier serve --bind 127.0.0.1:1"));
        assert_eq!(
            cases[4].0.hint.as_deref(),
            Some("see the machine's nodes with `cxltier topo`")
        );
        assert_eq!(cases[0].0.message, "--dram 1");
    }
}
