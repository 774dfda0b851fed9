//! Transparent huge pages for the calling process (`prctl(PR_GET_THP_DISABLE)` and
//! `prctl(PR_SET_THP_DISABLE)`): the setting is kept across `fork` and `execve`.

use crate::SysError;

/// Whether transparent huge pages are disabled for this process.
pub fn disabled() -> Result<bool, SysError> {
    // SAFETY: PR_GET_THP_DISABLE takes no pointer argument and touches no memory of ours.
    let r = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
    if r < 0 {
        return Err(SysError::last("prctl(PR_GET_THP_DISABLE)"));
    }
    Ok(r != 0)
}

/// Disable transparent huge pages for this process and the programs it starts or executes
/// (huge pages it already has stay).
pub fn disable() -> Result<(), SysError> {
    // SAFETY: PR_SET_THP_DISABLE takes integer arguments only and touches no memory of ours.
    if unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } != 0 {
        return Err(SysError::last("prctl(PR_SET_THP_DISABLE)"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disabling_is_seen_by_the_process_and_its_children() {
        // In a child, so that this test process keeps its own setting.
        let exe = std::env::current_exe().unwrap();
        if std::env::var_os("CXLTIER_THP_CHILD").is_some() {
            disable().unwrap();
            assert!(disabled().unwrap());
            let out = std::process::Command::new("grep")
                .args(["THP_enabled", "/proc/self/status"])
                .output()
                .unwrap();
            // The child inherits it (kernels since 5.0 show it in status as THP_enabled).
            let status = String::from_utf8_lossy(&out.stdout);
            assert!(
                status.is_empty() || status.trim_end() == "THP_enabled:\t0",
                "{status}"
            );
            return;
        }
        let st = std::process::Command::new(exe)
            .args([
                "--exact",
                "thp::tests::disabling_is_seen_by_the_process_and_its_children",
            ])
            .env("CXLTIER_THP_CHILD", "1")
            .status()
            .unwrap();
        assert!(st.success());
    }
}
