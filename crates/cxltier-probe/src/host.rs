//! Facts about the machine the probe needs: cache sizes, transparent huge pages, CPU model, which
//! CPUs this process may run on, and whether a mapping really got huge pages.

use serde::Serialize;
use std::fs;
use std::path::Path;

/// The machine, as the report describes it.
#[derive(Debug, Clone, Serialize)]
pub struct Host {
    pub hostname: String,
    pub cpu_model: String,
    /// Size of the largest (last-level) cache CPU 0 sees, in bytes; 0 when unknown.
    pub llc_bytes: u64,
    /// CPUs this process may run on (its affinity mask).
    pub allowed_cpus: Vec<u32>,
    /// The kernel's transparent-huge-page mode: `always`, `madvise`, `never`, or `unavailable`.
    pub thp_mode: String,
    pub kernel: String,
    /// The widest vector instructions the load/store kernels use.
    pub vector_isa: String,
    /// The instructions used for non-temporal stores.
    pub nt_store_isa: String,
}

impl Host {
    pub fn detect(root: &Path) -> Host {
        Host {
            hostname: read_trim(&root.join("proc/sys/kernel/hostname")).unwrap_or_default(),
            cpu_model: cpu_model(&root.join("proc/cpuinfo")),
            llc_bytes: llc_bytes(&root.join("sys/devices/system/cpu/cpu0/cache")),
            allowed_cpus: allowed_cpus(),
            thp_mode: thp_mode(&root.join("sys/kernel/mm/transparent_hugepage/enabled")),
            kernel: read_trim(&root.join("proc/sys/kernel/osrelease")).unwrap_or_default(),
            vector_isa: crate::kernels::vector_isa().to_string(),
            nt_store_isa: cxltier_sys::stream::nt_isa().as_str().to_string(),
        }
    }

    /// Whether the CPU is emulated instruction by instruction (QEMU's TCG), where timings say
    /// nothing about the hardware.
    pub fn is_emulated(&self) -> bool {
        self.cpu_model.contains("QEMU TCG")
    }

    /// Whether madvise(MADV_HUGEPAGE) can give huge pages.
    pub fn thp_possible(&self) -> bool {
        self.thp_mode == "always" || self.thp_mode == "madvise"
    }
}

fn read_trim(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn cpu_model(cpuinfo: &Path) -> String {
    let text = fs::read_to_string(cpuinfo).unwrap_or_default();
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            let k = k.trim();
            (k == "model name" || k == "Model" || k == "cpu model").then(|| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string())
}

/// Parse a cache size as sysfs writes it: `48K`, `2048K`, `516096K`, `32M`, or plain bytes.
pub fn parse_cache_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (num, mult) = match t.chars().last()? {
        'K' | 'k' => (&t[..t.len() - 1], 1u64 << 10),
        'M' | 'm' => (&t[..t.len() - 1], 1 << 20),
        'G' | 'g' => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mult)
}

/// The largest data or unified cache under `cache_dir` (`.../cpu0/cache`), in bytes; 0 if none.
pub fn llc_bytes(cache_dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(cache_dir) else {
        return 0;
    };
    let mut best = (0u32, 0u64);
    for e in entries.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().starts_with("index") {
            continue;
        }
        let p = e.path();
        let kind = read_trim(&p.join("type")).unwrap_or_default();
        if kind == "Instruction" {
            continue;
        }
        let level: u32 = read_trim(&p.join("level"))
            .and_then(|l| l.parse().ok())
            .unwrap_or(0);
        let size = read_trim(&p.join("size"))
            .and_then(|s| parse_cache_size(&s))
            .unwrap_or(0);
        if (level, size) > best {
            best = (level, size);
        }
    }
    best.1
}

/// The bracketed choice of a sysfs selector file (`always [madvise] never` → `madvise`).
pub fn bracketed(text: &str) -> Option<String> {
    let start = text.find('[')?;
    let end = text[start..].find(']')? + start;
    Some(text[start + 1..end].to_string())
}

fn thp_mode(path: &Path) -> String {
    read_trim(path)
        .and_then(|t| bracketed(&t))
        .unwrap_or_else(|| "unavailable".to_string())
}

