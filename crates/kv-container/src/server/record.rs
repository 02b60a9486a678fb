//! The stored value's on-disk layout (value + revision + timestamps) and the server clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;

/// Format tag in front of every stored record, so a layout change is detected instead of
/// being misread as garbage. V1 (no checksum) is still read, from stores written before V2.
const FORMAT_V1: u8 = 1;
/// V2 adds a CRC-32 of the whole record, so a value damaged inside a page that still parses
/// is refused (and reported as damage) instead of being served.
const FORMAT_V2: u8 = 2;
/// tag (1) + rev (8) + modified_ms (8) + expires_ms (8).
const HEADER_LEN: usize = 1 + 8 + 8 + 8;
/// V2: the header, then the CRC-32 (4, little-endian) of the header and the value.
const HEADER_LEN_V2: usize = HEADER_LEN + 4;

/// One stored value with its metadata, as read back from the data table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredValue {
    /// The exact JSON bytes the client sent.
    pub(crate) value: Bytes,
    /// Server-wide revision of the write that produced this value (the ETag).
    pub(crate) rev: u64,
    /// Server clock (unix ms) when the value was written.
    pub(crate) modified_ms: u64,
    /// Unix ms at which the value stops existing; 0 = never.
    pub(crate) expires_ms: u64,
}

/// The stored bytes are not a record as we write them; treated as damage to the store.
#[derive(Debug, thiserror::Error)]
#[error("stored record is corrupt ({why}, {len} bytes)")]
pub(crate) struct CorruptRecord {
    pub(crate) len: usize,
    pub(crate) why: &'static str,
}

impl StoredValue {
    /// Serialises metadata and value into one blob, so a read needs a single B-tree lookup.
    pub(crate) fn encode(value: &[u8], rev: u64, modified_ms: u64, expires_ms: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN_V2 + value.len());
        out.push(FORMAT_V2);
        out.extend_from_slice(&rev.to_le_bytes());
        out.extend_from_slice(&modified_ms.to_le_bytes());
        out.extend_from_slice(&expires_ms.to_le_bytes());
        out.extend_from_slice(&checksum(&out, value).to_le_bytes());
        out.extend_from_slice(value);
        out
    }

    /// Parses a blob written by [`StoredValue::encode`] (or by a V1 store); never panics on short
    /// or foreign input.
    pub(crate) fn decode(raw: &[u8]) -> Result<StoredValue, CorruptRecord> {
        let corrupt = |why| CorruptRecord { len: raw.len(), why };
        let (header, value) = match raw.first() {
            Some(&FORMAT_V1) => raw.split_at_checked(HEADER_LEN).ok_or(corrupt("shorter than its header"))?,
            Some(&FORMAT_V2) => {
                let (header, value) = raw.split_at_checked(HEADER_LEN_V2).ok_or(corrupt("shorter than its header"))?;
                let (header, sum) = header.split_at(HEADER_LEN);
                if u32::from_le_bytes([sum[0], sum[1], sum[2], sum[3]]) != checksum(header, value) {
                    return Err(corrupt("checksum mismatch"));
                }
                (header, value)
            }
            _ => return Err(corrupt("unknown format tag")),
        };
        let word = |at: usize| -> u64 {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&header[at..at + 8]);
            u64::from_le_bytes(bytes)
        };
        Ok(StoredValue {
            rev: word(1),
            modified_ms: word(9),
            expires_ms: word(17),
            value: Bytes::copy_from_slice(value),
        })
    }

    /// Expired records read as absent everywhere, even before the purge deletes them.
    pub(crate) fn is_live(&self, now_ms: u64) -> bool {
        self.expires_ms == 0 || self.expires_ms > now_ms
    }
}

/// CRC-32 (IEEE) of a record's header and value.
fn checksum(header: &[u8], value: &[u8]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    crc.update(header);
    crc.update(value);
    crc.finalize()
}

/// The server's notion of "now" in unix milliseconds. Tests can pin it so TTL behaviour is
/// checked without sleeping.
#[derive(Clone, Default)]
pub struct ServerClock {
    manual: Option<Arc<AtomicU64>>,
}

impl ServerClock {
    /// The wall clock.
    pub fn system() -> ServerClock {
        ServerClock { manual: None }
    }

    /// A clock that only moves when the returned handle is written to (unix ms), for tests
    /// (the `testkit` feature).
    #[cfg(any(test, feature = "testkit"))]
    pub fn manual(start_ms: u64) -> (ServerClock, Arc<AtomicU64>) {
        let handle = Arc::new(AtomicU64::new(start_ms));
        (ServerClock { manual: Some(handle.clone()) }, handle)
    }

    pub(crate) fn now_ms(&self) -> u64 {
        match &self.manual {
            Some(t) => t.load(Ordering::SeqCst),
            None => system_now_ms(),
        }
    }
}

/// Unix time in ms; a clock set before 1970 reads as 0 rather than failing a request.
pub(crate) fn system_now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_keeps_value_and_metadata() {
        let raw = StoredValue::encode(br#"{"a":1}"#, 42, 1_700_000_000_000, 7);
        let rec = StoredValue::decode(&raw).expect("decodes");
        assert_eq!(&rec.value[..], br#"{"a":1}"#);
        assert_eq!((rec.rev, rec.modified_ms, rec.expires_ms), (42, 1_700_000_000_000, 7));
    }

    #[test]
    fn short_or_foreign_blobs_are_errors_not_panics() {
        assert!(StoredValue::decode(b"").is_err());
        assert!(StoredValue::decode(&[1u8; HEADER_LEN - 1]).is_err());
        assert!(StoredValue::decode(&[2u8; HEADER_LEN_V2 - 1]).is_err());
        let mut raw = StoredValue::encode(b"1", 1, 1, 0);
        raw[0] = 9;
        assert!(StoredValue::decode(&raw).is_err());
    }

    #[test]
    fn any_damaged_byte_is_refused_not_served() {
        let raw = StoredValue::encode(br#"{"status":"done","n":12345}"#, 42, 1_700_000_000_000, 7);
        for at in 0..raw.len() {
            for bit in [0x01u8, 0x80] {
                let mut bad = raw.clone();
                bad[at] ^= bit;
                assert!(StoredValue::decode(&bad).is_err(), "byte {at} ^ {bit:#x} decoded");
            }
        }
        let mut cut = raw.clone();
        cut.pop();
        assert!(StoredValue::decode(&cut).unwrap_err().to_string().contains("checksum"));
    }

    #[test]
    fn v1_records_of_older_stores_are_still_read() {
        let mut v1 = vec![FORMAT_V1];
        for word in [42u64, 1_700_000_000_000, 7] {
            v1.extend_from_slice(&word.to_le_bytes());
        }
        v1.extend_from_slice(b"{}");
        let rec = StoredValue::decode(&v1).unwrap();
        assert_eq!((rec.rev, rec.modified_ms, rec.expires_ms, &rec.value[..]), (42, 1_700_000_000_000, 7, &b"{}"[..]));
    }

    #[test]
    fn expiry_is_inclusive_of_the_deadline() {
        let rec = StoredValue::decode(&StoredValue::encode(b"1", 1, 1, 100)).unwrap();
        assert!(rec.is_live(99));
        assert!(!rec.is_live(100));
        let forever = StoredValue::decode(&StoredValue::encode(b"1", 1, 1, 0)).unwrap();
        assert!(forever.is_live(u64::MAX));
    }
}
