//! The stored value's on-disk layout (value + revision + timestamps) and the server clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use super::squeeze;

/// Format tag in front of every stored record, so a layout change is detected instead of
/// being misread as garbage. V1 (no checksum) is still read, from stores written before V2.
const FORMAT_V1: u8 = 1;
/// V2 adds a CRC-32 of the whole record, so a value damaged inside a page that still parses
/// is refused (and reported as damage) instead of being served.
const FORMAT_V2: u8 = 2;
/// V3 is V2 with the value compressed (`squeeze`, zstd): the header, the CRC-32 of everything
/// after it, the value's length (4, little-endian), then the compressed bytes. Written whenever
/// compression saves bytes; a value that does not shrink is written as V2.
const FORMAT_V3: u8 = 3;
/// tag (1) + rev (8) + modified_ms (8) + expires_ms (8).
const HEADER_LEN: usize = 1 + 8 + 8 + 8;
/// V2: the header, then the CRC-32 (4, little-endian) of the header and the value.
const HEADER_LEN_V2: usize = HEADER_LEN + 4;
/// V3: the V2 header, then the value's length before compression.
const HEADER_LEN_V3: usize = HEADER_LEN_V2 + 4;
/// The longest value a V3 header may declare: far above any request's (1 MiB), so a header
/// that passed its checksum but declares more was not written by us.
const MAX_VALUE_LEN: usize = 64 << 20;

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

/// A value as a client sent it, and as the data table will store it: compressed (V3) when
/// that saves bytes, as sent (V2) otherwise. Made on the request's thread, before the write
/// is queued, so that compressing is not work for the single writer every write waits on.
#[derive(Debug, Clone)]
pub(crate) struct Value {
    /// The exact bytes the client sent.
    pub(crate) sent: Bytes,
    /// Its length and its compressed bytes, when those are shorter.
    squeezed: Option<(u32, Vec<u8>)>,
}

impl From<Bytes> for Value {
    fn from(sent: Bytes) -> Value {
        // Compressed only when that saves more than the length the record then also keeps.
        let extra = HEADER_LEN_V3 - HEADER_LEN_V2;
        let squeezed = u32::try_from(sent.len()).ok().and_then(|len| Some((len, squeeze::shrink(&sent, extra)?)));
        Value { sent, squeezed }
    }
}

impl Value {
    /// The record the data table stores: this value behind its metadata, checksummed.
    pub(crate) fn encode(&self, rev: u64, modified_ms: u64, expires_ms: u64) -> Vec<u8> {
        let header = |tag: u8, capacity: usize| {
            let mut out = Vec::with_capacity(capacity);
            out.push(tag);
            out.extend_from_slice(&rev.to_le_bytes());
            out.extend_from_slice(&modified_ms.to_le_bytes());
            out.extend_from_slice(&expires_ms.to_le_bytes());
            out
        };
        match &self.squeezed {
            Some((len, packed)) => {
                let mut out = header(FORMAT_V3, HEADER_LEN_V3 + packed.len());
                let sum = checksum_parts(&[&out, &len.to_le_bytes(), packed]);
                out.extend_from_slice(&sum.to_le_bytes());
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(packed);
                out
            }
            None => {
                let mut out = header(FORMAT_V2, HEADER_LEN_V2 + self.sent.len());
                out.extend_from_slice(&checksum(&out, &self.sent).to_le_bytes());
                out.extend_from_slice(&self.sent);
                out
            }
        }
    }
}

impl StoredValue {
    /// Serialises metadata and value into one blob, so a read needs a single B-tree lookup.
    /// The tests' shorthand: the write path and the restore make a [`Value`] and encode that.
    #[cfg(test)]
    pub(crate) fn encode(value: &[u8], rev: u64, modified_ms: u64, expires_ms: u64) -> Vec<u8> {
        Value::from(Bytes::copy_from_slice(value)).encode(rev, modified_ms, expires_ms)
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
            Some(&FORMAT_V3) => {
                let (header, packed) = raw.split_at_checked(HEADER_LEN_V3).ok_or(corrupt("shorter than its header"))?;
                let (header, rest) = header.split_at(HEADER_LEN);
                let (sum, len) = rest.split_at(4);
                if u32::from_le_bytes([sum[0], sum[1], sum[2], sum[3]]) != checksum_parts(&[header, len, packed]) {
                    return Err(corrupt("checksum mismatch"));
                }
                let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
                if len > MAX_VALUE_LEN {
                    return Err(corrupt("declares a value longer than any written"));
                }
                let value = squeeze::expand(packed, len).ok_or(corrupt("compressed value does not expand"))?;
                return Ok(Self::from_parts(header, Bytes::from(value)));
            }
            _ => return Err(corrupt("unknown format tag")),
        };
        Ok(Self::from_parts(header, Bytes::copy_from_slice(value)))
    }

    /// The record from its header's words and its value.
    fn from_parts(header: &[u8], value: Bytes) -> StoredValue {
        let word = |at: usize| -> u64 {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&header[at..at + 8]);
            u64::from_le_bytes(bytes)
        };
        StoredValue { rev: word(1), modified_ms: word(9), expires_ms: word(17), value }
    }

    /// Expired records read as absent everywhere, even before the purge deletes them.
    pub(crate) fn is_live(&self, now_ms: u64) -> bool {
        self.expires_ms == 0 || self.expires_ms > now_ms
    }
}

