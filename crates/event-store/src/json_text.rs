//! JSON strings written as serde_json writes them, a word at a time up to the next byte to escape.
//
// serde_json's escaper looks at every byte; records and answers are mostly long runs of plain
// text (a payload, fingerprints, timestamps), so checking eight bytes per step for a quote, a
// backslash or a control character roughly halves the instructions of writing them. The
// output is byte for byte serde_json's (tests compare every character class).

/// Appends `s` as a JSON string (quotes included), escaped exactly as `serde_json` does:
/// `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, and `\u00xx` (lower-case hex) for the other
/// control characters; everything else (DEL and all non-ASCII too) as it is.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut i = 0;
    loop {
        let plain = plain_len(&bytes[i..]);
        out.extend_from_slice(&bytes[i..i + plain]);
        i += plain;
        let Some(&b) = bytes.get(i) else { break };
        escape(out, b);
        i += 1;
    }
    out.push(b'"');
}

/// How many bytes at the start of `bytes` JSON writes as they are: the index of the first
/// quote, backslash or control character (or the length). A word at a time, and the word
/// that holds one says where: the lowest flagged byte of `needs_escape`'s mask is exact, so
/// text dense with quotes (a JSON payload inside a record) costs a step per quote, not one
/// per byte.
pub fn plain_len(bytes: &[u8]) -> usize {
    let mut i = 0;
    while let Some(word) = bytes.get(i..i + 8) {
        let mask = needs_escape(u64::from_le_bytes(word.try_into().expect("8 bytes")));
        if mask != 0 {
            return i + (mask.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    i + bytes[i..].iter().position(|&b| CLASS[b as usize] != 0).unwrap_or(bytes.len() - i)
}

/// Appends `c` as it stands inside a JSON string that serde_json writes.
pub(crate) fn push_char(out: &mut Vec<u8>, c: char) {
    match u8::try_from(c) {
        Ok(b) if CLASS[b as usize] != 0 => escape(out, b),
        _ => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
    }
}

/// Non-zero for the bytes serde_json escapes.
const CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = 1;
        b += 1;
    }
    t[b'"' as usize] = 1;
    t[b'\\' as usize] = 1;
    t
};

fn escape(out: &mut Vec<u8>, b: u8) {
    match b {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        0x08 => out.extend_from_slice(b"\\b"),
        0x0c => out.extend_from_slice(b"\\f"),
        b'\n' => out.extend_from_slice(b"\\n"),
        b'\r' => out.extend_from_slice(b"\\r"),
        b'\t' => out.extend_from_slice(b"\\t"),
        _ => out.extend_from_slice(&[b'\\', b'u', b'0', b'0', HEX[(b >> 4) as usize], HEX[(b & 0xf) as usize]]),
    }
}

const HEX: [u8; 16] = *b"0123456789abcdef";

/// The high bit of each byte of `w` (little-endian) that may be below 0x20, a quote or a
/// backslash; zero when none is. (The classic "has a byte less than n" test, exact for
/// n ≤ 128; a quote or backslash is a zero byte after xor with that character repeated.) A
/// borrow can flag a byte above a real one, never below, so the lowest flag is exact.
fn needs_escape(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below = |x: u64, n: u64| x.wrapping_sub(ONES * n) & !x & HIGH;
    below(w, 0x20) | below(w ^ (ONES * b'"' as u64), 1) | below(w ^ (ONES * b'\\' as u64), 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(s: &str) -> String {
        let mut out = Vec::new();
        write_str(&mut out, s);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_character_class_is_written_as_serde_json_writes_it() {
        let mut all = String::new();
        for c in (0u32..0x800).chain([0x7f, 0xfffd, 0x1f389, 0x10ffff]).filter_map(char::from_u32) {
            all.push(c);
        }
        let json_in_json = serde_json::to_string(&serde_json::json!({"a": "b\"c", "d": [1, "\\"]})).unwrap();
        for text in [all.as_str(), &json_in_json, "", "plain", "12345678", "1234567\"", "\"1234567", "é\u{1}é"] {
            assert_eq!(ours(text), serde_json::to_string(text).unwrap(), "{text:?}");
        }
        // Every position of every special byte within and across 8-byte words, and where
        // plain_len says the first one stands.
        for len in 0..20 {
            for at in 0..len {
                for special in ['"', '\\', '\n', '\u{0}', '\u{1f}', '\u{7f}', 'é'] {
                    let mut s: String = "x".repeat(len);
                    s.replace_range(at..at + 1, &special.to_string());
                    assert_eq!(ours(&s), serde_json::to_string(&s).unwrap(), "{s:?}");
                    let first = s.bytes().position(|b| b < 0x20 || b == b'"' || b == b'\\').unwrap_or(s.len());
                    assert_eq!(plain_len(s.as_bytes()), first, "{s:?}");
                }
            }
        }
    }
}
