//! Signing exactly as spec §4.4: verification file last, D = hashes ‖ time, PKCS#1 v1.5.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use sha2::{Digest, Sha256};

use super::archive::{read_package, write_zip, PackageFile};
use super::error::SignError;
use super::keys::PrivateKey;
use super::layout::VERIFICATION_FILE;

/// `authorized_category` values (`decoder/entities.go`), always written in lower case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    Langgenius,
    Partner,
    Community,
}

impl Category {
    /// The category an `authorized_category` value names (lower case only, as Dify accepts it).
    pub fn from_name(name: &str) -> Option<Category> {
        [Category::Langgenius, Category::Partner, Category::Community].into_iter().find(|c| c.as_str() == name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Category::Langgenius => "langgenius",
            Category::Partner => "partner",
            Category::Community => "community",
        }
    }
}

/// Go's compact JSON of the verification object, e.g. `{"authorized_category":"community"}`.
pub(crate) fn verification_json(category: Category) -> String {
    format!("{{\"authorized_category\":\"{}\"}}", category.as_str())
}

/// `D = SHA-256(c_1) ‖ … ‖ SHA-256(c_n) ‖ decimal(T)` (spec §4.2).
pub(crate) fn signed_data<'a>(contents: impl IntoIterator<Item = &'a [u8]>, time: i64) -> Vec<u8> {
    let mut data = Vec::new();
    for content in contents {
        data.extend_from_slice(&Sha256::digest(content));
    }
    data.extend_from_slice(time.to_string().as_bytes());
    data
}

/// The zip comment, byte-identical to what the daemon signer writes.
pub(crate) fn comment_json(signature: &[u8], time: i64) -> String {
    format!("{{\"signature\":\"{}\",\"time\":{time}}}", STANDARD.encode(signature))
}

/// Result of signing a list of entries.
pub struct Signed {
    /// Original entries (any old verification file removed) plus the new one, last.
    pub entries: Vec<PackageFile>,
    pub signature: Vec<u8>,
    pub comment: String,
}

/// Signs `entries` in their order. RSASSA-PKCS1-v1_5 with SHA-256 is deterministic, so
/// the same key, entries, category and time always give the same comment.
pub(crate) fn sign_entries(
    entries: Vec<PackageFile>,
    key: &PrivateKey,
    category: Category,
    time: i64,
) -> Result<Signed, SignError> {
    // A second verification file would make the daemon read the first copy twice.
    let mut entries: Vec<PackageFile> = entries.into_iter().filter(|e| e.name != VERIFICATION_FILE).collect();
    entries.push(PackageFile::new(VERIFICATION_FILE, verification_json(category)));
    let data = signed_data(entries.iter().map(|e| e.data.as_slice()), time);
    // Computed by `ring`, whose private-key operations are constant-time.
    let signature = key.sign_pkcs1_sha256(&data)?;
    let comment = comment_json(&signature, time);
    Ok(Signed { entries, signature, comment })
}

/// Signs a package: reads it strictly (no directory entries, duplicates or unsafe names),
/// keeps the entries' bytes and order, and returns the new archive with its details.
pub fn sign_package(
    bytes: Vec<u8>,
    key: &PrivateKey,
    category: Category,
    time: i64,
) -> Result<(Vec<u8>, Signed), SignError> {
    let package = read_package(bytes).map_err(SignError::Refused)?;
    if !package.entries.iter().any(|e| e.name == "manifest.yaml") {
        return Err(SignError::NoManifest);
    }
    let signed = sign_entries(package.entries, key, category, time)?;
    let zip = write_zip(&signed.entries, signed.comment.as_bytes()).map_err(SignError::Write)?;
    Ok((zip, signed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_match_the_daemon() {
        assert_eq!(verification_json(Category::Community).len(), 35);
        assert_eq!(comment_json(&[0xff, 0x00], 1700000000), "{\"signature\":\"/wA=\",\"time\":1700000000}");
        let d = signed_data([b"a".as_slice(), b"b".as_slice()], 12);
        assert_eq!(d.len(), 2 * 32 + 2);
        assert!(d.ends_with(b"12"));
    }
}
