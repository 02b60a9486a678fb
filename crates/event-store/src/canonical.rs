//! Canonical text of a JSON payload for fingerprints, written as the payload is parsed (no tree).
//
// Canonical = sorted keys, no insignificant whitespace, numbers as serde_json writes them. It
// accepts exactly what `serde_json::from_str::<Value>` accepts (same parser, same limits) and
// writes exactly what serialising that `Value` with sorted keys writes: fingerprints are
// stored, so this must never drift (canonical_tests.rs holds the `Value`-based form as the
// reference). Each value is written where it stands; an object's members are then put in
// order by moving their bytes, so no tree is built: a tree (and before it `Value`'s ordered
// maps) cost an allocation per object, array and number. Ordinary payloads do not come here
// at all: canonical_fast.rs writes them in one hand-written pass and hands over the rest.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Number;

use crate::canonical_order::{rewrite_in_order, NUMBER_TOKEN};

/// The canonical text of `payload`, or None when it is not JSON (then it is hashed as text).
pub fn canonical_json(payload: &str) -> Option<Vec<u8>> {
    canonical_json_or_error(payload).ok()
}

/// [`canonical_json`], with the parser's error when `payload` is not JSON.
pub fn canonical_json_or_error(payload: &str) -> Result<Vec<u8>, serde_json::Error> {
    match super::canonical_fast::canonical(payload) {
        Some(text) => Ok(text),
        None => canonical_json_by_serde(payload),
    }
}

/// The serde-driven writer alone: exact for every input, and the judge of what is JSON. Public
/// as the reference the fast pass is checked against (property tests, fuzzing).
pub fn canonical_json_by_serde(payload: &str) -> Result<Vec<u8>, serde_json::Error> {
    // Sized once: the canonical text is at most the payload's length (escapes are only ever
    // kept or dropped), and an object rewritten on close never holds more than that either.
    let mut writer = Writer {
        out: Vec::with_capacity(payload.len()),
        members: Vec::with_capacity(16),
        moved: Vec::with_capacity(payload.len()),
    };
    let mut de = serde_json::Deserializer::from_str(payload);
    Value(&mut writer).deserialize(&mut de)?;
    de.end()?;
    Ok(writer.out)
}

/// The output, and what objects need while their members are put in order: every open
/// object's members (name, and where its value's text stands in `out`) on one stack, and
/// one buffer to move an object's text through.
struct Writer<'de> {
    out: Vec<u8>,
    members: Vec<(Cow<'de, str>, Range<usize>)>,
    moved: Vec<u8>,
}

impl<'de> Writer<'de> {
    /// Rewrites the object whose text starts at `start` (its values written one after the
    /// other) and whose members are `members[first..]`, in name order.
    fn close_object(&mut self, start: usize, first: usize) {
        let members = &mut self.members[first..];
        rewrite_in_order(&mut self.out, &mut self.moved, start, members, Ord::cmp, |out, name, value| {
            put_str(out, name);
            out.push(b':');
            out.extend_from_slice(value);
        });
        self.members.truncate(first);
    }
}

/// A string or number exactly as `serde_json::to_writer` writes it.
fn put<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    serde_json::to_writer(out, v).expect("a string or number serialises");
}

/// A string exactly as `serde_json::to_writer` writes it. serde_json lends a string out of
/// the input only when it had no escape there, and it refuses raw control characters, so a
/// borrowed one holds nothing to escape: its text goes out as it came in. (A `&Cow`, not a
/// `&str`: whether it is borrowed is the point.)
#[allow(clippy::ptr_arg)]
fn put_str(out: &mut Vec<u8>, s: &Cow<str>) {
    match s {
        Cow::Borrowed(text) => {
            out.push(b'"');
            out.extend_from_slice(text.as_bytes());
            out.push(b'"');
        }
        Cow::Owned(text) => put(out, text.as_str()),
    }
}

/// `-?(0|[1-9][0-9]*)`: an integer as JSON spells it.
fn is_json_integer(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text).as_bytes();
    match digits {
        [b'0'] => true,
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    }
}

/// A string that borrows from the input when it has no escapes.
struct CowStr;

impl<'de> DeserializeSeed<'de> for CowStr {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(CowStr)
    }
}

impl<'de> Visitor<'de> for CowStr {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

/// One value, written canonically at the end of the writer's output. Mirrors serde_json's
/// own `Value` visitor case by case.
struct Value<'w, 'de>(&'w mut Writer<'de>);

impl<'de> DeserializeSeed<'de> for Value<'_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Value<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any valid JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.0.out.extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }
    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        put(&mut self.0.out, &Number::from(v));
        Ok(())
    }
    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        put(&mut self.0.out, &Number::from(v));
        Ok(())
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<(), E> {
        put(&mut self.0.out, &Number::deserialize(de::value::I128Deserializer::new(v))?);
        Ok(())
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<(), E> {
        put(&mut self.0.out, &Number::deserialize(de::value::U128Deserializer::new(v))?);
        Ok(())
    }
    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        match Number::from_f64(v) {
            Some(n) => put(&mut self.0.out, &n),
            None => self.0.out.extend_from_slice(b"null"),
        }
        Ok(())
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<(), E> {
        put_str(&mut self.0.out, &Cow::Borrowed(v));
        Ok(())
    }
    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        put(&mut self.0.out, v);
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        self.0.out.extend_from_slice(b"null");
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.deserialize(d)
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.out.extend_from_slice(b"null");
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let w = self.0;
        w.out.push(b'[');
        let mut first = true;
        loop {
            let mark = w.out.len();
            if !first {
                w.out.push(b',');
            }
            if seq.next_element_seed(Value(&mut *w))?.is_none() {
                w.out.truncate(mark);
                break;
            }
            first = false;
        }
        w.out.push(b']');
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let w = self.0;
        let Some(key) = map.next_key_seed(CowStr)? else {
            w.out.extend_from_slice(b"{}");
            return Ok(());
        };
        if key == NUMBER_TOKEN {
            let text = map.next_value_seed(CowStr)?;
            if is_json_integer(&text) {
                // What serde_json writes for it: the text itself (only exponents are respelled).
                w.out.extend_from_slice(text.as_bytes());
            } else {
                put(&mut w.out, &text.parse::<Number>().map_err(de::Error::custom)?);
            }
            return Ok(());
        }
        let (start, first) = (w.out.len(), w.members.len());
        let mut key = Some(key);
        while let Some(name) = key {
            let at = w.out.len();
            map.next_value_seed(Value(&mut *w))?;
            let end = w.out.len();
            w.members.push((name, at..end));
            key = map.next_key_seed(CowStr)?;
        }
        w.close_object(start, first);
        Ok(())
    }
}

#[cfg(test)]
#[path = "canonical_tests.rs"]
mod tests;
