//! The canonical text of an ordinary JSON payload in one hand-written pass; anything unusual goes back to the serde writer.
//
// The serde-driven writer (canonical.rs) pays for its exactness on every payload: a visitor
// call per value, a scratch copy per string with an escape. Webhook bodies are mostly plain:
// strings, integers, decimals, objects whose members come in any order. This pass writes
// those directly from the text, copying a string's bytes a word at a time, and gives up
// (`None`) at the first thing it does not handle as serde_json does: an exponent, an escaped
// member name, a lone surrogate, nesting deeper than `MAX_DEPTH`, and anything that is not
// JSON. Then the serde writer decides, so what is accepted and what is written never depend on
// which pass ran (canonical_tests.rs compares both against the `Value`-based reference).

use std::ops::Range;

use crate::canonical_order::{rewrite_in_order, NUMBER_TOKEN};
use crate::json_text::{plain_len, push_char};

/// Deeper documents are left to serde_json, whose own limit (128) then decides.
const MAX_DEPTH: u32 = 100;

/// The canonical text of `payload`, or None when this pass leaves it to the serde writer.
pub(crate) fn canonical(payload: &str) -> Option<Vec<u8>> {
    let mut pass = Pass {
        text: payload.as_bytes(),
        at: 0,
        pending: 0,
        // Canonical text is never longer than the payload (escapes are kept or shortened).
        out: Vec::with_capacity(payload.len()),
        members: Vec::with_capacity(16),
        moved: Vec::new(),
    };
    pass.value(0)?;
    pass.skip_space();
    (pass.at == pass.text.len()).then_some(())?;
    pass.flush();
    Some(pass.out)
}

/// Most of the canonical text is the payload's own bytes, so they are copied lazily: the
/// pass only moves `at` over what stays as it is, and copies the run `text[pending..at]`
/// where something is left out (white space), respelled (an escape) or reordered (an
/// object's members), and at the end. A compact payload in order is one copy.
struct Pass<'a> {
    text: &'a [u8],
    at: usize,
    pending: usize,
    out: Vec<u8>,
    /// Every open object's members: the name as it stands in the text (never escaped), and
    /// where the whole `"name":value` stands in the output.
    members: Vec<(&'a [u8], Range<usize>)>,
    moved: Vec<u8>,
}

impl<'a> Pass<'a> {
    /// Where the output stands at `at`, counting what is not copied yet.
    fn written(&self) -> usize {
        self.out.len() + (self.at - self.pending)
    }

    fn flush(&mut self) {
        self.out.extend_from_slice(&self.text[self.pending..self.at]);
        self.pending = self.at;
    }

    #[inline]
    fn skip_space(&mut self) {
        if let Some(b' ' | b'\n' | b'\t' | b'\r') = self.text.get(self.at) {
            self.flush();
            while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.text.get(self.at) {
                self.at += 1;
            }
            self.pending = self.at;
        }
    }

