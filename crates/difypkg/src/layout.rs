//! Package layout: entry-name rules, the allow-listed files, and where their bytes come from.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::archive::{check_entry_name, PackageFile};
use super::error::NameError;
use super::yamlcheck::Problem;

/// Files every package carries at its root besides the declared YAML, icons and binaries.
pub(crate) const FIXED_FILES: [&str; 5] = ["manifest.yaml", "README.md", "PRIVACY.md", "requirements.txt", "main.py"];

/// Name of the signer's category file (spec §4.3).
pub(crate) const VERIFICATION_FILE: &str = ".verification.dify.json";

/// The daemon's default `MAX_PLUGIN_PACKAGE_SIZE`, applied to the uncompressed total.
pub(crate) const MAX_UNCOMPRESSED: u64 = 52_428_800;

/// Dify API's default upload limit (`PLUGIN_MAX_PACKAGE_SIZE`) on the compressed file.
pub(crate) const WARN_COMPRESSED: u64 = 15 * 1024 * 1024;

/// Why a file of a tree or a file set cannot be used (becomes a [`Problem`]'s message).
#[derive(Debug, Error)]
pub(crate) enum FileError {
    #[error(transparent)]
    Name(#[from] NameError),
    #[error("{0} is not in the package")]
    Absent(String),
    #[error("{0} exists but is not a regular file")]
    NotFile(String),
    #[error("cannot inspect {name}")]
    Inspect { name: String, source: io::Error },
    #[error("cannot read {shown}")]
    Read { shown: String, source: io::Error },
}

/// Where the bytes of one package file come from.
#[derive(Clone, Debug)]
pub(crate) enum Source {
    Disk(PathBuf),
    Memory(Vec<u8>),
}

/// A set of package files keyed by entry name; iteration is byte-wise ascending, the
/// order the official packager writes.
#[derive(Default, Debug)]
pub(crate) struct FileSet {
    files: BTreeMap<String, (u64, Source)>,
}

impl FileSet {
    pub(crate) fn insert_disk(&mut self, name: &str, path: PathBuf, size: u64) {
        self.files.insert(name.to_string(), (size, Source::Disk(path)));
    }

    pub(crate) fn insert_memory(&mut self, name: &str, data: Vec<u8>) {
        let size = data.len() as u64;
        self.files.insert(name.to_string(), (size, Source::Memory(data)));
    }

    pub(crate) fn size_of(&self, name: &str) -> Option<u64> {
        self.files.get(name).map(|(size, _)| *size)
    }

    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }

    pub(crate) fn total_size(&self) -> u64 {
        self.files.values().map(|(size, _)| *size).sum()
    }

    /// The `n` largest files, biggest first (named in the oversize message, like the CLI).
    pub(crate) fn largest(&self, n: usize) -> Vec<(&str, u64)> {
        let mut all: Vec<(&str, u64)> = self.files.iter().map(|(k, v)| (k.as_str(), v.0)).collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        all.truncate(n);
        all
    }

    pub(crate) fn read(&self, name: &str) -> Result<Vec<u8>, FileError> {
        match self.files.get(name) {
            None => Err(FileError::Absent(name.to_string())),
            Some((_, Source::Memory(data))) => Ok(data.clone()),
            Some((_, Source::Disk(path))) => {
                fs::read(path).map_err(|source| FileError::Read { shown: path.display().to_string(), source })
            }
        }
    }

    /// Every file with its bytes, in entry order.
    pub(crate) fn to_entries(&self) -> Result<Vec<PackageFile>, FileError> {
        self.names().map(|name| Ok(PackageFile::new(name, self.read(name)?))).collect()
    }
}

/// Read access to a plugin tree (a source directory or a set of package files).
pub(crate) trait Tree {
    /// Size of regular file `name`; `Ok(None)` when absent, `Err` when unusable.
    fn stat(&self, name: &str) -> Result<Option<u64>, FileError>;
    fn read(&self, name: &str) -> Result<Vec<u8>, FileError>;
}

impl Tree for FileSet {
    fn stat(&self, name: &str) -> Result<Option<u64>, FileError> {
        Ok(self.size_of(name))
    }
    fn read(&self, name: &str) -> Result<Vec<u8>, FileError> {
        FileSet::read(self, name)
    }
}

/// A source directory; names are validated before they touch the file system.
pub(crate) struct DirTree<'a> {
    pub(crate) root: &'a Path,
}

impl DirTree<'_> {
    pub(crate) fn path_of(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }
}

impl Tree for DirTree<'_> {
    fn stat(&self, name: &str) -> Result<Option<u64>, FileError> {
        check_entry_name(name)?;
        match fs::metadata(self.path_of(name)) {
            Ok(meta) if meta.is_file() => Ok(Some(meta.len())),
            Ok(_) => Err(FileError::NotFile(name.to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(FileError::Inspect { name: name.to_string(), source }),
        }
    }
    fn read(&self, name: &str) -> Result<Vec<u8>, FileError> {
        check_entry_name(name)?;
        fs::read(self.path_of(name)).map_err(|source| FileError::Read { shown: name.to_string(), source })
    }
}

/// Every regular file under `root` (an unzipped package), keyed by `/`-joined relative
/// name. Symlinks and non-UTF-8 names are reported (against `root`), not followed.
pub(crate) fn scan_dir(root: &Path) -> Result<FileSet, Vec<Problem>> {
    let mut set = FileSet::default();
    let mut problems = Vec::new();
    let mut stack = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        let listing = match fs::read_dir(&dir) {
            Ok(listing) => listing,
            Err(e) => {
                problems.push(format!("cannot list {}: {e}", dir.display()));
                continue;
            }
        };
        for item in listing {
            let item = match item {
                Ok(item) => item,
                Err(e) => {
                    problems.push(format!("cannot list {}: {e}", dir.display()));
                    continue;
                }
            };
            let Some(file_name) = item.file_name().to_str().map(str::to_string) else {
                problems.push(format!("{}: the name is not UTF-8", item.path().display()));
                continue;
            };
            let name = format!("{prefix}{file_name}");
            match fs::symlink_metadata(item.path()) {
                Ok(meta) if meta.is_dir() => stack.push((item.path(), format!("{name}/"))),
                Ok(meta) if meta.is_file() => set.insert_disk(&name, item.path(), meta.len()),
                Ok(_) => problems.push(format!("{name}: not a regular file (symlink or special)")),
                Err(e) => problems.push(format!("{name}: {e}")),
            }
        }
    }
    if problems.is_empty() {
        Ok(set)
    } else {
        Err(problems.into_iter().map(|e| Problem::new(root.display().to_string(), "", e)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names() {
        for ok in ["manifest.yaml", "_assets/icon.svg", "bin/stateful-tool-amd64", ".x"] {
            assert!(check_entry_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "/etc/x", "../x", "a/../b", "a//b", "./x", "dir/", "a\\b", "é.txt"] {
            assert!(check_entry_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn file_set_is_byte_wise_sorted() {
        let mut set = FileSet::default();
        for name in ["main.py", "README.md", "_assets/icon.svg", "PRIVACY.md"] {
            set.insert_memory(name, vec![]);
        }
        let names: Vec<&str> = set.names().collect();
        assert_eq!(names, ["PRIVACY.md", "README.md", "_assets/icon.svg", "main.py"]);
    }
}
