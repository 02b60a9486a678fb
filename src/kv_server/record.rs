//! On-disk record layout (value + revision + timestamps) and the server clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;

/// Format tag in front of every stored record, so a future layout change can be detected
/// instead of being misread as garbage.
const FORMAT_V1: u8 = 1;
/// tag (1) + rev (8) + modified_ms (8) + expires_ms (8).
const HEADER_LEN: usize = 1 + 8 + 8 + 8;

/// One stored value with its metadata, as read back from the data table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The exact JSON bytes the client sent.
    pub value: Bytes,
    /// Server-wide revision of the write that produced this value (the ETag).
    pub rev: u64,
    /// Server clock (unix ms) when the value was written.
    pub modified_ms: u64,
    /// Unix ms at which the value stops existing; 0 = never.
    pub expires_ms: u64,
}

/// The stored bytes did not have the layout we write; treated as a storage failure.
#[derive(Debug, thiserror::Error)]
#[error("stored record is corrupt or of an unknown format ({0} bytes)")]
pub struct CorruptRecord(pub usize);

impl Record {
    /// Serialises metadata and value into one blob, so a read needs a single B-tree lookup.
    pub fn encode(value: &[u8], rev: u64, modified_ms: u64, expires_ms: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + value.len());
        out.push(FORMAT_V1);
        out.extend_from_slice(&rev.to_le_bytes());
        out.extend_from_slice(&modified_ms.to_le_bytes());
        out.extend_from_slice(&expires_ms.to_le_bytes());
        out.extend_from_slice(value);
        out
    }

    /// Parses a blob written by [`Record::encode`]; never panics on short or foreign input.
    pub fn decode(raw: &[u8]) -> Result<Record, CorruptRecord> {
        let corrupt = || CorruptRecord(raw.len());
        let (header, value) = raw.split_at_checked(HEADER_LEN).ok_or_else(corrupt)?;
        if header[0] != FORMAT_V1 {
            return Err(corrupt());
        }
        let word = |at: usize| -> Result<u64, CorruptRecord> {
            let bytes: [u8; 8] = header.get(at..at + 8).and_then(|s| s.try_into().ok()).ok_or_else(corrupt)?;
            Ok(u64::from_le_bytes(bytes))
        };
        Ok(Record { rev: word(1)?, modified_ms: word(9)?, expires_ms: word(17)?, value: Bytes::copy_from_slice(value) })
    }

    /// Expired records read as absent everywhere, even before the purge deletes them.
    pub fn is_live(&self, now_ms: u64) -> bool {
        self.expires_ms == 0 || self.expires_ms > now_ms
    }
}

/// The server's notion of "now" in unix milliseconds. Tests can pin it so TTL behaviour is
/// checked without sleeping.
#[derive(Clone, Default)]
pub struct Clock {
    manual: Option<Arc<AtomicU64>>,
}

impl Clock {
    /// The wall clock.
    pub fn system() -> Clock {
        Clock { manual: None }
    }

    /// A clock that only moves when the returned handle is written to.
    #[cfg(test)]
    pub fn manual(start_ms: u64) -> (Clock, Arc<AtomicU64>) {
        let handle = Arc::new(AtomicU64::new(start_ms));
        (Clock { manual: Some(handle.clone()) }, handle)
    }

    pub fn now_ms(&self) -> u64 {
        match &self.manual {
            Some(t) => t.load(Ordering::SeqCst),
            None => system_now_ms(),
        }
    }
}

/// Unix time in ms; a clock set before 1970 reads as 0 rather than failing a request.
pub fn system_now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_keeps_value_and_metadata() {
        let raw = Record::encode(br#"{"a":1}"#, 42, 1_700_000_000_000, 7);
        let rec = Record::decode(&raw).expect("decodes");
        assert_eq!(&rec.value[..], br#"{"a":1}"#);
        assert_eq!((rec.rev, rec.modified_ms, rec.expires_ms), (42, 1_700_000_000_000, 7));
    }

    #[test]
    fn short_or_foreign_blobs_are_errors_not_panics() {
        assert!(Record::decode(b"").is_err());
        assert!(Record::decode(&[1u8; HEADER_LEN - 1]).is_err());
        let mut raw = Record::encode(b"1", 1, 1, 0);
        raw[0] = 9;
        assert!(Record::decode(&raw).is_err());
    }

    #[test]
    fn expiry_is_inclusive_of_the_deadline() {
        let rec = Record::decode(&Record::encode(b"1", 1, 1, 100)).unwrap();
        assert!(rec.is_live(99));
        assert!(!rec.is_live(100));
        let forever = Record::decode(&Record::encode(b"1", 1, 1, 0)).unwrap();
        assert!(forever.is_live(u64::MAX));
    }
}