/// CPUs this process may run on.
pub fn allowed_cpus() -> Vec<u32> {
    let mut ids: Vec<u32> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id as u32)
        .collect();
    ids.sort_unstable();
    ids
}

/// Pin the calling thread to `cpu`. Returns false when the kernel refused (the CPU is offline or
/// outside this process's cpuset).
pub fn pin_current_thread(cpu: u32) -> bool {
    core_affinity::set_for_current(core_affinity::CoreId { id: cpu as usize })
}

/// The share of the mapping (VMA) containing `addr` that transparent huge pages back
/// (`AnonHugePages / Size` in smaps text, `/proc/self/smaps`). Adjacent mappings with the same
/// flags and policy are merged into one VMA by the kernel, so this is the share of that VMA.
/// `None` when no mapping contains `addr`.
pub fn huge_share(smaps: &str, addr: usize) -> Option<f64> {
    let mut inside = false;
    let mut size_kb: Option<u64> = None;
    for line in smaps.lines() {
        if let Some((start, end)) = mapping_header(line) {
            if inside {
                // The mapping ended without an AnonHugePages line.
                return Some(0.0);
            }
            inside = start <= addr && addr < end;
            size_kb = None;
            continue;
        }
        if !inside {
            continue;
        }
        let kb = |rest: &str| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        };
        if let Some(rest) = line.strip_prefix("Size:") {
            size_kb = kb(rest);
        } else if let Some(rest) = line.strip_prefix("AnonHugePages:") {
            let huge = kb(rest)?;
            let size = size_kb.filter(|&s| s > 0)?;
            return Some((huge as f64 / size as f64).min(1.0));
        }
    }
    inside.then_some(0.0)
}

/// `start-end perms ...` → (start, end).
fn mapping_header(line: &str) -> Option<(usize, usize)> {
    let first = line.split_whitespace().next()?;
    let (a, b) = first.split_once('-')?;
    if a.is_empty() || !a.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    Some((
        usize::from_str_radix(a, 16).ok()?,
        usize::from_str_radix(b, 16).ok()?,
    ))
}

/// [`huge_share`] for this process.
pub fn own_huge_share(addr: usize) -> Option<f64> {
    let text = fs::read_to_string("/proc/self/smaps").ok()?;
    huge_share(&text, addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes() {
        assert_eq!(parse_cache_size("48K"), Some(48 << 10));
        assert_eq!(parse_cache_size("516096K\n"), Some(516096 << 10));
        assert_eq!(parse_cache_size("32M"), Some(32 << 20));
        assert_eq!(parse_cache_size("1024"), Some(1024));
        assert_eq!(parse_cache_size("x"), None);
    }

    #[test]
    fn thp_selector() {
        assert_eq!(
            bracketed("always [madvise] never").as_deref(),
            Some("madvise")
        );
        assert_eq!(bracketed("[never]").as_deref(), Some("never"));
        assert_eq!(bracketed("none"), None);
    }

    #[test]
    fn smaps_huge_pages_of_one_mapping() {
        let smaps = "\
7f0000000000-7f0080000000 rw-p 00000000 00:00 0
Size:            2097152 kB
AnonHugePages:   2088960 kB
Locked:                0 kB
7f0080000000-7f0080001000 rw-p 00000000 00:00 0
Size:                  4 kB
AnonHugePages:         0 kB
";
        let share = huge_share(smaps, 0x7f00_0000_0000).unwrap();
        assert!((share - 2088960.0 / 2097152.0).abs() < 1e-12);
        // An address inside the mapping (a buffer merged into a larger VMA) finds it too.
        assert_eq!(huge_share(smaps, 0x7f00_4000_0000), Some(share));
        assert_eq!(huge_share(smaps, 0x7f00_8000_0000), Some(0.0));
        assert_eq!(huge_share(smaps, 0x1234), None);
    }

    #[test]
    fn this_machine() {
        let h = Host::detect(Path::new("/"));
        assert!(!h.allowed_cpus.is_empty());
        assert!(!h.vector_isa.is_empty());
    }
}
