//! Canonical text of a JSON payload for fingerprints, read into a tree that borrows from the payload.
//
// Canonical = sorted keys, no insignificant whitespace, numbers kept verbatim. It accepts exactly
// what `serde_json::from_str::<Value>` accepts (same parser, same limits) and writes exactly what
// serialising that `Value` with sorted keys writes: fingerprints are stored, so this must never
// drift. `serde_json::Value` would do, but its ordered maps hash and copy every key, which was a
// large share of the CPU of an ingest.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Number;

/// What serde_json (`arbitrary_precision`) reports a number as: a one-entry map under this
/// key. `Value` treats any object whose first key is this one as a number, and so do we.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

enum Node<'a> {
    Null,
    Bool(bool),
    Number(Number),
    Str(Cow<'a, str>),
    Array(Vec<Node<'a>>),
    Object(Vec<(Cow<'a, str>, Node<'a>)>),
}

/// The canonical text of `payload`, or None when it is not JSON (then it is hashed as text).
pub fn canonical_json(payload: &str) -> Option<Vec<u8>> {
    canonical_json_or_error(payload).ok()
}

/// [`canonical_json`], with the parser's error when `payload` is not JSON.
pub fn canonical_json_or_error(payload: &str) -> Result<Vec<u8>, serde_json::Error> {
    let node: Node = serde_json::from_str(payload)?;
    let mut out = Vec::with_capacity(payload.len());
    write(&node, &mut out);
    Ok(out)
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

fn write(node: &Node, out: &mut Vec<u8>) {
    match node {
        Node::Null => out.extend_from_slice(b"null"),
        Node::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Node::Number(n) => put(out, n),
        Node::Str(s) => put_str(out, s),
        Node::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out);
            }
            out.push(b']');
        }
        Node::Object(entries) => {
            // A repeated key keeps its last value (as a `Value` map insert does); the stable
            // sort leaves repeats in input order, so the last of each run is the one.
            let mut sorted: Vec<&(Cow<str>, Node)> = entries.iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            out.push(b'{');
            let mut first = true;
            for (i, (key, value)) in sorted.iter().map(|e| (&e.0, &e.1)).enumerate() {
                if sorted.get(i + 1).is_some_and(|next| next.0 == *key) {
                    continue;
                }
                if !first {
                    out.push(b',');
                }
                first = false;
                put_str(out, key);
                out.push(b':');
                write(value, out);
            }
            out.push(b'}');
        }
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

impl<'de> Deserialize<'de> for Node<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

/// Mirrors serde_json's own `Value` visitor case by case.
struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any valid JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Node<'de>, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node<'de>, E> {
        Ok(Node::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Node<'de>, E> {
        Ok(Node::Number(v.into()))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Node<'de>, E> {
        Number::deserialize(de::value::I128Deserializer::new(v)).map(Node::Number)
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Node<'de>, E> {
        Number::deserialize(de::value::U128Deserializer::new(v)).map(Node::Number)
    }
    fn visit_f64<E>(self, v: f64) -> Result<Node<'de>, E> {
        Ok(Number::from_f64(v).map_or(Node::Null, Node::Number))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Node<'de>, E> {
        Ok(Node::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node<'de>, E> {
        Ok(Node::Str(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<Node<'de>, E> {
        Ok(Node::Str(Cow::Owned(v)))
    }
    fn visit_none<E>(self) -> Result<Node<'de>, E> {
        Ok(Node::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node<'de>, D::Error> {
        Node::deserialize(d)
    }
    fn visit_unit<E>(self) -> Result<Node<'de>, E> {
        Ok(Node::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node<'de>, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node<'de>, A::Error> {
        match map.next_key_seed(CowStr)? {
            Some(key) if key == NUMBER_TOKEN => {
                let text = map.next_value_seed(CowStr)?;
                text.parse::<Number>().map(Node::Number).map_err(de::Error::custom)
            }
            Some(key) => {
                let mut entries = vec![(key, map.next_value()?)];
                while let Some(key) = map.next_key_seed(CowStr)? {
                    entries.push((key, map.next_value()?));
                }
                Ok(Node::Object(entries))
            }
            None => Ok(Node::Object(Vec::new())),
        }
    }
}

#[cfg(test)]
#[path = "canonical_tests.rs"]
mod tests;
