//! The open-file limit (`RLIMIT_NOFILE`): a server fits its most connections to it.

use crate::SysError;

/// The soft and hard limits on open file descriptors (`getrlimit(RLIMIT_NOFILE)`).
/// `RLIM_INFINITY` comes back as `u64::MAX`.
pub fn open_files_limit() -> Result<(u64, u64), SysError> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the valid, exclusively borrowed `lim`.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(SysError::last("getrlimit"));
    }
    Ok((lim.rlim_cur, lim.rlim_max))
}

/// Set the soft open-file limit to `soft`, keeping the hard limit (`setrlimit(RLIMIT_NOFILE)`).
/// Above the hard limit, the kernel refuses unless the process is privileged.
pub fn set_open_files_limit(soft: u64) -> Result<(), SysError> {
    let (_, hard) = open_files_limit()?;
    let lim = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard.max(soft),
    };
    // SAFETY: setrlimit reads one valid rlimit and touches no other memory.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(SysError::last("setrlimit"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_can_be_read_and_set_back() {
        let (soft, hard) = open_files_limit().unwrap();
        assert!(soft <= hard);
        set_open_files_limit(soft).unwrap();
        assert_eq!(open_files_limit().unwrap(), (soft, hard));
    }
}
