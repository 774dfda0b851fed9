//! A one-shot timer an event loop can wait on beside its sockets (`timerfd_create(2)` on
//! `CLOCK_MONOTONIC`).
//!
//! `epoll_wait(2)` takes its timeout in whole milliseconds and the kernel adds the thread's timer
//! slack (50 µs by default) to sleeps, so a loop that must act at a given microsecond (an
//! open-loop load generator sending each request at its intended time) cannot use either. A
//! timerfd expires on a high-resolution timer with no slack and becomes readable, so registering
//! it in the same `epoll` set wakes the loop for whichever comes first: data or the due time.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::error::SysError;

/// A non-blocking one-shot timerfd.
#[derive(Debug)]
pub struct Timer {
    fd: File,
    /// Whether an expiry is armed and not yet read back.
    armed: bool,
}

impl Timer {
    /// A new, disarmed timer.
    pub fn new() -> Result<Timer, SysError> {
        // SAFETY: timerfd_create takes two integers and touches no memory of ours; it returns a
        // new descriptor or -1.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(SysError::last("timerfd_create"));
        }
        // SAFETY: fd was just returned by timerfd_create and is owned by nobody else.
        let fd = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        Ok(Timer { fd, armed: false })
    }

    /// Make the timer readable once `after` has passed (at least 1 ns: a zero value would
    /// disarm it). Replaces any expiry armed before.
    pub fn arm(&mut self, after: Duration) -> Result<(), SysError> {
        let after = after.max(Duration::from_nanos(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: after.as_secs() as libc::time_t,
                tv_nsec: after.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: `spec` is a valid itimerspec that lives across the call; the old value is not
        // asked for (null), and the descriptor is ours.
        let rc =
            unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(SysError::last("timerfd_settime"));
        }
        self.armed = true;
        Ok(())
    }

    /// Whether an expiry is armed and has not been taken with [`Timer::take_expiry`].
    pub fn is_armed(&self) -> bool {
        self.armed
    }

    /// Read the expiry count back (which also makes the descriptor unreadable again); returns
    /// whether the timer had expired. Call it when the event loop reports the descriptor readable.
    pub fn take_expiry(&mut self) -> bool {
        let mut count = [0u8; 8];
        // WouldBlock: not expired yet (the event was stale). A read interrupted by a signal is
        // tried again: the event loop registers the descriptor edge-triggered, so an expiry left
        // unread would never be reported again and a one-shot timer would be lost.
        let expired = loop {
            match (&self.fd).read(&mut count) {
                Ok(n) => break n == 8,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break false,
            }
        };
        if expired {
            self.armed = false;
        }
        expired
    }

    /// The descriptor to register with `epoll` (readable when the timer expires).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn the_timer_expires_after_the_armed_delay_and_not_before() {
        let mut t = Timer::new().unwrap();
        assert!(!t.take_expiry(), "a new timer has not expired");
        let start = Instant::now();
        t.arm(Duration::from_millis(3)).unwrap();
        assert!(t.is_armed());
        assert!(!t.take_expiry(), "not expired right after arming");
        while !t.take_expiry() {
            std::hint::spin_loop();
            assert!(start.elapsed() < Duration::from_secs(5), "never expired");
        }
        assert!(start.elapsed() >= Duration::from_millis(3));
        assert!(!t.is_armed());
        // Re-arming replaces the earlier expiry.
        t.arm(Duration::from_secs(3600)).unwrap();
        t.arm(Duration::from_micros(200)).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert!(t.take_expiry());
    }
}
