//! One classification for every library error in the workspace.
//!
//! Each library returns its own error type, and each implements [`Classify`]: the [`Class`] of
//! the failure (which decides the command line's exit code) and, where the library knows it, a
//! hint saying how to fix it. The CLI converts any classified error the same way
//! (`CliError::from_error`), so no command carries its own table of which error means which exit
//! code.
//!
//! This crate has no dependencies, so the lowest crates (the profile format, the model) can
//! implement the trait without pulling in sysfs or syscall code.

// A library reports through its return values; only the CLI prints.
#![deny(clippy::print_stdout, clippy::print_stderr)]

use std::fmt;
use std::io;
use std::path::PathBuf;

/// What kind of failure happened. The discriminant is the CLI's exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// Anything else: an I/O error, a program that could not be started (exit 1).
    Runtime = 1,
    /// The request is wrong: an unknown node, a malformed profile, mix, size or policy (exit 2).
    BadInput = 2,
    /// Privilege is missing: writing sysfs, reading another user's process (exit 3).
    Permission = 3,
    /// The kernel or platform lacks a feature: no weighted interleave, no DAMON, no NUMA (exit 4).
    Unsupported = 4,
}

impl Class {
    /// The command line's exit code for this class: 1 runtime, 2 bad input, 3 missing privilege,
    /// 4 unsupported.
    pub fn exit_code(self) -> u8 {
        self as u8
    }
}

/// An error that knows its [`Class`] and, where it can, how to fix it.
pub trait Classify: std::error::Error {
    /// The class of this failure.
    fn class(&self) -> Class;

    /// How to fix it, when the library knows more than its message says.
    fn hint(&self) -> Option<String> {
        None
    }
}

/// An I/O call on a named file failed, sorted by whether privilege was missing: the two are
/// classified apart (exit 3 against 1), so every library that reads or writes system files
/// reports them with this one type rather than a pair of variants of its own.
#[derive(Debug)]
pub enum PathError {
    /// Reading or writing needs privileges the caller lacks.
    Permission {
        /// What was being done ("reading the quarantine file").
        action: String,
        /// The file.
        path: PathBuf,
    },
    /// Any other I/O failure.
    Io {
        /// What was being done.
        action: String,
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

impl PathError {
    /// An I/O error on PATH while doing ACTION; permission errors become
    /// [`PathError::Permission`].
    pub fn io(action: impl Into<String>, path: impl Into<PathBuf>, source: io::Error) -> PathError {
        let action = action.into();
        let path = path.into();
        if source.kind() == io::ErrorKind::PermissionDenied {
            PathError::Permission { action, path }
        } else {
            PathError::Io {
                action,
                path,
                source,
            }
        }
    }
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathError::Permission { action, path } => {
                write!(
                    f,
                    "{action} needs root: permission denied on {}",
                    path.display()
                )
            }
            PathError::Io {
                action,
                path,
                source,
            } => write!(f, "{action} ({}): {source}", path.display()),
        }
    }
}

impl std::error::Error for PathError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PathError::Permission { .. } => None,
            PathError::Io { source, .. } => Some(source),
        }
    }
}

impl Classify for PathError {
    fn class(&self) -> Class {
        match self {
            PathError::Permission { .. } => Class::Permission,
            PathError::Io { .. } => Class::Runtime,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_the_documented_ones() {
        assert_eq!(Class::Runtime.exit_code(), 1);
        assert_eq!(Class::BadInput.exit_code(), 2);
        assert_eq!(Class::Permission.exit_code(), 3);
        assert_eq!(Class::Unsupported.exit_code(), 4);
    }

    #[test]
    fn a_path_error_is_sorted_by_missing_privilege() {
        let denied = PathError::io(
            "reading x",
            "/x",
            io::Error::from(io::ErrorKind::PermissionDenied),
        );
        assert_eq!(denied.class(), Class::Permission);
        assert_eq!(
            denied.to_string(),
            "reading x needs root: permission denied on /x"
        );
        let missing = PathError::io("reading x", "/x", io::Error::from(io::ErrorKind::NotFound));
        assert_eq!(missing.class(), Class::Runtime);
        assert!(missing.to_string().starts_with("reading x (/x): "));
        assert!(std::error::Error::source(&missing).is_some());
    }
}
