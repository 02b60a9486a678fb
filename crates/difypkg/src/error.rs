//! The errors the crate returns: each says what failed in its own words and keeps its cause as `source()`.
//!
//! A message never repeats its cause's text, so the whole story is the chain (what
//! `{:#}` of `anyhow` prints, or [`chain`]); a cause shown inside parentheses is part of
//! the message instead, and then it is not also a `source()`.

use std::error::Error;
use std::fmt::Write as _;
use std::io;
use std::path::PathBuf;

use thiserror::Error;

use super::yamlcheck::Problem;

/// Bytes that are not a zip archive, in the words of Go's `archive/zip`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("not a valid zip file ({0})")]
pub struct ZipError(pub(crate) &'static str);

/// Why one record's content cannot be decoded.
#[derive(Debug, Error)]
pub enum EntryError {
    #[error("zip: not a valid zip file")]
    Offset,
    #[error("zip: not a valid zip file (bad local header)")]
    LocalHeader,
    #[error("zip: entry data runs past the end of the archive")]
    Truncated,
    #[error("flate")]
    Inflate(#[source] io::Error),
    #[error("zip: unsupported compression algorithm ({0})")]
    Method(u16),
    #[error("unexpected EOF")]
    Size,
    #[error("zip: checksum error")]
    Crc,
}

/// Why the daemon's read of an entry by name fails (`zip.Reader.Open` and a full read).
#[derive(Debug, Error)]
pub enum ReadError {
    #[error("open {0}: invalid argument")]
    InvalidPath(String),
    #[error("read {0}: is a directory")]
    IsDirectory(String),
    #[error("open {0}: file does not exist")]
    NotFound(String),
    #[error("read {name}")]
    Entry { name: String, source: EntryError },
}

/// Why a package checksum cannot be computed the daemon's way.
#[derive(Debug, Error)]
pub enum ChecksumError {
    #[error(transparent)]
    Zip(#[from] ZipError),
    #[error(transparent)]
    Read(#[from] ReadError),
}

/// An entry name the producer rules (spec §3.1) refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum NameError {
    #[error("the name is empty")]
    Empty,
    #[error("names must be printable ASCII")]
    NotPrintable,
    #[error("names must use `/` as separator, never `\\`")]
    Backslash,
    #[error("names must be relative (no leading `/`)")]
    Absolute,
    #[error("the name denotes a directory; only file entries are allowed")]
    Directory,
    #[error("names must not contain empty, `.` or `..` path elements")]
    BadElement,
}

/// One entry [`read_package`](crate::read_package) refuses.
#[derive(Debug, Error)]
pub enum EntryRefusal {
    #[error("`{name}` is a directory entry (the daemon fails with \"read {}: is a directory\")", .name.trim_end_matches('/'))]
    Directory { name: String },
    #[error("entry `{name}`")]
    Name { name: String, source: NameError },
    #[error("entry `{name}` appears more than once (the daemon would read the first copy twice)")]
    Duplicate { name: String },
    #[error("entry `{name}` cannot be read")]
    Data { name: String, source: EntryError },
}

/// Why a package archive cannot be read strictly or written.
#[derive(Debug, Error)]
pub enum ArchiveError {
    #[error("cannot read the archive")]
    Zip(#[source] ZipError),
    /// Every refused entry, in central-directory order.
    #[error("{}", join_chains(.0))]
    Refused(Vec<EntryRefusal>),
    #[error("entry `{name}`")]
    Name { name: String, source: NameError },
    #[error("cannot add `{name}` to the archive")]
    Add { name: String, source: zip::result::ZipError },
    #[error("cannot finish the archive")]
    Finish(#[source] zip::result::ZipError),
}

/// Why a key file or PEM text does not hold a key the daemon would load.
#[derive(Debug, Error)]
pub enum KeyError {
    #[error("no PEM block found (expected `-----BEGIN {want}-----`)")]
    NoPem { want: &'static str },
    #[error("found a `{found}` PEM block, but the {what} must be `{want}` (PKCS#1){hint}")]
    WrongType { found: String, want: &'static str, what: &'static str, hint: &'static str },
    #[error("extra data included in the PEM block: nothing may follow the END line except one line break")]
    TrailingData,
    #[error("not a PKCS#1 RSA public key")]
    NotPublicKey(#[source] pkcs1::der::Error),
    #[error("not a PKCS#1 RSA private key")]
    NotPrivateKey(#[source] pkcs1::der::Error),
    #[error("the key has {0} bits; the daemon refuses keys under 1024 bits")]
    TooSmall(usize),
    #[error("the key has {0} bits; keys over 8192 bits are not supported")]
    TooLarge(usize),
    #[error("unusable RSA public key: the modulus is even")]
    EvenModulus,
    #[error("unusable RSA public key: the exponent must be odd, at least 3 and at most 33 bits")]
    Exponent,
    #[error("the key has {0} bits; signing needs an RSA key of 2048, 2560, 3072, 3584 or 4096 bits")]
    Unsignable(usize),
    /// `ring` refuses the private key; its reason is a short word, shown in the message.
    #[error("unusable RSA private key: {0}")]
    Rejected(ring::error::KeyRejected),
    #[error("RSA signing failed")]
    Signing,
    #[error("key file {}", .path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("key file {}", .path.display())]
    File { path: PathBuf, source: Box<KeyError> },
}

/// Why `keygen` wrote no key pair.
#[derive(Debug, Error)]
pub enum KeygenError {
    #[error(
        "--bits {0}: choose 2048, 2560, 3072, 3584 or 4096 (4096 recommended); the signer (ring) signs only with keys of those sizes"
    )]
    Bits(usize),
    #[error("--name `{0}`: must be a plain file name prefix")]
    Name(String),
    #[error("{} already exists; refusing to overwrite it", .0.display())]
    Exists(PathBuf),
    #[error("--out-dir {}: that path is a file, not a directory", .0.display())]
    NotDirectory(PathBuf),
    #[error("cannot create the directory {}", .path.display())]
    CreateDirectory { path: PathBuf, source: io::Error },
    #[error("cannot write into {}", .path.display())]
    Probe { path: PathBuf, source: io::Error },
    #[error("cannot remove {}", .path.display())]
    RemoveProbe { path: PathBuf, source: io::Error },
    #[error("cannot create {}", .path.display())]
    Create { path: PathBuf, source: io::Error },
    #[error("cannot write {}", .path.display())]
    Write { path: PathBuf, source: io::Error },
    #[error("cannot encode the key")]
    Encode(#[source] pkcs1::der::Error),
    #[error("the generated key failed its self-check, nothing was written")]
    SelfCheck(#[source] KeyError),
    #[error(
        "the generated key failed its self-check, nothing was written: the public key does not verify the private key's signature"
    )]
    SelfCheckMismatch,
}

/// Why a package was not signed.
#[derive(Debug, Error)]
pub enum SignError {
    #[error("refusing to sign")]
    Refused(#[source] ArchiveError),
    #[error("refusing to sign: the package has no manifest.yaml")]
    NoManifest,
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error(transparent)]
    Write(ArchiveError),
}

/// Why a package is not verified.
#[derive(Debug, Error)]
pub enum VerifyError {
    #[error("cannot read the package as a difypkg (zip) archive")]
    Archive(#[source] ZipError),
    #[error("read {0}: is a directory (the package contains directory entries, which the daemon cannot read)")]
    DirectoryEntry(String),
    #[error("cannot read an entry the way the daemon does")]
    Entry(#[source] ReadError),
    #[error("the package is not signed: its zip comment is empty")]
    NotSigned,
    #[error("the zip comment is not a valid signature")]
    Comment(#[source] CommentError),
    #[error("the signature is not valid standard base64")]
    Base64(#[source] base64::DecodeError),
    /// Tampered content, reordered entries, another time or another key.
    #[error("signature does not match the content with any given key")]
    Mismatch,
}

/// Why a zip comment is not the signature JSON (`{Signature string; Time int64}`).
#[derive(Debug, Error)]
pub enum CommentError {
    #[error("invalid JSON ({0})")]
    Json(serde_json::Error),
    #[error("`signature` must be a string, found {0}")]
    Signature(serde_json::Value),
    #[error("`time` must be an integer, found {0}")]
    Time(serde_json::Value),
    #[error("expected a JSON object, found {0}")]
    NotObject(serde_json::Value),
}

/// Why a `.verification.dify.json` would not be accepted.
#[derive(Debug, Error)]
pub enum CategoryError {
    #[error(transparent)]
    Read(ReadError),
    #[error("unknown authorized_category `{0}`")]
    Unknown(String),
    #[error(".verification.dify.json has no authorized_category string")]
    NoCategory,
}

/// Everything a tree, a package or a build breaks, each problem naming its file and field.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{} problem(s) found: {}", .problems.len(), .problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct ValidationError {
    problems: Vec<Problem>,
}

impl ValidationError {
    pub(crate) fn new(problems: Vec<Problem>) -> ValidationError {
        ValidationError { problems }
    }

    /// The problems, in the order the checks found them.
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    pub fn into_problems(self) -> Vec<Problem> {
        self.problems
    }
}

/// The error and its causes, `: `-separated, as one line.
pub(crate) fn chain(error: &(dyn Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let _ = write!(text, ": {e}");
        cause = e.source();
    }
    text
}

fn join_chains<E: Error + 'static>(errors: &[E]) -> String {
    errors.iter().map(|e| chain(e)).collect::<Vec<_>>().join("; ")
}
