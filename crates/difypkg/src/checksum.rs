//! Package checksum and unique identifier, exactly as the daemon computes them (spec §3.5).

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};
use thiserror::Error;

use super::archive::PackageFile;
use super::error::ReadError;
use super::gofs::DaemonView;
use super::patterns;
use super::zipread::RawZip;

/// A plugin unique identifier the daemon's pattern refuses.
#[derive(Debug, Error)]
#[error(
    "plugin unique identifier `{0}` does not match the daemon's pattern \
     `^(?:([a-z0-9_-]{{1,64}})\\/)?([a-z0-9_-]{{1,255}}):([0-9]{{1,4}})(\\.[0-9]{{1,4}}){{1,3}}(-\\w{{1,16}})?@[a-f0-9]{{32,64}}$`"
)]
pub(crate) struct IdentifierError(pub(crate) String);

/// Checksum from (name, SHA-256 of content) pairs. Later pairs with the same name replace
/// earlier ones, like the daemon's map; the daemon always stores the same bytes for both.
pub(crate) fn checksum_of_hashes<'a>(hashes: impl IntoIterator<Item = (&'a str, [u8; 32])>) -> String {
    // A BTreeMap over `str` iterates in byte-wise order, which is Go's `sort.Strings`.
    let by_name: BTreeMap<&str, [u8; 32]> = hashes.into_iter().collect();
    let mut buf = Vec::with_capacity(by_name.len() * 64);
    for (name, hash) in by_name {
        buf.extend_from_slice(&Sha256::digest(name.as_bytes()));
        buf.extend_from_slice(&hash);
    }
    hex::encode(Sha256::digest(&buf))
}

/// Checksum of entries we are about to write (names already validated and unique).
pub(crate) fn checksum_of_entries(entries: &[PackageFile]) -> String {
    let hashes: Vec<(&str, [u8; 32])> =
        entries.iter().map(|e| (e.name.as_str(), Sha256::digest(&e.data).into())).collect();
    checksum_of_hashes(hashes)
}

/// Checksum of an existing archive, reading it the daemon's way (errors included, e.g.
/// "read _assets: is a directory").
pub(crate) fn checksum_of_zip(zip: &RawZip) -> Result<String, ReadError> {
    let hashes = DaemonView::new(zip).walk_hashes()?;
    Ok(checksum_of_hashes(hashes.iter().map(|(name, hash)| (name.as_str(), *hash))))
}

/// `<author>/<name>:<version>@<checksum>` (the author part is dropped when empty).
pub(crate) fn unique_identifier(author: &str, name: &str, version: &str, checksum: &str) -> String {
    if author.is_empty() {
        format!("{name}:{version}@{checksum}")
    } else {
        format!("{author}/{name}:{version}@{checksum}")
    }
}

/// Builds the identifier and checks it against the daemon's identifier pattern.
pub(crate) fn checked_unique_identifier(
    author: &str,
    name: &str,
    version: &str,
    checksum: &str,
) -> Result<String, IdentifierError> {
    let id = unique_identifier(author, name, version, checksum);
    if patterns::is_unique_identifier(&id) {
        Ok(id)
    } else {
        Err(IdentifierError(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_of_input_does_not_matter() {
        let a = [("b", [1u8; 32]), ("a", [2u8; 32])];
        let b = [("a", [2u8; 32]), ("b", [1u8; 32])];
        assert_eq!(checksum_of_hashes(a), checksum_of_hashes(b));
    }

    #[test]
    fn identifier_is_checked() {
        let sum = "0".repeat(64);
        assert!(checked_unique_identifier("acme", "stateful_tool", "0.0.1", &sum).is_ok());
        assert!(checked_unique_identifier("acme", "stateful_tool", "v0.0.1", &sum).is_err());
        assert_eq!(unique_identifier("", "x", "1.0.0", "ab"), "x:1.0.0@ab");
    }
}
