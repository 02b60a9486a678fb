//! Event id → storage key: injective, and only URL-unreserved characters ever reach a store.
//!
//! Layout (`~` never occurs in a plain id, nor in base64url, nor in a namespace):
//! - `evt_<id>`            plain id (`[A-Za-z0-9._-]`, not `.`/`..`), no namespace — the seed's layout
//! - `evt~<b64url(id)>`    any other id, no namespace
//! - `evt_<ns>~<id>`       plain id in namespace `ns`
//! - `evt_<ns>~~<b64>`     other id in namespace `ns`

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

pub(crate) const MAX_EVENT_ID_BYTES: usize = 255;
pub const MAX_NAMESPACE_BYTES: usize = 64;

fn is_plain_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

fn is_plain(id: &str) -> bool {
    !id.is_empty() && id != "." && id != ".." && id.bytes().all(is_plain_char)
}

/// An event id or namespace the store layer cannot key; the tools report it as
/// `param_invalid` with this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InvalidInput {
    pub message: String,
}

impl InvalidInput {
    fn new(message: impl Into<String>) -> InvalidInput {
        InvalidInput { message: message.into() }
    }
}

/// Checks an event id: 1–255 bytes of UTF-8 without control characters.
pub fn validate_event_id(id: &str) -> Result<(), InvalidInput> {
    if id.is_empty() {
        return Err(InvalidInput::new("event_id is empty: pass the unique id the source system gave this event"));
    }
    if id.len() > MAX_EVENT_ID_BYTES {
        return Err(InvalidInput::new(format!(
            "event_id is {} bytes long; the limit is {MAX_EVENT_ID_BYTES} bytes of UTF-8",
            id.len()
        )));
    }
    if let Some(c) = id.chars().find(|c| c.is_control()) {
        return Err(InvalidInput::new(format!(
            "event_id contains the control character U+{:04X}; ids must be printable text",
            c as u32
        )));
    }
    Ok(())
}

/// Checks a namespace credential: 1–64 characters from `[A-Za-z0-9._-]`.
pub fn validate_namespace(ns: &str) -> Result<(), InvalidInput> {
    if ns.len() > MAX_NAMESPACE_BYTES || !is_plain(ns) {
        return Err(InvalidInput::new(format!(
            "namespace {ns:?} is invalid: use 1–{MAX_NAMESPACE_BYTES} characters from A-Z a-z 0-9 . _ -"
        )));
    }
    Ok(())
}

/// The storage key for `id` (already validated) in the optional namespace.
pub fn storage_key(namespace: Option<&str>, id: &str) -> String {
    let mut key = String::with_capacity(8 + namespace.map_or(0, str::len) + id.len() * 4 / 3 + 4);
    key.push_str("evt");
    match namespace {
        None => key.push(if is_plain(id) { '_' } else { '~' }),
        Some(ns) => {
            key.push('_');
            key.push_str(ns);
            key.push('~');
            if !is_plain(id) {
                key.push('~');
            }
        }
    }
    if is_plain(id) {
        key.push_str(id);
    } else {
        URL_SAFE_NO_PAD.encode_string(id.as_bytes(), &mut key);
    }
    key
}

/// Inverse of `storage_key`: (namespace, id). A refusal (403) and `kv show` name a key's
/// namespace with it; the tests and fuzz targets prove `storage_key` injective with it.
pub fn parse_storage_key(key: &str) -> Option<(Option<String>, String)> {
    let rest = key.strip_prefix("evt")?;
    let decode = |b64: &str| -> Option<String> {
        let id = String::from_utf8(URL_SAFE_NO_PAD.decode(b64).ok()?).ok()?;
        (!is_plain(&id)).then_some(id)
    };
    if let Some(b64) = rest.strip_prefix('~') {
        return Some((None, decode(b64)?));
    }
    let rest = rest.strip_prefix('_')?;
    match rest.split_once('~') {
        None => is_plain(rest).then(|| (None, rest.to_owned())),
        Some((ns, tail)) => {
            if !is_plain(ns) {
                return None;
            }
            match tail.strip_prefix('~') {
                Some(b64) => Some((Some(ns.to_owned()), decode(b64)?)),
                None => is_plain(tail).then(|| (Some(ns.to_owned()), tail.to_owned())),
            }
        }
    }
}

/// True when every character of `key` is URL-unreserved (what the KV container accepts).
pub fn is_key_charset_safe(key: &str) -> bool {
    key.bytes().all(|b| is_plain_char(b) || b == b'~')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn tricky_ids() -> Vec<String> {
        let mut ids: Vec<String> = [
            "EVT-20260805-001",
            "a:b",
            "a/b",
            "..",
            ".",
            "%2F",
            "a%2Fb",
            "a\u{0}b",
            "🎉",
            "a b",
            "a~b",
            "a_b",
            "a.b",
            "evt_x",
            "x~~y",
            "ns~id",
            "_",
            "-",
            "Zm9v",
            "foo",
            "é",
            "\\",
            "a\"b",
            "A",
            "a",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        ids.push("x".repeat(255));
        ids.push("é".repeat(127));
        ids.push("🎉".repeat(63));
        ids
    }

    #[test]
    fn plain_ids_keep_the_seed_layout() {
        assert_eq!(storage_key(None, "EVT-20260805-001"), "evt_EVT-20260805-001");
        assert_eq!(storage_key(Some("acme"), "EVT-1"), "evt_acme~EVT-1");
    }

    #[test]
    fn every_key_is_charset_safe_and_round_trips() {
        for ns in [None, Some("acme"), Some("a_b"), Some("x.y-z")] {
            for id in tricky_ids() {
                let key = storage_key(ns, &id);
                assert!(is_key_charset_safe(&key), "{key}");
                assert!(!key.contains("..") || is_plain(&id), "{key}");
                assert_eq!(parse_storage_key(&key), Some((ns.map(str::to_owned), id.clone())), "{key}");
            }
        }
    }

    #[test]
    fn no_two_ids_or_namespaces_share_a_key() {
        let mut seen = HashSet::new();
        let ids: HashSet<String> =
            tricky_ids().into_iter().chain(["b_c".into(), "b~c".into(), "b".into(), "a~b".into()]).collect();
        for ns in [None, Some("a"), Some("a_b"), Some("b")] {
            for id in ids.clone() {
                assert!(seen.insert(storage_key(ns, &id)), "collision for {ns:?}/{id:?}");
            }
        }
    }

    #[test]
    fn naive_escaping_collisions_stay_apart() {
        // Pairs that percent-escaping, slash-replacement or lower-casing would merge.
        let pairs = [("a/b", "a%2Fb"), ("a:b", "a_b"), ("A", "a"), ("a b", "a+b"), ("..", "%2E%2E")];
        for (x, y) in pairs {
            assert_ne!(storage_key(None, x), storage_key(None, y));
        }
    }

    #[test]
    fn validation_messages() {
        assert!(validate_event_id("").is_err());
        assert!(validate_event_id(&"x".repeat(256)).is_err());
        assert!(validate_event_id("a\u{0}b").unwrap_err().message.contains("U+0000"));
        assert!(validate_event_id("a\nb").is_err());
        assert!(validate_event_id(&"x".repeat(255)).is_ok());
        assert!(validate_event_id("🎉 ok").is_ok());
        assert!(validate_namespace("acme-prod_1").is_ok());
        assert!(validate_namespace("a~b").is_err());
        assert!(validate_namespace("..").is_err());
        assert!(validate_namespace(&"n".repeat(65)).is_err());
    }
}
