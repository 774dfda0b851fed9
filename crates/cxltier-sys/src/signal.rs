//! Just enough signal handling to supervise a child: block signals and wait for them synchronously
//! (`pthread_sigmask(3)`, `sigtimedwait(2)`), send them (`kill(2)`), and end this process the way a
//! child ended (by the same signal).
//!
//! Blocking plus `sigtimedwait` needs no signal handler, so nothing runs in signal context.
//! A child inherits its parent's signal mask (and `std::process::Command` keeps it), so a child
//! started while signals are blocked must unblock them: [`unblock_in_child`].

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use crate::error::SysError;

pub use libc::{SIGCHLD, SIGHUP, SIGINT, SIGQUIT, SIGTERM};

/// `si_code` of a signal the kernel generated itself, such as SIGINT from the terminal's Ctrl-C.
const SI_KERNEL: libc::c_int = 0x80;

/// A signal taken by [`BlockedSignals::wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// The signal number.
    pub signal: i32,
    /// Whether the kernel generated it (`SI_KERNEL`): a terminal's Ctrl-C, Ctrl-\ or hang-up,
    /// which reach the whole foreground process group, so a child in it got the signal too.
    /// `false` for signals sent with `kill(2)` and friends.
    pub from_kernel: bool,
}

/// Signals blocked on the calling thread until dropped, then the previous mask is restored.
///
/// Blocked signals stay pending until [`BlockedSignals::wait`] takes them. Use it from a
/// single-threaded process (or block them in every thread): a process-directed signal goes to any
/// thread that does not block it.
pub struct BlockedSignals {
    set: libc::sigset_t,
    old: libc::sigset_t,
}

fn sigset(signals: &[i32]) -> Result<libc::sigset_t, SysError> {
    // SAFETY: sigset_t is a plain bit array for which all-zero is a valid value; sigemptyset then
    // initializes it properly.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, exclusively borrowed sigset_t.
    unsafe { libc::sigemptyset(&mut set) };
    for &sig in signals {
        // SAFETY: as above; sigaddset validates `sig` and returns -1 (EINVAL) for a bad number.
        if unsafe { libc::sigaddset(&mut set, sig) } != 0 {
            return Err(SysError::last("sigaddset"));
        }
    }
    Ok(set)
}

impl BlockedSignals {
    /// Block `signals` on the calling thread.
    pub fn block(signals: &[i32]) -> Result<BlockedSignals, SysError> {
        let set = sigset(signals)?;
        // SAFETY: all-zero is a valid sigset_t; pthread_sigmask overwrites it with the old mask.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` and `old` are valid sigset_t values owned by this frame; changing the
        // calling thread's mask has no memory-safety effect.
        let ret = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) };
        if ret != 0 {
            return Err(SysError::from_errno("pthread_sigmask", ret));
        }
        Ok(BlockedSignals { set, old })
    }

    /// Wait up to `timeout` for one of the blocked signals and take it off the pending set.
    /// `Ok(None)` when the time runs out (or a non-blocked signal interrupted the wait).
    pub fn wait(&self, timeout: Duration) -> Result<Option<Received>, SysError> {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: siginfo_t is plain data for which all-zero is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `self.set` is an initialized sigset_t, `info` a writable siginfo_t and `ts` a
        // valid timespec, all live for the call.
        let sig = unsafe { libc::sigtimedwait(&self.set, &mut info, &ts) };
        if sig >= 0 {
            return Ok(Some(Received {
                signal: sig,
                from_kernel: info.si_code == SI_KERNEL,
            }));
        }
        let err = SysError::last("sigtimedwait");
        if err.errno == libc::EAGAIN || err.errno == libc::EINTR {
            Ok(None)
        } else {
            Err(err)
        }
    }

    /// Take every pending blocked signal without acting on it; returns them.
    pub fn drain(&self) -> Vec<i32> {
        let mut taken = Vec::new();
        while let Ok(Some(received)) = self.wait(Duration::ZERO) {
            taken.push(received.signal);
        }
        taken
    }
}