    /// The next byte after white space, consumed (and kept).
    #[inline]
    fn next(&mut self) -> Option<u8> {
        self.skip_space();
        let b = *self.text.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    fn value(&mut self, depth: u32) -> Option<()> {
        match self.next()? {
            b'{' if depth < MAX_DEPTH => self.object(depth + 1),
            b'[' if depth < MAX_DEPTH => self.array(depth + 1),
            b'"' => self.string(),
            b't' => self.word(b"rue"),
            b'f' => self.word(b"alse"),
            b'n' => self.word(b"ull"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn word(&mut self, rest: &[u8]) -> Option<()> {
        self.text.get(self.at..)?.starts_with(rest).then_some(())?;
        self.at += rest.len();
        Some(())
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?`, which serde_json writes as it is spelled; an exponent
    /// is respelled (`1E2` → `1e+2`), so it is left to the serde writer.
    fn number(&mut self) -> Option<()> {
        let digits = |at: &mut usize| {
            let from = *at;
            while self.text.get(*at).is_some_and(u8::is_ascii_digit) {
                *at += 1;
            }
            *at - from
        };
        let mut at = self.at;
        if self.text[at - 1] == b'-' {
            match self.text.get(at)? {
                b'0'..=b'9' => at += 1,
                _ => return None,
            }
        }
        if self.text[at - 1] != b'0' {
            digits(&mut at);
        }
        if self.text.get(at) == Some(&b'.') {
            at += 1;
            (digits(&mut at) > 0).then_some(())?;
        }
        if let Some(b'e' | b'E') = self.text.get(at) {
            return None;
        }
        self.at = at;
        Some(())
    }

    fn array(&mut self, depth: u32) -> Option<()> {
        self.skip_space();
        if self.text.get(self.at) == Some(&b']') {
            self.at += 1;
            return Some(());
        }
        loop {
            self.value(depth)?;
            match self.next()? {
                b',' => {}
                b']' => return Some(()),
                _ => return None,
            }
        }
    }

    fn object(&mut self, depth: u32) -> Option<()> {
        let (start, first) = (self.written() - 1, self.members.len());
        self.skip_space();
        if self.text.get(self.at) == Some(&b'}') {
            self.at += 1;
            return Some(());
        }
        let mut in_order = true;
        loop {
            (self.next()? == b'"').then_some(())?;
            let member = self.written() - 1;
            let from = self.at;
            self.at += plain_len(&self.text[from..]);
            // An escaped name sorts by its unescaped text: the serde writer's job.
            (self.text.get(self.at)? == &b'"').then_some(())?;
            let name = &self.text[from..self.at];
            self.at += 1;
            if self.members.len() == first && name == NUMBER_TOKEN.as_bytes() {
                return None;
            }
            if let Some((last, _)) = self.members[first..].last() {
                in_order &= name_order(last, name).is_lt();
            }
            (self.next()? == b':').then_some(())?;
            self.value(depth)?;
            self.members.push((name, member..self.written()));
            match self.next()? {
                b',' => {}
                b'}' => break,
                _ => return None,
            }
        }
        if !in_order {
            self.flush();
            self.sort_object(start, first);
        }
        self.members.truncate(first);
        Some(())
    }

    /// Rewrites the object at `out[start..]` with its members in name order (as the serde
    /// writer does; each member's text is already `"name":value`).
    fn sort_object(&mut self, start: usize, first: usize) {
        if self.moved.capacity() == 0 {
            self.moved.reserve(self.text.len());
        }
        let members = &mut self.members[first..];
        rewrite_in_order(
            &mut self.out,
            &mut self.moved,
            start,
            members,
            |a, b| name_order(a, b),
            |out, _, text| out.extend_from_slice(text),
        );
    }

    /// A string (its opening quote read), written as serde_json writes it: the escapes it
    /// would write itself stay as they are; `\/` and `\u` escapes are written its way.
    fn string(&mut self) -> Option<()> {
        loop {
            self.at += plain_len(&self.text[self.at..]);
            match *self.text.get(self.at)? {
                b'"' => break,
                b'\\' => {}
                _ => return None, // a raw control character: not JSON
            }
            match *self.text.get(self.at + 1)? {
                b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 2,
                b'/' => {
                    self.flush();
                    self.out.push(b'/');
                    self.at += 2;
                    self.pending = self.at;
                }
                b'u' => {
                    self.flush();
                    let (c, len) = self.unicode_escape()?;
                    push_char(&mut self.out, c);
                    self.at += len;
                    self.pending = self.at;
                }
                _ => return None,
            }
        }
        self.at += 1;
        Some(())
    }

    /// The character of the `\uXXXX` escape at `at` (two for a surrogate pair) and the bytes
    /// it takes; None for a lone surrogate.
    fn unicode_escape(&self) -> Option<(char, usize)> {
        let hex = |at: usize| -> Option<u32> {
            let digits = std::str::from_utf8(self.text.get(at..at + 4)?).ok()?;
            digits.bytes().all(|b| b.is_ascii_hexdigit()).then(|| u32::from_str_radix(digits, 16).ok())?
        };
        let first = hex(self.at + 2)?;
        match first {
            0xd800..=0xdbff => {
                (self.text.get(self.at + 6..self.at + 8)? == b"\\u").then_some(())?;
                let second = hex(self.at + 8)?;
                (0xdc00..=0xdfff).contains(&second).then_some(())?;
                Some((char::from_u32(0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00))?, 12))
            }
            _ => Some((char::from_u32(first)?, 6)),
        }
    }
}

/// Byte order of two names (`String`'s order, which the serde writer sorts by), deciding on the
/// first byte where it can: names mostly differ there, and a slice comparison is a `memcmp`
/// call.
fn name_order(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    match (a.first(), b.first()) {
        (Some(x), Some(y)) if x != y => x.cmp(y),
        _ => a.cmp(b),
    }
}
