//! Minimal zip reader that exposes every central-directory record, as Go's `archive/zip` does.
//!
//! The `zip` crate indexes entries by name and so hides duplicates, but the daemon's
//! signature check walks the raw central directory; verification must see the same list.

use std::io::Read;

use super::error::{EntryError, ZipError};

const EOCD_SIG: u32 = 0x0605_4b50;
const EOCD64_LOCATOR_SIG: u32 = 0x0706_4b50;
const EOCD64_SIG: u32 = 0x0606_4b50;
const CENTRAL_SIG: u32 = 0x0201_4b50;
const LOCAL_SIG: u32 = 0x0403_4b50;
const EOCD_LEN: usize = 22;

/// One central-directory record.
#[derive(Debug, Clone)]
pub(crate) struct RawEntry {
    pub(crate) name: String,
    pub(crate) method: u16,
    pub(crate) crc32: u32,
    pub(crate) compressed_size: u64,
    pub(crate) uncompressed_size: u64,
    pub(crate) local_header_offset: u64,
}

impl RawEntry {
    /// Go's `FileInfo().IsDir()` for zip entries: the name ends in a slash.
    pub(crate) fn is_dir(&self) -> bool {
        self.name.ends_with('/')
    }
}

/// A parsed archive: the bytes, the records in central-directory order and the EOCD comment.
pub(crate) struct RawZip {
    data: Vec<u8>,
    pub(crate) entries: Vec<RawEntry>,
    pub(crate) comment: Vec<u8>,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    b.get(at..at + 2).map(|s| u16::from_le_bytes([s[0], s[1]]))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at + 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(u64::from_le_bytes(a))
}

fn not_zip(why: &'static str) -> ZipError {
    ZipError(why)
}

/// Finds the end-of-central-directory record the way Go does: the last signature whose
/// declared comment length still fits inside the file.
fn find_eocd(data: &[u8]) -> Option<usize> {
    if data.len() < EOCD_LEN {
        return None;
    }
    let lowest = data.len().saturating_sub(EOCD_LEN + 0xFFFF);
    let mut i = data.len() - EOCD_LEN;
    loop {
        if u32_at(data, i) == Some(EOCD_SIG) {
            let n = u16_at(data, i + 20)? as usize;
            if i + EOCD_LEN + n <= data.len() {
                return Some(i);
            }
        }
        if i == lowest {
            return None;
        }
        i -= 1;
    }
}

impl RawZip {
    /// Parses the central directory; entry contents are decoded lazily by [`RawZip::content`].
    pub(crate) fn parse(data: Vec<u8>) -> Result<RawZip, ZipError> {
        let eocd = find_eocd(&data).ok_or_else(|| not_zip("no end of central directory"))?;
        let comment_len = u16_at(&data, eocd + 20).unwrap_or(0) as usize;
        let comment = data[eocd + EOCD_LEN..eocd + EOCD_LEN + comment_len].to_vec();
        let mut count = u64::from(u16_at(&data, eocd + 10).unwrap_or(0));
        let mut dir_size = u64::from(u32_at(&data, eocd + 12).unwrap_or(0));
        let mut dir_offset = u64::from(u32_at(&data, eocd + 16).unwrap_or(0));
        // Zip64: the 32-bit fields are saturated and the real values live in a second record.
        if count == 0xFFFF || dir_size == 0xFFFF_FFFF || dir_offset == 0xFFFF_FFFF {
            if let Some(loc) = eocd.checked_sub(20) {
                if u32_at(&data, loc) == Some(EOCD64_LOCATOR_SIG) {
                    let at = u64_at(&data, loc + 8).ok_or_else(|| not_zip("zip64 locator"))?;
                    let at = usize::try_from(at).map_err(|_| not_zip("zip64 offset"))?;
                    if u32_at(&data, at) != Some(EOCD64_SIG) {
                        return Err(not_zip("zip64 end of central directory"));
                    }
                    count = u64_at(&data, at + 32).ok_or_else(|| not_zip("zip64 record"))?;
                    dir_size = u64_at(&data, at + 40).ok_or_else(|| not_zip("zip64 record"))?;
                    dir_offset = u64_at(&data, at + 48).ok_or_else(|| not_zip("zip64 record"))?;
                }
            }
        }
        let start = usize::try_from(dir_offset).map_err(|_| not_zip("directory offset"))?;
        let end = usize::try_from(dir_size)
            .ok()
            .and_then(|s| start.checked_add(s))
            .filter(|&e| e <= data.len())
            .ok_or_else(|| not_zip("central directory out of range"))?;
        let mut entries = Vec::new();
        let mut at = start;
        while (entries.len() as u64) < count {
            let (entry, next) = parse_central(&data, at, end)?;
            entries.push(entry);
            at = next;
        }
        Ok(RawZip { data, entries, comment })
    }

