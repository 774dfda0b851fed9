//! The command line's error type and exit codes.
//!
//! Exit codes are part of the interface scripts rely on:
//! - 0: success
//! - 1: a runtime failure (I/O error, a child that could not be started, ...)
//! - 2: bad input (unknown node, malformed profile or mix, invalid weights, bad arguments)
//! - 3: missing privilege (writing sysfs or reading another user's process needs root)
//! - 4: the kernel or platform lacks a feature (no weighted interleave, no NUMA, ...)

use std::fmt;
use std::process::ExitCode;

/// What kind of failure happened; decides the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Runtime = 1,
    BadInput = 2,
    Permission = 3,
    Unsupported = 4,
}

/// An error for the user: what went wrong, and (where we know it) how to fix it.
#[derive(Debug)]
pub struct CliError {
    pub kind: Kind,
    pub message: String,
    pub hint: Option<String>,
}

impl CliError {
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        CliError {
            kind,
            message: message.into(),
            hint: None,
        }
    }
    pub fn bad_input(message: impl Into<String>) -> Self {
        Self::new(Kind::BadInput, message)
    }
    pub fn runtime(message: impl Into<String>) -> Self {
        Self::new(Kind::Runtime, message)
    }
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Print the error to stderr and return the exit code.
    pub fn report(&self) -> ExitCode {
        eprintln!("cxltier: error: {}", self.message);
        if let Some(hint) = &self.hint {
            eprintln!("  hint: {hint}");
        }
        ExitCode::from(self.kind as u8)
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
