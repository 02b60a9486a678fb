//! Verification exactly as the daemon does it (spec §4.5), with reasons a person can act on.

use serde_json::Value;

use super::checksum::{checksum_of_zip, unique_identifier};
use super::error::{CategoryError, ChecksumError, CommentError, ReadError, VerifyError};
use super::gofs::DaemonView;
use super::keys::{go_std_base64, PublicKey};
use super::layout::VERIFICATION_FILE;
use super::sign::Category;
use super::zipread::RawZip;

/// Category as the daemon would report it.
#[derive(Debug)]
pub enum CategoryInfo {
    /// `authorized_category` from `.verification.dify.json`.
    Declared(Category),
    /// No verification file: the daemon reports `langgenius` ("historical reason").
    Missing,
    /// The file exists but Dify would not accept it.
    Invalid(CategoryError),
}

/// Successful verification.
#[derive(Debug)]
pub struct Verified {
    /// Index into the key list that matched.
    pub key_index: usize,
    pub time: i64,
    pub category: CategoryInfo,
}

/// Everything `verify` reports about a package.
pub struct Verification {
    pub checksum: Result<String, ChecksumError>,
    pub identifier: Option<String>,
    pub result: Result<Verified, VerifyError>,
}

/// Parses the zip comment like Go's `json.Unmarshal` into `{Signature string; Time int64}`:
/// keys match case-insensitively, the last occurrence wins, unknown members are ignored.
pub(crate) fn parse_comment(comment: &[u8]) -> Result<(String, i64), VerifyError> {
    if comment.is_empty() {
        return Err(VerifyError::NotSigned);
    }
    let bad = VerifyError::Comment;
    let value: Value = serde_json::from_slice(comment).map_err(|e| bad(CommentError::Json(e)))?;
    let (mut signature, mut time) = (String::new(), 0i64);
    match value {
        Value::Null => {}
        Value::Object(members) => {
            for (key, v) in members {
                if key.eq_ignore_ascii_case("signature") {
                    match v {
                        Value::String(s) => signature = s,
                        Value::Null => {}
                        other => return Err(bad(CommentError::Signature(other))),
                    }
                } else if key.eq_ignore_ascii_case("time") {
                    match v {
                        Value::Number(n) if n.as_i64().is_some() => time = n.as_i64().unwrap_or(0),
                        Value::Null => {}
                        other => return Err(bad(CommentError::Time(other))),
                    }
                }
            }
        }
        other => return Err(bad(CommentError::NotObject(other))),
    }
    Ok((signature, time))
}

fn category_of(view: &DaemonView) -> CategoryInfo {
    let text = match view.read(VERIFICATION_FILE) {
        Ok(text) => text,
        Err(ReadError::NotFound(_)) => return CategoryInfo::Missing,
        Err(e) => return CategoryInfo::Invalid(CategoryError::Read(e)),
    };
    let parsed: Result<Value, _> = serde_json::from_slice(&text);
    match parsed.as_ref().ok().and_then(|v| v.get("authorized_category")).and_then(Value::as_str) {
        Some(c) => match Category::from_name(c) {
            Some(category) => CategoryInfo::Declared(category),
            None => CategoryInfo::Invalid(CategoryError::Unknown(c.to_string())),
        },
        None => CategoryInfo::Invalid(CategoryError::NoCategory),
    }
}

fn identifier_of(view: &DaemonView, checksum: &str) -> Option<String> {
    let manifest: yaml_serde::Value = yaml_serde::from_slice(&view.read("manifest.yaml").ok()?).ok()?;
    let field = |k: &str| manifest.get(k).and_then(yaml_serde::Value::as_str).map(str::to_string);
    Some(unique_identifier(&field("author")?, &field("name")?, &field("version")?, checksum))
}

fn check_signature(zip: &RawZip, view: &DaemonView, keys: &[PublicKey]) -> Result<Verified, VerifyError> {
    let hashes = view.walk_hashes().map_err(|e| match e {
        ReadError::IsDirectory(name) => VerifyError::DirectoryEntry(name),
        other => VerifyError::Entry(other),
    })?;
    let (signature, time) = parse_comment(&zip.comment)?;
    let mut data: Vec<u8> = hashes.iter().flat_map(|(_, h)| h.iter().copied()).collect();
    data.extend_from_slice(time.to_string().as_bytes());
    let raw = go_std_base64(signature.as_bytes()).map_err(VerifyError::Base64)?;
    let key_index = keys.iter().position(|key| key.verify_pkcs1_sha256(&data, &raw)).ok_or(VerifyError::Mismatch)?;
    Ok(Verified { key_index, time, category: category_of(view) })
}

/// Verifies package bytes against `keys` (tried in order) and computes its checksum.
pub fn verify_bytes(bytes: Vec<u8>, keys: &[PublicKey]) -> Verification {
    let zip = match RawZip::parse(bytes) {
        Ok(zip) => zip,
        Err(e) => {
            return Verification { checksum: Err(e.into()), identifier: None, result: Err(VerifyError::Archive(e)) }
        }
    };
    let view = DaemonView::new(&zip);
    let checksum = checksum_of_zip(&zip).map_err(ChecksumError::from);
    let identifier = checksum.as_ref().ok().and_then(|c| identifier_of(&view, c));
    Verification { result: check_signature(&zip, &view, keys), checksum, identifier }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comment_parsing_follows_go() {
        assert_eq!(parse_comment(br#"{"signature":"QQ==","time":5}"#).unwrap(), ("QQ==".into(), 5));
        assert_eq!(parse_comment(br#"{ "Time": 7, "extra": 1, "SIGNATURE": "x" }"#).unwrap(), ("x".into(), 7));
        assert_eq!(parse_comment(b"null").unwrap(), (String::new(), 0));
        for bad in [&b""[..], b"{", br#"{"time":"5"}"#, br#"{"time":1.5}"#, b"[]"] {
            assert!(matches!(parse_comment(bad), Err(VerifyError::Comment(_) | VerifyError::NotSigned)), "{bad:?}");
        }
    }
}
