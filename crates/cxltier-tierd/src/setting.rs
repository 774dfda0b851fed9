//! A system-wide setting (a sysfs or procfs file) that tierd changes for its run and writes back:
//! the value found is kept, and put back on [`HeldSetting::restore`] or when dropped.

use crate::readahead::ReadaheadTuner;
use crate::zswap::ZswapTier;
use crate::TierdError;
use std::path::{Path, PathBuf};

/// Memory mode's system-wide settings held for a run: the daemon steps them once per round (their
/// reports go in every target's memory section) and hands them back at the end to be restored and
/// reported; dropped, each restores itself.
#[derive(Debug, Default)]
pub struct HeldSettings {
    pub readahead: Option<ReadaheadTuner>,
    pub zswap: Option<ZswapTier>,
}

/// One file's value, held for the run.
#[derive(Debug)]
pub struct HeldSetting {
    path: PathBuf,
    previous: String,
    current: String,
    restored: bool,
}

impl HeldSetting {
    /// Read the file's current value (trimmed).
    pub fn read(path: &Path) -> Result<HeldSetting, TierdError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| TierdError::io("cannot read", path, e))?;
        let previous = text.trim().to_string();
        Ok(HeldSetting {
            path: path.to_path_buf(),
            current: previous.clone(),
            previous,
            restored: false,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The value found.
    pub fn previous(&self) -> &str {
        &self.previous
    }

    pub fn current(&self) -> &str {
        &self.current
    }

    /// Write `value` (a write the kernel refuses leaves the value as it was).
    pub fn set(&mut self, value: &str) -> Result<(), TierdError> {
        std::fs::write(&self.path, format!("{value}\n"))
            .map_err(|e| TierdError::io("cannot write", &self.path, e))?;
        self.current = value.to_string();
        self.restored = false;
        Ok(())
    }

    /// Write the value found back, if it changed (once).
    pub fn restore(&mut self) -> Result<(), TierdError> {
        if !self.restored {
            if self.current != self.previous {
                let previous = self.previous.clone();
                self.set(&previous)?;
            }
            self.restored = true;
        }
        Ok(())
    }
}

impl Drop for HeldSetting {
    fn drop(&mut self) {
        let _ = self.restore();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_is_written_and_put_back_once() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("enabled");
        std::fs::write(&f, "N\n").unwrap();
        let mut s = HeldSetting::read(&f).unwrap();
        assert_eq!(s.previous(), "N");
        s.set("Y").unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "Y\n");
        s.restore().unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "N\n");
        // Someone else's later change is not overwritten by a second restore or the drop.
        std::fs::write(&f, "X\n").unwrap();
        s.restore().unwrap();
        drop(s);
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "X\n");
        let mut t = HeldSetting::read(&f).unwrap();
        t.set("Z").unwrap();
        drop(t);
        assert_eq!(
            std::fs::read_to_string(&f).unwrap(),
            "X\n",
            "dropped: put back"
        );
        assert!(HeldSetting::read(&dir.path().join("missing")).is_err());
    }
}
