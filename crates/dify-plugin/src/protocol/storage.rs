//! The plugin's persistent key-value storage in Dify, reached by backwards calls of type `storage` (values hex-encoded, as the Python SDK sends them).

use serde_json::{json, Value};

use super::backwards::BackwardsError;
use super::session::Session;

/// Storage calls made through one session (`Session::storage`). Dify keeps the values per
/// plugin, across sessions and restarts.
#[derive(Clone, Copy)]
pub struct Storage<'s> {
    session: &'s Session,
}

// Here rather than in session.rs, so the session knows nothing of storage (no import circle).
impl Session {
    /// The plugin's persistent key-value storage in Dify, through this session.
    pub fn storage(&self) -> Storage<'_> {
        Storage { session: self }
    }
}

impl<'s> Storage<'s> {
    /// Stores `value` under `key`.
    pub async fn set(&self, key: &str, value: &[u8]) -> Result<(), BackwardsError> {
        let answer = self.answer(json!({"opt": "set", "key": key, "value": to_hex(value)})).await?;
        expect_ok(answer)
    }

    /// The value stored under `key` (Dify answers an `error` when there is none).
    pub async fn get(&self, key: &str) -> Result<Vec<u8>, BackwardsError> {
        match self.answer(json!({"opt": "get", "key": key})).await? {
            Value::String(hex) => from_hex(&hex),
            other => Err(BackwardsError::Unexpected(format!("storage get answered {other}, not a hex string"))),
        }
    }

    /// Removes `key`.
    pub async fn del(&self, key: &str) -> Result<(), BackwardsError> {
        let answer = self.answer(json!({"opt": "del", "key": key})).await?;
        expect_ok(answer)
    }

    /// Whether a value is stored under `key`.
    pub async fn exist(&self, key: &str) -> Result<bool, BackwardsError> {
        match self.answer(json!({"opt": "exist", "key": key})).await? {
            Value::Bool(b) => Ok(b),
            other => Err(BackwardsError::Unexpected(format!("storage exist answered {other}, not a boolean"))),
        }
    }

    /// The `data` member of the call's first `response` (`{"data": …}`), once the daemon's
    /// `end` has come, so no line of the answer is left unread.
    async fn answer(&self, request: Value) -> Result<Value, BackwardsError> {
        let responses = self.session.invoke("storage", &request).await?;
        let first = responses.into_iter().next();
        match first {
            Some(Value::Object(mut fields)) => fields
                .remove("data")
                .ok_or_else(|| BackwardsError::Unexpected("a storage response without data".into())),
            Some(other) => {
                Err(BackwardsError::Unexpected(format!("a storage response that is not an object: {other}")))
            }
            None => Err(BackwardsError::Unexpected("the storage call ended without a response".into())),
        }
    }
}

fn expect_ok(answer: Value) -> Result<(), BackwardsError> {
    match answer.as_str() {
        Some("ok") => Ok(()),
        _ => Err(BackwardsError::Unexpected(format!("storage answered {answer}, not \"ok\""))),
    }
}

fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

fn from_hex(text: &str) -> Result<Vec<u8>, BackwardsError> {
    let bad = || BackwardsError::Unexpected(format!("a storage value that is not hex: {} chars", text.len()));
    if text.len() % 2 != 0 {
        return Err(bad());
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    text.as_bytes()
        .chunks_exact(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_what_is_not_hex() {
        assert_eq!(to_hex(b"hello"), "68656c6c6f");
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(from_hex(&to_hex(&all)).unwrap(), all);
        assert_eq!(from_hex("68656C6C6F").unwrap(), b"hello", "upper case is hex too");
        assert!(from_hex("686").is_err());
        assert!(from_hex("zz").is_err());
        assert!(from_hex("é1").is_err());
    }
}
