//! The daemon's view of a package: Go `path` cleaning and `archive/zip`'s read-by-name.
//!
//! The daemon walks the central directory and, for every record, re-opens the file *by
//! name*. That is why a duplicated name hashes the first record's content twice and why a
//! directory record fails with `read <dir>: is a directory`. We replicate it exactly.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use super::error::ReadError;
use super::zipread::RawZip;

/// Go's `path.Clean`.
pub(crate) fn clean(p: &str) -> String {
    if p.is_empty() {
        return ".".into();
    }
    let rooted = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in p.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|last| *last != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            other => parts.push(other),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

/// Go's `fs.ValidPath`: unrooted, slash-separated, no empty, `.` or `..` elements.
pub(crate) fn valid_path(p: &str) -> bool {
    if p == "." {
        return true;
    }
    !p.is_empty() && p.split('/').all(|e| !e.is_empty() && e != "." && e != "..")
}

/// `archive/zip`'s `toValidName`: how a record is indexed for `Open`.
fn to_valid_name(name: &str) -> String {
    let cleaned = clean(&name.replace('\\', "/"));
    let mut p = cleaned.strip_prefix('/').unwrap_or(&cleaned);
    while let Some(rest) = p.strip_prefix("../") {
        p = rest;
    }
    p.to_string()
}

/// Go's `path.Dir`.
fn dir_of(p: &str) -> String {
    match p.rfind('/') {
        Some(i) => clean(&p[..=i]),
        None => ".".into(),
    }
}

#[derive(Clone, Copy)]
enum Node {
    File(usize),
    Dir,
}

/// Name index of an archive, built like `zip.Reader.initFileList` (first record wins).
pub(crate) struct DaemonView<'z> {
    zip: &'z RawZip,
    index: HashMap<String, Node>,
}

/// Name the daemon opens for a record: `path.Join(path.Split(name))`.
pub(crate) fn walked_name(name: &str) -> String {
    if name.is_empty() {
        String::new()
    } else {
        clean(name)
    }
}

impl<'z> DaemonView<'z> {
    pub(crate) fn new(zip: &'z RawZip) -> DaemonView<'z> {
        let mut index = HashMap::new();
        let mut implicit = Vec::new();
        for (i, entry) in zip.entries.iter().enumerate() {
            let name = to_valid_name(&entry.name);
            if name.is_empty() || index.contains_key(&name) {
                continue;
            }
            let mut dir = dir_of(&name);
            while dir != "." && dir != "/" {
                implicit.push(dir.clone());
                dir = dir_of(&dir);
            }
            let node = if entry.is_dir() { Node::Dir } else { Node::File(i) };
            index.insert(name, node);
        }
        for dir in implicit {
            index.entry(dir).or_insert(Node::Dir);
        }
        DaemonView { zip, index }
    }

    /// `zip.Reader.Open(name)` followed by a full read: the record whose bytes come back.
    pub(crate) fn open(&self, name: &str) -> Result<usize, ReadError> {
        if !valid_path(name) {
            return Err(ReadError::InvalidPath(name.to_string()));
        }
        if name == "." {
            return Err(ReadError::IsDirectory(name.to_string()));
        }
        match self.index.get(name) {
            Some(Node::File(i)) => Ok(*i),
            Some(Node::Dir) => Err(ReadError::IsDirectory(name.to_string())),
            None => Err(ReadError::NotFound(name.to_string())),
        }
    }

    /// `decoder.ReadFile(name)`.
    pub(crate) fn read(&self, name: &str) -> Result<Vec<u8>, ReadError> {
        let index = self.open(name)?;
        self.zip.content(index).map_err(|source| ReadError::Entry { name: name.to_string(), source })
    }

    /// The daemon's `Walk` + `ReadFile` loop: for each record in central-directory order,
    /// the name it opens and the SHA-256 of what that read returns.
    pub(crate) fn walk_hashes(&self) -> Result<Vec<(String, [u8; 32])>, ReadError> {
        let mut out = Vec::with_capacity(self.zip.entries.len());
        for entry in &self.zip.entries {
            let name = walked_name(&entry.name);
            let content = self.read(&name)?;
            out.push((name, Sha256::digest(&content).into()));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_matches_go() {
        for (input, want) in [
            ("", "."),
            ("a/b/", "a/b"),
            ("./x", "x"),
            ("a//b/./c/..", "a/b"),
            ("../x", "../x"),
            ("/../x", "/x"),
            ("/", "/"),
            ("_assets/", "_assets"),
        ] {
            assert_eq!(clean(input), want, "clean({input:?})");
        }
    }

    #[test]
    fn valid_path_matches_go() {
        assert!(valid_path("a/b"));
        assert!(valid_path("."));
        assert!(valid_path("tools\\x.py"));
        assert!(!valid_path(""));
        assert!(!valid_path("/etc/x"));
        assert!(!valid_path("../x"));
        assert!(!valid_path("a/"));
    }

    #[test]
    fn valid_name_strips_what_go_strips() {
        assert_eq!(to_valid_name("/etc/x"), "etc/x");
        assert_eq!(to_valid_name("../../x"), "x");
        assert_eq!(to_valid_name("tools\\x.py"), "tools/x.py");
    }
}