/// CRC-32 (IEEE) of a record's header and value.
fn checksum(header: &[u8], value: &[u8]) -> u32 {
    checksum_parts(&[header, value])
}

/// CRC-32 (IEEE) of the parts one after another.
fn checksum_parts(parts: &[&[u8]]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    for part in parts {
        crc.update(part);
    }
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

    /// A record of the plugin's shape: long enough, and repetitive enough, to be compressed.
    fn plugin_like() -> Vec<u8> {
        let payload = r#"{\"id\":\"evt_0000000042\",\"type\":\"order.updated\",\"data\":{\"items\":[{\"sku\":\"SKU-1042\",\"qty\":2},{\"sku\":\"SKU-7\",\"qty\":1}]}}"#;
        format!(
            r#"{{"v":1,"event_id":"evt-42","event_type":"updated","payload":"{payload}","status":"processing","received_at":"2026-05-28T20:26:40.000Z","updated_at":"2026-05-28T20:26:40.000Z","attempt":1}}"#
        )
        .into_bytes()
    }

    #[test]
    fn a_long_value_is_stored_compressed_and_read_back_whole() {
        let value = plugin_like();
        let raw = StoredValue::encode(&value, 42, 1_700_000_000_000, 7);
        assert_eq!(raw[0], FORMAT_V3);
        assert!(raw.len() < HEADER_LEN_V2 + value.len(), "{} bytes stored for {}", raw.len(), value.len());
        let rec = StoredValue::decode(&raw).unwrap();
        assert_eq!((rec.rev, rec.modified_ms, rec.expires_ms, &rec.value[..]), (42, 1_700_000_000_000, 7, &value[..]));
        // Short values stay V2: compressing them would not pay for the length field.
        assert_eq!(StoredValue::encode(br#"{"a":1}"#, 1, 1, 0)[0], FORMAT_V2);
    }

    #[test]
    fn any_damaged_byte_of_a_compressed_record_is_refused() {
        let raw = StoredValue::encode(&plugin_like(), 42, 1_700_000_000_000, 7);
        assert_eq!(raw[0], FORMAT_V3);
        for at in 0..raw.len() {
            for bit in [0x01u8, 0x80] {
                let mut bad = raw.clone();
                bad[at] ^= bit;
                assert!(StoredValue::decode(&bad).is_err(), "byte {at} ^ {bit:#x} decoded");
            }
        }
        for cut in [1, raw.len() - HEADER_LEN_V3, raw.len() - HEADER_LEN_V3 + 1] {
            assert!(StoredValue::decode(&raw[..raw.len() - cut]).is_err(), "cut by {cut}");
        }
    }

    #[test]
    fn a_checksummed_v3_header_that_lies_about_the_length_is_refused() {
        // Not writable by `encode`: a record whose checksum matches a declared length the
        // stream does not inflate to, or one longer than any value.
        let value = plugin_like();
        let packed = squeeze::shrink(&value, 4).unwrap();
        for len in [value.len() as u32 - 1, value.len() as u32 + 1, u32::MAX] {
            let mut raw = StoredValue::encode(b"", 42, 1, 7)[..HEADER_LEN].to_vec();
            raw[0] = FORMAT_V3;
            let sum = checksum_parts(&[&raw, &len.to_le_bytes(), &packed]);
            raw.extend_from_slice(&sum.to_le_bytes());
            raw.extend_from_slice(&len.to_le_bytes());
            raw.extend_from_slice(&packed);
            assert!(StoredValue::decode(&raw).is_err(), "declared {len}");
        }
    }

    proptest::proptest! {
        /// Any value, JSON-like or not, long or short: stored and read back byte for byte.
        #[test]
        fn every_value_round_trips(
            words in proptest::collection::vec("[a-z\"{}:,0-9]{0,12}", 0..120),
            noise in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
        ) {
            for value in [words.concat().into_bytes(), noise] {
                let rec = StoredValue::decode(&StoredValue::encode(&value, 7, 8, 9)).unwrap();
                proptest::prop_assert_eq!(&rec.value[..], &value[..]);
            }
        }

        /// Bytes behind a format-3 tag never panic the reader, whatever they claim.
        #[test]
        fn foreign_format_3_bytes_are_an_error_or_a_value_never_a_panic(
            rest in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
        ) {
            let raw: Vec<u8> = [&[FORMAT_V3][..], &rest].concat();
            let _ = StoredValue::decode(&raw);
        }
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
