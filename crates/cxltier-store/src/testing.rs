//! Test helpers (feature `test-util`): log files in temporary directories that go away with the
//! test (a log is hundreds of megabytes; a test run must not leave them behind).

use std::path::{Path, PathBuf};

/// A file path in a fresh temporary directory, removed with everything in it when dropped.
pub struct TempFile {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl AsRef<Path> for TempFile {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl std::ops::Deref for TempFile {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

/// `name` in a new directory under the system temp dir whose name starts with `prefix`.
pub fn temp_file(prefix: &str, name: &str) -> TempFile {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("a temporary directory");
    TempFile {
        path: dir.path().join(name),
        _dir: dir,
    }
}
