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

/// Gives an error enum with the variants `Permission { action: String, path: PathBuf }` and
/// `Io { action: String, path: PathBuf, source: std::io::Error }` the constructor
/// `io(action, path, source)`, which sorts a failed I/O call by whether privilege was missing:
/// the two are classified apart (exit 3 against 1), and every library that reads or writes
/// system files reports them with the same pair of variants.
#[macro_export]
macro_rules! impl_path_io {
    ($error:ident) => {
        impl $error {
            /// An I/O error on PATH while doing ACTION; permission errors become
            #[doc = concat!("[`", stringify!($error), "::Permission`].")]
            pub fn io(
                action: impl Into<String>,
                path: impl Into<std::path::PathBuf>,
                source: std::io::Error,
            ) -> $error {
                let action = action.into();
                let path = path.into();
                if source.kind() == std::io::ErrorKind::PermissionDenied {
                    $error::Permission { action, path }
                } else {
                    $error::Io {
                        action,
                        path,
                        source,
                    }
                }
            }
        }
    };
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
}
