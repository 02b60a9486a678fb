//! A record value's compression on disk (zstd), so that more records share a 4 KiB page.
//!
//! A record of the plugin's shape (794 bytes of JSON, the payload escaped inside it) takes
//! about 55 % of that compressed, and a page that held three such records holds five or six:
//! the data file shrinks by about two fifths, so more of it stays in the page cache, and the
//! integrity check, a crash's repair and the image backup have that much less to read.
//! zstd at level 1: a few microseconds per record each way (DEFLATE through flate2's Rust
//! backend, already in the tree, took four times as long for 8 % fewer bytes).

use std::cell::RefCell;

use zstd::bulk::{Compressor, Decompressor};
use zstd::zstd_safe::CParameter;

/// Values shorter than this are stored as they are: below it the saving is a few bytes.
pub(crate) const MIN_LEN: usize = 96;
const LEVEL: i32 = 1;

thread_local! {
    // One context each per thread, reused: creating one costs more than compressing a record.
    static COMPRESSOR: RefCell<Option<Compressor<'static>>> = const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<Decompressor<'static>>> = const { RefCell::new(None) };
}

fn compressor() -> Option<Compressor<'static>> {
    let mut c = Compressor::new(LEVEL).ok()?;
    // The record keeps the value's length itself; the frame need not repeat it.
    c.set_parameter(CParameter::ContentSizeFlag(false)).ok()?;
    Some(c)
}

/// `value` compressed, or `None` when that would not save at least `overhead` bytes.
pub(crate) fn shrink(value: &[u8], overhead: usize) -> Option<Vec<u8>> {
    if value.len() < MIN_LEN {
        return None;
    }
    let limit = value.len().checked_sub(overhead + 1)?;
    COMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = compressor();
        }
        // Fails (too small a buffer) when the frame would not fit in `limit`: not worth it.
        let mut out = Vec::with_capacity(limit);
        slot.as_mut()?.compress_to_buffer(value, &mut out).ok()?;
        Some(out)
    })
}

/// Expands `packed` into exactly `len` bytes; `None` unless it is one zstd frame of that
/// length and nothing else (never panics on foreign bytes).
pub(crate) fn expand(packed: &[u8], len: usize) -> Option<Vec<u8>> {
    // Exactly one frame: zstd would also read a second one, or none from empty input.
    if zstd::zstd_safe::find_frame_compressed_size(packed).ok()? != packed.len() {
        return None;
    }
    DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Decompressor::new().ok();
        }
        // One spare byte: a frame that would write more than `len` is refused, not cut.
        let mut out = Vec::with_capacity(len + 1);
        let n = slot.as_mut()?.decompress_to_buffer(packed, &mut out).ok()?;
        (n == len && out.len() == len).then_some(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(n: usize) -> Vec<u8> {
        let items: Vec<String> = (0..n).map(|i| format!(r#"{{"sku":"SKU-{i}","qty":{i},"price":"19.90"}}"#)).collect();
        format!(r#"{{"status":"processing","items":[{}]}}"#, items.join(",")).into_bytes()
    }

    #[test]
    fn round_trips_and_saves_on_json() {
        let value = json(20);
        let packed = shrink(&value, 4).expect("JSON of repeated fields compresses");
        assert!(packed.len() < value.len() / 2, "{} of {}", packed.len(), value.len());
        assert_eq!(expand(&packed, value.len()).unwrap(), value);
    }

    #[test]
    fn short_or_incompressible_values_are_left_alone() {
        assert_eq!(shrink(br#"{"a":1}"#, 4), None);
        let bytes: Vec<u8> = (0..=255).collect();
        let noise = crate::server::compact::tests::noise(0x2545_f491_4f6c_dd1d, 4096, &bytes);
        assert_eq!(shrink(&noise, 4), None);
    }

    #[test]
    fn a_wrong_length_or_a_cut_or_extended_frame_is_refused() {
        let value = json(20);
        let packed = shrink(&value, 4).unwrap();
        assert_eq!(expand(&packed, value.len() - 1), None);
        assert_eq!(expand(&packed, value.len() + 1), None);
        assert_eq!(expand(&packed[..packed.len() - 1], value.len()), None);
        let mut longer = packed.clone();
        longer.push(0);
        assert_eq!(expand(&longer, value.len()), None, "trailing bytes after the frame");
        let mut twice = packed.clone();
        twice.extend_from_slice(&packed);
        assert_eq!(expand(&twice, value.len()), None, "a second frame");
        assert_eq!(expand(b"", 0), None);
    }

    proptest::proptest! {
        /// Foreign bytes (a record whose checksum was forged or collided) and changed frames
        /// never panic the expander. A changed frame may still expand, even to the same
        /// value (zstd ignores some header bits): the record's CRC-32 is what finds damage.
        #[test]
        fn foreign_or_changed_frames_are_refused_or_read_never_a_panic(
            junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            len in 0usize..5000,
            at in proptest::prelude::any::<usize>(),
            bit in 0u8..8,
        ) {
            let _ = expand(&junk, len);
            let value = json(20);
            let mut frame = shrink(&value, 4).unwrap();
            let at = at % frame.len();
            frame[at] ^= 1 << bit;
            if let Some(out) = expand(&frame, value.len()) {
                proptest::prop_assert_eq!(out.len(), value.len());
            }
        }
    }

    #[test]
    fn the_contexts_are_reused_cleanly_between_values() {
        let (a, b) = (json(30), json(3));
        let (pa, pb) = (shrink(&a, 4).unwrap(), shrink(&b, 4).unwrap());
        assert_eq!(shrink(&a, 4).unwrap(), pa);
        assert_eq!(expand(&pb, b.len()).unwrap(), b);
        assert_eq!(expand(&pa, a.len()).unwrap(), a);
    }
}
