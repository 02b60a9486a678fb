//! Validation of what a client sends: keys, precondition headers, TTL headers, bodies.

use axum::http::HeaderMap;

use super::batch::Precondition;
use super::error::ApiError;

/// Longest accepted key, in bytes.
pub(crate) const MAX_KEY_LEN: usize = 1024;
/// Largest accepted value, in bytes (1 MiB).
pub(crate) const MAX_VALUE_LEN: usize = 1_048_576;
/// Longest accepted TTL (100 years); keeps `now + ttl` far from overflow.
const MAX_TTL_MS: u64 = 100 * 365 * 24 * 3600 * 1000;

pub(crate) use event_store::kv_wire::{DEADLINE_MS, TTL_MS, TTL_SECONDS};

/// Checks the raw (still percent-encoded) path segment after `/state/`. Rejecting `%`
/// outright means no decoded form (`%2F`, `%00`, `%20`, …) can ever reach the store, and
/// the key a client sees is byte-for-byte the key on disk.
pub(crate) fn validate_key(raw: &str) -> Result<&str, ApiError> {
    let bad = |why: &str| Err(ApiError::bad_key(why));
    if raw.is_empty() {
        return bad("key is empty");
    }
    if raw.len() > MAX_KEY_LEN {
        return bad("key is longer than 1024 bytes");
    }
    if raw == "." || raw == ".." {
        return bad("'.' and '..' are not keys");
    }
    if !raw.bytes().all(is_unreserved) {
        return bad("key may only contain A-Z a-z 0-9 . _ ~ - (no percent-encoding)");
    }
    Ok(raw)
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-')
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Result<Option<&'h str>, ApiError> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::bad_request("bad_header", format!("header {name} given more than once")));
    }
    first
        .to_str()
        .map(|s| Some(s.trim()))
        .map_err(|_| ApiError::bad_request("bad_header", format!("header {name} is not ASCII")))
}

/// Reads `If-Match` / `If-None-Match`. `allow_if_none_match` is false for DELETE, where
/// "delete only if absent" means nothing.
pub(crate) fn precondition(headers: &HeaderMap, allow_if_none_match: bool) -> Result<Precondition, ApiError> {
    let if_match = header(headers, "if-match")?;
    let if_none_match = header(headers, "if-none-match")?;
    let bad = |msg: &str| Err(ApiError::bad_request("bad_precondition", msg));
    match (if_match, if_none_match) {
        (Some(_), Some(_)) => bad("send If-Match or If-None-Match, not both"),
        (None, None) => Ok(Precondition::None),
        (None, Some(_)) if !allow_if_none_match => bad("If-None-Match is not supported here"),
        (None, Some("*")) => Ok(Precondition::IfAbsent),
        (None, Some(_)) => bad("only 'If-None-Match: *' is supported"),
        (Some("*"), None) => Ok(Precondition::IfExists),
        (Some(tag), None) => parse_etag(tag)
            .map(Precondition::IfRev)
            .ok_or_else(|| ApiError::bad_request("bad_precondition", "If-Match must be \"<revision>\" or *")),
    }
}

/// `"123"` or `123` → 123. Our ETags are always decimal revision numbers.
pub(crate) fn parse_etag(tag: &str) -> Option<u64> {
    let inner = match tag.strip_prefix('"') {
        Some(rest) => rest.strip_suffix('"')?,
        None => tag,
    };
    if inner.is_empty() || !inner.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    inner.parse().ok()
}

/// `KV-TTL-Ms` or `KV-TTL-Seconds` → milliseconds; absent → no expiry.
pub(crate) fn ttl(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let ms = header(headers, TTL_MS)?;
    let secs = header(headers, TTL_SECONDS)?;
    let number = |s: &str| -> Result<u64, ApiError> {
        let n = s.parse::<u64>().ok().filter(|n| *n > 0 && s.bytes().all(|b| b.is_ascii_digit()));
        n.ok_or_else(|| ApiError::bad_request("bad_ttl", "TTL must be a positive whole number"))
    };
    let ttl_ms = match (ms, secs) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request("bad_ttl", "send KV-TTL-Ms or KV-TTL-Seconds, not both"))
        }
        (None, None) => return Ok(None),
        (Some(ms), None) => number(ms)?,
        (None, Some(s)) => number(s)?.saturating_mul(1000),
    };
    if ttl_ms > MAX_TTL_MS {
        return Err(ApiError::bad_request("bad_ttl", "TTL is longer than 100 years"));
    }
    Ok(Some(ttl_ms))
}