impl Drop for BlockedSignals {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `block`, a valid sigset_t owned by `self`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

/// Make `cmd`'s child start with an empty signal mask, whatever the parent blocks.
pub fn unblock_in_child(cmd: &mut Command) -> Result<&mut Command, SysError> {
    let empty = sigset(&[])?;
    let hook = move || {
        // SAFETY: runs in the forked child before exec; sigprocmask is async-signal-safe, and
        // `empty` is an initialized sigset_t copied into the closure (no allocation, no locks).
        if unsafe { libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: the hook only calls sigprocmask (async-signal-safe) on a value it owns, as pre_exec
    // requires of code that runs between fork and exec.
    Ok(unsafe { cmd.pre_exec(hook) })
}

/// Send `sig` to process `pid`.
pub fn kill(pid: u32, sig: i32) -> Result<(), SysError> {
    let pid = libc::pid_t::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| SysError::from_errno("kill", libc::ESRCH))?;
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; `pid` is positive, so
    // it targets exactly one process, never a process group.
    if unsafe { libc::kill(pid, sig) } != 0 {
        return Err(SysError::last("kill"));
    }
    Ok(())
}

/// Let SIGPIPE end this process, as it ends `numactl`, `cat` and every C tool, when the reader of
/// its output goes away (`cxltier topo --json | head`): Rust's runtime ignores SIGPIPE, so such a
/// write fails with EPIPE and `println!` panics. Only for commands that print a report and hold
/// nothing that must be undone: a server or a daemon keeps the runtime's choice (its sockets'
/// writes already fail with EPIPE rather than raise the signal).
pub fn default_sigpipe() {
    // SAFETY: signal() installs the default disposition for SIGPIPE: no handler code of ours
    // runs, and no Rust-managed memory is touched.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// End this process by signal `sig`, as a child killed by it ended, so that a parent shell sees the
/// same status (and prints "Killed", "Segmentation fault" ...). No core file is written. Falls back to
/// `exit(128 + sig)` if the signal does not terminate.
pub fn terminate_by_signal(sig: i32) -> ! {
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: setrlimit reads a valid rlimit; signal() installs the default disposition (no handler
    // code of ours runs); the sigset is built by `sigset`; raise() sends the signal to this thread.
    // None of these touch Rust-managed memory.
    unsafe {
        libc::setrlimit(libc::RLIMIT_CORE, &no_core);
        libc::signal(sig, libc::SIG_DFL);
        if let Ok(set) = sigset(&[sig]) {
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        }
        libc::raise(sig);
    }
    std::process::exit(128 + (sig & 0x7f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocked_signal_is_waited_for_not_delivered() {
        // SIGUSR2 is otherwise unused by the test harness; block it in this thread only.
        std::thread::spawn(|| {
            let blocked = BlockedSignals::block(&[libc::SIGUSR2]).unwrap();
            assert_eq!(blocked.wait(Duration::from_millis(1)).unwrap(), None);
            // SAFETY: raise(3) sends to the calling thread, which blocks the signal; no memory is touched.
            let _ = unsafe { libc::raise(libc::SIGUSR2) };
            let got = blocked.wait(Duration::from_secs(1)).unwrap().unwrap();
            assert_eq!(got.signal, libc::SIGUSR2);
            assert!(!got.from_kernel);
            assert!(blocked.drain().is_empty());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn child_starts_unblocked() {
        std::thread::spawn(|| {
            let _blocked = BlockedSignals::block(&[libc::SIGTERM]).unwrap();
            let mut cmd = Command::new("grep");
            cmd.args(["-q", "^SigBlk:\t0*$", "/proc/self/status"]);
            unblock_in_child(&mut cmd).unwrap();
            assert!(cmd.status().unwrap().success(), "child's mask is empty");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn kill_checks_pid() {
        assert!(kill(0, 0).is_err());
        kill(std::process::id(), 0).unwrap();
    }
}