    /// Uncompressed bytes of record `index`, with the size and CRC-32 checks Go applies.
    pub(crate) fn content(&self, index: usize) -> Result<Vec<u8>, EntryError> {
        let e = &self.entries[index];
        let at = usize::try_from(e.local_header_offset).map_err(|_| EntryError::Offset)?;
        if u32_at(&self.data, at) != Some(LOCAL_SIG) {
            return Err(EntryError::LocalHeader);
        }
        let name_len = u16_at(&self.data, at + 26).unwrap_or(0) as usize;
        let extra_len = u16_at(&self.data, at + 28).unwrap_or(0) as usize;
        let start = at + 30 + name_len + extra_len;
        let raw = usize::try_from(e.compressed_size)
            .ok()
            .and_then(|n| self.data.get(start..start.checked_add(n)?))
            .ok_or(EntryError::Truncated)?;
        // Read one byte more than declared so an overlong stream is noticed, never buffered.
        let limit = e.uncompressed_size.saturating_add(1);
        let mut out = Vec::with_capacity(e.uncompressed_size.min(64 << 20) as usize);
        match e.method {
            0 => out.extend_from_slice(&raw[..raw.len().min(limit as usize)]),
            8 => {
                flate2::read::DeflateDecoder::new(raw)
                    .take(limit)
                    .read_to_end(&mut out)
                    .map_err(EntryError::Inflate)?;
            }
            m => return Err(EntryError::Method(m)),
        }
        if out.len() as u64 != e.uncompressed_size {
            return Err(EntryError::Size);
        }
        if e.crc32 != 0 && crc32(&out) != e.crc32 {
            return Err(EntryError::Crc);
        }
        Ok(out)
    }
}

/// Parses one central-directory record at `at`; returns it and the offset of the next one.
fn parse_central(data: &[u8], at: usize, end: usize) -> Result<(RawEntry, usize), ZipError> {
    if at + 46 > end || u32_at(data, at) != Some(CENTRAL_SIG) {
        return Err(not_zip("bad central directory record"));
    }
    let field16 = |off| u16_at(data, at + off).unwrap_or(0);
    let field32 = |off| u32_at(data, at + off).unwrap_or(0);
    let (name_len, extra_len, comment_len) = (field16(28) as usize, field16(30) as usize, field16(32) as usize);
    let name_end = at + 46 + name_len;
    let next = name_end + extra_len + comment_len;
    if next > end {
        return Err(not_zip("central directory record runs past its end"));
    }
    let mut entry = RawEntry {
        name: String::from_utf8_lossy(&data[at + 46..name_end]).into_owned(),
        method: field16(10),
        crc32: field32(16),
        compressed_size: u64::from(field32(20)),
        uncompressed_size: u64::from(field32(24)),
        local_header_offset: u64::from(field32(42)),
    };
    apply_zip64_extra(&mut entry, &data[name_end..name_end + extra_len]);
    Ok((entry, next))
}

/// Replaces saturated 32-bit sizes/offsets with the values of a zip64 extra field.
fn apply_zip64_extra(entry: &mut RawEntry, mut extra: &[u8]) {
    while extra.len() >= 4 {
        let id = u16_at(extra, 0).unwrap_or(0);
        let len = u16_at(extra, 2).unwrap_or(0) as usize;
        let Some(body) = extra.get(4..4 + len) else {
            return;
        };
        if id == 0x0001 {
            let mut pos = 0;
            let mut take = |field: &mut u64| {
                if *field == 0xFFFF_FFFF {
                    if let Some(v) = u64_at(body, pos) {
                        *field = v;
                        pos += 8;
                    }
                }
            };
            take(&mut entry.uncompressed_size);
            take(&mut entry.compressed_size);
            take(&mut entry.local_header_offset);
        }
        extra = &extra[4 + len..];
    }
}

/// CRC-32 (IEEE), as stored in zip headers.
pub(crate) fn crc32(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    let mut crc = !0u32;
    for &b in data {
        crc = TABLE[((crc ^ u32::from(b)) & 0xFF) as usize] ^ (crc >> 8);
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_the_reference_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn garbage_is_not_a_zip() {
        assert!(RawZip::parse(b"hello".to_vec()).is_err());
        assert!(RawZip::parse(vec![0u8; 100]).is_err());
    }
}