/// `KV-Deadline-Ms` → the unix ms after which the write must be refused; absent → none.
pub(crate) fn deadline(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(v) = header(headers, DEADLINE_MS)? else { return Ok(None) };
    let n = v.parse::<u64>().ok().filter(|_| v.bytes().all(|b| b.is_ascii_digit()));
    n.map(Some).ok_or_else(|| ApiError::bad_request("bad_deadline", "KV-Deadline-Ms must be unix milliseconds"))
}

/// The body must be one JSON value in UTF-8; checked without building it (no allocation per
/// node). UTF-8 is checked first: skipping over a string, serde_json does not validate it.
pub(crate) fn validate_json(body: &[u8]) -> Result<(), ApiError> {
    let text = std::str::from_utf8(body).map_err(|e| {
        ApiError::bad_request("invalid_json", format!("body is not valid UTF-8 (byte {})", e.valid_up_to()))
    })?;
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map(|_| ())
        .map_err(|e| ApiError::bad_request("invalid_json", format!("body is not valid JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn keys() {
        assert!(validate_key("evt_ABC-1.2~x").is_ok());
        assert!(validate_key(&"a".repeat(MAX_KEY_LEN)).is_ok());
        for bad in ["", ".", "..", "a/b", "a%2Fb", "a b", "a:b", "é", "a\0"] {
            assert!(validate_key(bad).is_err(), "{bad:?} accepted");
        }
        assert!(validate_key(&"a".repeat(MAX_KEY_LEN + 1)).is_err());
    }

    #[test]
    fn preconditions() {
        use Precondition::*;
        assert_eq!(precondition(&headers(&[]), true).unwrap(), None);
        assert_eq!(precondition(&headers(&[("if-none-match", "*")]), true).unwrap(), IfAbsent);
        assert_eq!(precondition(&headers(&[("if-match", "\"7\"")]), true).unwrap(), IfRev(7));
        assert_eq!(precondition(&headers(&[("if-match", "7")]), true).unwrap(), IfRev(7));
        assert_eq!(precondition(&headers(&[("if-match", "*")]), true).unwrap(), IfExists);
        for bad in [
            vec![("if-match", "\"x\"")],
            vec![("if-match", "\"7")],
            vec![("if-match", "-1")],
            vec![("if-none-match", "\"7\"")],
            vec![("if-match", "1"), ("if-none-match", "*")],
            vec![("if-match", "1"), ("if-match", "2")],
        ] {
            assert!(precondition(&headers(&bad), true).is_err(), "{bad:?}");
        }
        assert!(precondition(&headers(&[("if-none-match", "*")]), false).is_err());
    }

    #[test]
    fn ttls() {
        assert_eq!(ttl(&headers(&[])).unwrap(), None);
        assert_eq!(ttl(&headers(&[(TTL_MS, "300")])).unwrap(), Some(300));
        assert_eq!(ttl(&headers(&[(TTL_SECONDS, "2")])).unwrap(), Some(2000));
        for bad in ["0", "-1", "+5", "1.5", "", "99999999999999999999999"] {
            assert!(ttl(&headers(&[(TTL_MS, bad)])).is_err(), "{bad:?}");
        }
        assert!(ttl(&headers(&[(TTL_MS, "1"), (TTL_SECONDS, "1")])).is_err());
        assert!(ttl(&headers(&[(TTL_SECONDS, "9999999999999")])).is_err());
    }

    #[test]
    fn deadlines() {
        assert_eq!(deadline(&headers(&[])).unwrap(), None);
        assert_eq!(deadline(&headers(&[(DEADLINE_MS, "1700000000123")])).unwrap(), Some(1_700_000_000_123));
        for bad in ["", "-1", "+5", "1.5", "soon", "99999999999999999999999"] {
            assert!(deadline(&headers(&[(DEADLINE_MS, bad)])).is_err(), "{bad:?}");
        }
        assert!(deadline(&headers(&[(DEADLINE_MS, "1"), (DEADLINE_MS, "2")])).is_err());
    }

    #[test]
    fn json_bodies() {
        assert!(validate_json(br#"{"a":[1,2,{"b":null}]}"#).is_ok());
        assert!(validate_json(b"\"s\"").is_ok());
        for bad in [&b""[..], b"{", b"abc", b"{} {}", b"\xff", b"\"\xff\"", b"{\"a\":\"\xc3\x28\"}"] {
            assert!(validate_json(bad).is_err());
        }
    }
}
