//! The `cxl` trace event group, read through a private tracefs instance.
//!
//! A tracefs instance (`instances/NAME`, created with mkdir) has its own ring buffer and its own
//! event switches: enabling the `cxl` events there records them without touching the global trace
//! buffer or its enable state, and removing the directory (rmdir) turns them off and frees the
//! buffer. This is what rasdaemon does too. It is still a system-wide change while it lasts (the
//! kernel records the events), which the caller must say on stderr.

use crate::trace::{parse_line, TraceLine};
use crate::RasError;
use cxltier_error::PathError;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Where tracefs is mounted, relative to the root: the dedicated mount first, then the one below
/// debugfs.
pub const TRACEFS_DIRS: [&str; 2] = ["sys/kernel/tracing", "sys/kernel/debug/tracing"];

/// A tracefs mount that has the `cxl` event group.
#[derive(Debug, Clone)]
pub struct Tracefs {
    dir: PathBuf,
}

impl Tracefs {
    /// Finds tracefs below `root` and checks it has the `cxl` events.
    pub fn locate(root: &Path) -> Result<Tracefs, RasError> {
        let tried: Vec<PathBuf> = TRACEFS_DIRS.iter().map(|d| root.join(d)).collect();
        // tracefs is mode 0700: to anyone but root it looks empty rather than absent.
        for d in &tried {
            if let Err(e) = fs::metadata(d.join("events")) {
                if e.kind() == io::ErrorKind::PermissionDenied {
                    return Err(PathError::Permission {
                        action: "reading CXL trace events from tracefs".to_string(),
                        path: d.clone(),
                    }
                    .into());
                }
            }
        }
        let dir = tried
            .iter()
            .find(|d| d.join("events").is_dir())
            .cloned()
            .ok_or_else(|| RasError::NoTracefs {
                tried: tried.clone(),
            })?;
        let cxl = dir.join("events/cxl");
        if !cxl.is_dir() {
            return Err(RasError::NoCxlEvents { path: cxl });
        }
        Ok(Tracefs { dir })
    }

    /// The mount point.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The events of the `cxl` group this kernel has, sorted.
    pub fn cxl_events(&self) -> Result<Vec<String>, RasError> {
        let dir = self.dir.join("events/cxl");
        let mut out: Vec<String> = fs::read_dir(&dir)
            .map_err(|e| PathError::io("listing the cxl trace events", &dir, e))?
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect();
        out.sort();
        Ok(out)
    }

    /// The name of this process's private instance (one per process: a second run beside it
    /// gets its own).
    pub fn private_instance_name() -> String {
        format!("cxltier-ras-{}", std::process::id())
    }

    /// The instance directory a [`Watch`] named NAME would use.
    pub fn instance_dir(&self, name: &str) -> PathBuf {
        self.dir.join("instances").join(name)
    }

    /// Creates instance NAME and enables EVENTS of the `cxl` group in it (all of them when empty).
    pub fn watch(&self, name: &str, events: &[String]) -> Result<Watch, RasError> {
        let dir = self.instance_dir(name);
        fs::create_dir(&dir).map_err(|e| {
            PathError::io("creating a tracefs instance for the CXL events", &dir, e)
        })?;
        // From here on, Drop removes the instance.
        let mut watch = Watch {
            dir,
            pipe: None,
            partial: Vec::new(),
        };
        let switches: Vec<PathBuf> = if events.is_empty() {
            vec![watch.dir.join("events/cxl/enable")]
        } else {
            events
                .iter()
                .map(|e| watch.dir.join("events/cxl").join(e).join("enable"))
                .collect()
        };
        for s in switches {
            crate::write_attr(&s, "1")
                .map_err(|e| PathError::io("enabling a CXL trace event", &s, e))?;
        }
        watch.open_pipe()?;
        Ok(watch)
    }
}

/// A private tracefs instance with CXL events enabled. Dropping it removes the instance.
#[derive(Debug)]
pub struct Watch {
    dir: PathBuf,
    pipe: Option<File>,
    partial: Vec<u8>,
}

impl Watch {
    /// Open the `trace_pipe` of an instance directory that exists and has its events enabled.
    fn open_pipe(&mut self) -> Result<(), RasError> {
        let pipe_path = self.dir.join("trace_pipe");
        let pipe = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&pipe_path)
            .map_err(|e| PathError::io("opening the trace pipe", &pipe_path, e))?;
        self.pipe = Some(pipe);
        Ok(())
    }

    /// A watch over the `trace_pipe` of an instance directory already set up (tests: a scratch
    /// directory whose `trace_pipe` holds recorded lines). The directory is removed on drop.
    #[cfg(test)]
    pub(crate) fn over(dir: PathBuf) -> Result<Watch, RasError> {
        let mut w = Watch {
            dir,
            pipe: None,
            partial: Vec::new(),
        };
        w.open_pipe()?;
        Ok(w)
    }

    /// The instance directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The complete trace lines available now, parsed; never blocks.
    pub fn poll(&mut self) -> Result<Vec<TraceLine>, RasError> {
        let mut out = Vec::new();
        let Some(pipe) = self.pipe.as_mut() else {
            return Ok(out);
        };
        let mut buf = [0u8; 16384];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => self.partial.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(PathError::io(
                        "reading the trace pipe",
                        self.dir.join("trace_pipe"),
                        e,
                    )
                    .into())
                }
            }
        }
        while let Some(nl) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=nl).collect();
            if let Some(t) = parse_line(&String::from_utf8_lossy(&line)) {
                out.push(t);
            }
        }
        Ok(out)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // Close the pipe first: an instance with an open reader cannot be removed.
        self.pipe = None;
        let _ = fs::remove_dir(&self.dir);
    }
}
