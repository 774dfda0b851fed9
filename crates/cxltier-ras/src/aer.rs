//! Unmasking CXL internal errors in a device's AER capability.
//!
//! A CXL device reports its CXL.io/CXL.mem protocol errors (the RAS capability) to the host as
//! PCIe *internal* errors: Corrected Internal Error (correctable status bit 14) and Uncorrectable
//! Internal Error (uncorrectable status bit 22). The PCIe specification has both masked by
//! default, and Linux 6.12 unmasks them only for restricted CXL hosts (CXL 1.1); on a CXL 2.0
//! root port the masks stay set, the device never sends the error message, and the kernel's CXL
//! AER handlers (which emit `cxl_aer_correctable_error` / `cxl_aer_uncorrectable_error`) never run.
//! Clearing the two mask bits in the device's AER capability (config space, through sysfs)
//! lets the errors through. It is a change to the device's configuration that lasts until it is
//! written back or the device is reset; [`MaskChange::restore`] writes the old masks back.

use crate::RasError;
use cxltier_error::PathError;
use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Uncorrectable Internal Error, in the Uncorrectable Error Mask register.
pub const UNCOR_INTERNAL: u32 = 1 << 22;
/// Corrected Internal Error, in the Correctable Error Mask register.
pub const COR_INTERNAL: u32 = 1 << 14;
const AER_CAP_ID: u32 = 0x0001;
const UNCOR_MASK: u64 = 0x08;
const COR_MASK: u64 = 0x14;

/// Where the AER extended capability starts in a config space image, if it has one.
pub fn find_aer(config: &[u8]) -> Option<u64> {
    let mut off = 0x100usize;
    let mut hops = 0;
    while off != 0 && off + 4 <= config.len() && hops < 64 {
        let h = u32::from_le_bytes(config[off..off + 4].try_into().ok()?);
        if h & 0xffff == AER_CAP_ID {
            return Some(off as u64);
        }
        off = (h >> 20) as usize & 0xffc;
        hops += 1;
    }
    None
}

/// The masks of one device before and after unmasking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaskChange {
    pub config: PathBuf,
    pub aer_offset: u64,
    pub old_uncor_mask: u32,
    pub old_cor_mask: u32,
    pub new_uncor_mask: u32,
    pub new_cor_mask: u32,
}

/// `uncorrectable 0x... -> 0x..., correctable 0x... -> 0x...`
impl std::fmt::Display for MaskChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "uncorrectable {:#010x} -> {:#010x}, correctable {:#010x} -> {:#010x}",
            self.old_uncor_mask, self.new_uncor_mask, self.old_cor_mask, self.new_cor_mask
        )
    }
}

impl MaskChange {
    /// Whether anything changes.
    pub fn changes(&self) -> bool {
        self.old_uncor_mask != self.new_uncor_mask || self.old_cor_mask != self.new_cor_mask
    }

    /// Writes the old masks back.
    pub fn restore(&self) -> Result<(), RasError> {
        write_masks(
            &self.config,
            self.aer_offset,
            self.old_uncor_mask,
            self.old_cor_mask,
        )
    }
}

/// Reads the AER masks of the PCI function in `pci_dir` and computes the change that unmasks the
/// internal errors; with `apply`, writes it.
pub fn unmask_internal(pci_dir: &Path, apply: bool) -> Result<MaskChange, RasError> {
    let config = pci_dir.join("config");
    let bytes = fs::read(&config)
        .map_err(|e| PathError::io("reading the device's PCI config space", &config, e))?;
    if bytes.len() <= 0x100 {
        // Unprivileged readers see only the first 64 bytes; without extended config space there
        // is no AER capability to find.
        return Err(PathError::Permission {
            action: "reading the device's extended PCI config space (AER capability)".to_string(),
            path: config,
        }
        .into());
    }
    let aer_offset = find_aer(&bytes).ok_or_else(|| {
        PathError::io(
            "finding the AER capability (the device has none: its errors cannot be reported through AER)",
            &config,
            std::io::Error::from(std::io::ErrorKind::NotFound),
        )
    })?;
    let word = |o: u64| {
        let o = o as usize;
        u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"))
    };
    let old_uncor_mask = word(aer_offset + UNCOR_MASK);
    let old_cor_mask = word(aer_offset + COR_MASK);
    let change = MaskChange {
        config: config.clone(),
        aer_offset,
        old_uncor_mask,
        old_cor_mask,
        new_uncor_mask: old_uncor_mask & !UNCOR_INTERNAL,
        new_cor_mask: old_cor_mask & !COR_INTERNAL,
    };
    if apply && change.changes() {
        write_masks(
            &config,
            aer_offset,
            change.new_uncor_mask,
            change.new_cor_mask,
        )?;
    }
    Ok(change)
}

fn write_masks(config: &Path, aer: u64, uncor: u32, cor: u32) -> Result<(), RasError> {
    let f = OpenOptions::new()
        .write(true)
        .open(config)
        .map_err(|e| PathError::io("writing the device's AER masks", config, e))?;
    f.write_all_at(&uncor.to_le_bytes(), aer + UNCOR_MASK)
        .and_then(|()| f.write_all_at(&cor.to_le_bytes(), aer + COR_MASK))
        .map_err(|e| PathError::io("writing the device's AER masks", config, e).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_aer_in_the_chain() {
        let mut c = vec![0u8; 4096];
        // 0x100: DVSEC (0x23) -> 0x200: AER.
        c[0x100..0x104].copy_from_slice(&(0x23u32 | (1 << 16) | (0x200 << 20)).to_le_bytes());
        c[0x200..0x204].copy_from_slice(&(0x1u32 | (2 << 16)).to_le_bytes());
        assert_eq!(find_aer(&c), Some(0x200));
        c[0x200] = 0x0b;
        assert_eq!(find_aer(&c), None);
        assert_eq!(find_aer(&c[..64]), None);
    }

    #[test]
    fn unmasks_only_the_internal_bits_and_restores() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut c = vec![0u8; 4096];
        c[0x100..0x104].copy_from_slice(&(0x1u32 | (2 << 16)).to_le_bytes());
        // The lab device's defaults: uncorrectable mask 0x02400000, correctable 0x0000e000.
        c[0x108..0x10c].copy_from_slice(&0x0240_0000u32.to_le_bytes());
        c[0x114..0x118].copy_from_slice(&0x0000_e000u32.to_le_bytes());
        fs::write(dir.join("config"), &c).unwrap();
        let dry = unmask_internal(dir, false).unwrap();
        assert_eq!(dry.new_uncor_mask, 0x0200_0000);
        assert_eq!(dry.new_cor_mask, 0x0000_a000);
        assert_eq!(
            fs::read(dir.join("config")).unwrap(),
            c,
            "dry run writes nothing"
        );
        let ch = unmask_internal(dir, true).unwrap();
        let after = fs::read(dir.join("config")).unwrap();
        assert_eq!(&after[0x108..0x10c], &0x0200_0000u32.to_le_bytes());
        assert_eq!(&after[0x114..0x118], &0x0000_a000u32.to_le_bytes());
        ch.restore().unwrap();
        assert_eq!(fs::read(dir.join("config")).unwrap(), c);
    }
}
