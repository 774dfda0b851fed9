//! CPU time used (`getrusage`): INFO's `cpu` section reports it as Redis does.

use crate::SysError;
use std::time::Duration;

/// User and system CPU time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// Time running this code in user mode.
    pub user: Duration,
    /// Time in the kernel on its behalf.
    pub system: Duration,
}

/// Whose CPU time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whose {
    /// This process, all its threads.
    Process,
    /// Its children that have ended and been waited for.
    Children,
    /// The calling thread only.
    Thread,
}

/// CPU time used so far (`getrusage(RUSAGE_SELF | RUSAGE_CHILDREN | RUSAGE_THREAD)`).
pub fn cpu_times(whose: Whose) -> Result<CpuTimes, SysError> {
    let who = match whose {
        Whose::Process => libc::RUSAGE_SELF,
        Whose::Children => libc::RUSAGE_CHILDREN,
        Whose::Thread => libc::RUSAGE_THREAD,
    };
    // SAFETY: rusage is plain integers, for which all-zero bytes are a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage into the valid, exclusively borrowed `ru`.
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return Err(SysError::last("getrusage"));
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    Ok(CpuTimes {
        user: tv(ru.ru_utime),
        system: tv(ru.ru_stime),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_work_shows_as_user_time_of_the_thread_and_the_process() {
        let before = cpu_times(Whose::Thread).unwrap();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        // Spin until the thread's own clock has moved (a tick can be 4 ms or more).
        while cpu_times(Whose::Thread).unwrap() == before {
            for i in 0..100_000u64 {
                x = x.wrapping_mul(31).wrapping_add(i);
            }
            std::hint::black_box(x);
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the thread's CPU time never moved"
            );
        }
        let thread = cpu_times(Whose::Thread).unwrap();
        let process = cpu_times(Whose::Process).unwrap();
        assert!(thread.user + thread.system > before.user + before.system);
        assert!(process.user + process.system >= thread.user + thread.system);
        cpu_times(Whose::Children).unwrap();
    }
}
