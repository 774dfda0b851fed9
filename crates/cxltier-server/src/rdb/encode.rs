//! Encoders of the compact collections Redis keeps in RDB values (ziplists, listpacks, intsets,
//! zipmaps), each the inverse of its reader in [`super::load`], with the smallest encoding of
//! every entry as Redis writes them. DUMP does not need them (it writes the plain encodings);
//! the tests and the fuzz target build payloads of every encoding with them, including those
//! Redis 7.0 no longer writes (ziplists, zipmaps).

pub use super::load::Entry;

/// RDB's length encoding appended to `out`.
pub fn length(n: u64, out: &mut Vec<u8>) {
    if n < 1 << 6 {
        out.push(n as u8);
    } else if n < 1 << 14 {
        out.extend_from_slice(&[0x40 | (n >> 8) as u8, n as u8]);
    } else if n <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// A plain RDB string (its length, then its bytes) appended to `out`.
pub fn string(s: &[u8], out: &mut Vec<u8>) {
    length(s.len() as u64, out);
    out.extend_from_slice(s);
}

/// A listpack of `entries`.
pub fn listpack(entries: &[Entry<'_>]) -> Vec<u8> {
    let mut lp = vec![0u8; 6];
    for e in entries {
        let start = lp.len();
        match *e {
            Entry::Int(v @ 0..=127) => lp.push(v as u8),
            Entry::Int(v @ -4096..=4095) => {
                let u = (v as u64) & 0x1fff;
                lp.extend_from_slice(&[0xc0 | (u >> 8) as u8, u as u8]);
            }
            Entry::Int(v) => {
                let (tag, width) = match v {
                    -32768..=32767 => (0xf1, 2),
                    -8_388_608..=8_388_607 => (0xf2, 3),
                    -2_147_483_648..=2_147_483_647 => (0xf3, 4),
                    _ => (0xf4, 8),
                };
                lp.push(tag);
                lp.extend_from_slice(&v.to_le_bytes()[..width]);
            }
            Entry::Str(s) if s.len() < 64 => {
                lp.push(0x80 | s.len() as u8);
                lp.extend_from_slice(s);
            }
            Entry::Str(s) if s.len() < 4096 => {
                lp.extend_from_slice(&[0xe0 | (s.len() >> 8) as u8, s.len() as u8]);
                lp.extend_from_slice(s);
            }
            Entry::Str(s) => {
                lp.push(0xf0);
                lp.extend_from_slice(&(s.len() as u32).to_le_bytes());
                lp.extend_from_slice(s);
            }
        }
        let mut back = [0u8; 5];
        let n = super::load::listpack_backlen(lp.len() - start, &mut back);
        lp.extend_from_slice(&back[..n]);
    }
    lp.push(0xff);
    let total = lp.len() as u32;
    lp[0..4].copy_from_slice(&total.to_le_bytes());
    let count = entries.len().min(usize::from(u16::MAX)) as u16;
    lp[4..6].copy_from_slice(&count.to_le_bytes());
    lp
}

/// A ziplist of `entries`.
pub fn ziplist(entries: &[Entry<'_>]) -> Vec<u8> {
    let mut zl = vec![0u8; 10];
    let mut prev = 0usize;
    let mut tail = 10usize;
    for e in entries {
        let start = zl.len();
        tail = start;
        if prev < 254 {
            zl.push(prev as u8);
        } else {
            zl.push(254);
            zl.extend_from_slice(&(prev as u32).to_le_bytes());
        }
        match *e {
            Entry::Int(v @ 0..=12) => zl.push(0xf1 + v as u8),
            Entry::Int(v) => {
                let (tag, width) = match v {
                    -128..=127 => (0xfe, 1),
                    -32768..=32767 => (0xc0, 2),
                    -8_388_608..=8_388_607 => (0xf0, 3),
                    -2_147_483_648..=2_147_483_647 => (0xd0, 4),
                    _ => (0xe0, 8),
                };
                zl.push(tag);
                zl.extend_from_slice(&v.to_le_bytes()[..width]);
            }
            Entry::Str(s) => {
                if s.len() <= 0x3f {
                    zl.push(s.len() as u8);
                } else if s.len() <= 0x3fff {
                    zl.extend_from_slice(&[0x40 | (s.len() >> 8) as u8, s.len() as u8]);
                } else {
                    zl.push(0x80);
                    zl.extend_from_slice(&(s.len() as u32).to_be_bytes());
                }
                zl.extend_from_slice(s);
            }
        }
        prev = zl.len() - start;
    }
    zl.push(0xff);
    let total = zl.len() as u32;
    zl[0..4].copy_from_slice(&total.to_le_bytes());
    zl[4..8].copy_from_slice(&(tail as u32).to_le_bytes());
    let count = entries.len().min(usize::from(u16::MAX)) as u16;
    zl[8..10].copy_from_slice(&count.to_le_bytes());
    zl
}

/// An intset of `values` (sorted and without repeats for a valid one: they are written as
/// given), in the narrowest width that holds them all.
pub fn intset(values: &[i64]) -> Vec<u8> {
    let width: usize = if values.iter().all(|&v| i16::try_from(v).is_ok()) {
        2
    } else if values.iter().all(|&v| i32::try_from(v).is_ok()) {
        4
    } else {
        8
    };
    let mut is = Vec::with_capacity(8 + width * values.len());
    is.extend_from_slice(&(width as u32).to_le_bytes());
    is.extend_from_slice(&(values.len() as u32).to_le_bytes());
    for v in values {
        is.extend_from_slice(&v.to_le_bytes()[..width]);
    }
    is
}

/// A zipmap of `pairs` (Redis 2.4's small hashes), without free bytes.
pub fn zipmap(pairs: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut zm = vec![pairs.len().min(254) as u8];
    let len = |zm: &mut Vec<u8>, n: usize| {
        if n < 254 {
            zm.push(n as u8);
        } else {
            zm.push(254);
            zm.extend_from_slice(&(n as u32).to_le_bytes());
        }
    };
    for (f, v) in pairs {
        len(&mut zm, f.len());
        zm.extend_from_slice(f);
        len(&mut zm, v.len());
        zm.push(0);
        zm.extend_from_slice(v);
    }
    zm.push(0xff);
    zm
}
