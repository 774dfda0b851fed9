//! The crate's error type: a failed system call, with the errno translated into words and, where
//! the cause is known, what to do about it.

/// What kind of failure a [`SysError`] is; callers decide exit codes and hints from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The kernel lacks the feature (`ENOSYS`, or `EINVAL` for a policy mode it does not know).
    Unsupported,
    /// An argument the kernel rejected (`EINVAL`, or a node beyond [`crate::NodeMask::MAX_NODES`]).
    InvalidArgument,
    /// Missing privilege (`EPERM`, `EACCES`).
    PermissionDenied,
    /// The kernel could not allocate memory (`ENOMEM`).
    OutOfMemory,
    /// An address is not mapped (`EFAULT`).
    BadAddress,
    /// The process does not exist (`ESRCH`).
    NoSuchProcess,
    /// Anything else.
    Other,
}

/// A system call that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed: {detail}")]
pub struct SysError {
    /// The call, e.g. `"set_mempolicy"`.
    pub call: &'static str,
    /// The errno it returned (0 when the error was detected before calling the kernel).
    pub errno: i32,
    /// The class of failure.
    pub kind: ErrorKind,
    /// What went wrong in words, specific to the call where we know more than the errno says.
    pub detail: String,
}

impl SysError {
    /// An error for `call` from `errno`, with a generic description of the errno.
    pub fn from_errno(call: &'static str, errno: i32) -> Self {
        let (kind, detail) = describe(call, errno);
        SysError {
            call,
            errno,
            kind,
            detail,
        }
    }

    /// The error for `call` from the thread's current `errno`.
    pub(crate) fn last(call: &'static str) -> Self {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        Self::from_errno(call, errno)
    }

    /// An error with a specific description.
    pub fn new(call: &'static str, errno: i32, kind: ErrorKind, detail: impl Into<String>) -> Self {
        SysError {
            call,
            errno,
            kind,
            detail: detail.into(),
        }
    }

    /// Replace the description, keeping call, errno and kind.
    pub(crate) fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }

    /// Whether the kernel lacks the feature.
    pub fn is_unsupported(&self) -> bool {
        self.kind == ErrorKind::Unsupported
    }
}

fn describe(call: &'static str, errno: i32) -> (ErrorKind, String) {
    match errno {
        libc::ENOSYS => (
            ErrorKind::Unsupported,
            "the kernel has no NUMA memory-policy support (built without CONFIG_NUMA), \
             or a seccomp filter (container runtime) blocks the call"
                .into(),
        ),
        libc::EINVAL => (
            ErrorKind::InvalidArgument,
            "invalid argument (EINVAL)".into(),
        ),
        libc::EPERM | libc::EACCES => (
            ErrorKind::PermissionDenied,
            format!(
                "operation not permitted ({}); {call} on this target needs more privilege \
                 (root or CAP_SYS_NICE; try sudo)",
                errno_name(errno)
            ),
        ),
        libc::ENOMEM => (
            ErrorKind::OutOfMemory,
            "out of memory (ENOMEM): the kernel could not allocate memory, or the range is \
             larger than the process may map"
                .into(),
        ),
        libc::EFAULT => (
            ErrorKind::BadAddress,
            "bad address (EFAULT): part of the range is not mapped".into(),
        ),
        libc::ESRCH => (
            ErrorKind::NoSuchProcess,
            "no such process (ESRCH): it may have exited".into(),
        ),
        _ => (
            ErrorKind::Other,
            format!(
                "{} ({})",
                std::io::Error::from_raw_os_error(errno),
                errno_name(errno)
            ),
        ),
    }
}

/// The symbolic name of an errno value (`ENOENT`), or `errno N` for ones not listed.
pub fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::E2BIG => "E2BIG",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ENOSYS => "ENOSYS",
        libc::EHWPOISON => "EHWPOISON",
        libc::ENOTSUP => "EOPNOTSUPP",
        _ => return format!("errno {errno}"),
    };
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_is_classified_and_named() {
        let e = SysError::from_errno("move_pages", libc::EPERM);
        assert_eq!(e.kind, ErrorKind::PermissionDenied);
        assert!(e.to_string().contains("try sudo"), "{e}");
        assert_eq!(
            SysError::from_errno("mbind", libc::ENOSYS).kind,
            ErrorKind::Unsupported
        );
        assert_eq!(
            SysError::from_errno("mmap", libc::ENOMEM).kind,
            ErrorKind::OutOfMemory
        );
        assert_eq!(errno_name(libc::ENOENT), "ENOENT");
        assert_eq!(errno_name(4242), "errno 4242");
    }
}
