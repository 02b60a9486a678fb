//! Validation entry points: a plugin source tree, an unzipped package, or package bytes.
//!
//! Every check runs to the end and all problems are reported together, each naming the
//! file and field, so one run shows everything to fix.

use std::collections::BTreeSet;
use std::path::Path;

use super::arch::Arch;
use super::archive::read_package;
use super::decl_check::{check_declarations, Declared};
use super::error::{chain, ValidationError};
use super::layout::{scan_dir, DirTree, FileSet, Tree, FIXED_FILES, MAX_UNCOMPRESSED, VERIFICATION_FILE};
use super::manifest_rules::ManifestInfo;
use super::trigger_rules::{check_event, check_trigger_provider};
use super::yamlcheck::Checker;

pub use super::yamlcheck::Problem;

/// Summary of a tree that passed validation.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub author: String,
    pub name: String,
    pub version: String,
    /// Entry names, byte-wise ascending.
    pub files: Vec<String>,
    /// Uncompressed bytes of all files.
    pub total_size: u64,
    pub(crate) warnings: Vec<String>,
}

/// Rejects a total uncompressed size over the daemon's limit, naming the largest files.
pub(crate) fn check_sizes(set: &FileSet, problems: &mut Vec<Problem>) {
    let total = set.total_size();
    if total > MAX_UNCOMPRESSED {
        let largest: Vec<String> = set.largest(5).iter().map(|(n, s)| format!("{n} ({s} bytes)")).collect();
        problems.push(Problem::new(
            "(package)",
            "size",
            format!("uncompressed total is {total} bytes, over the daemon's limit of {MAX_UNCOMPRESSED} bytes (50 MiB); largest files: {}", largest.join(", ")),
        ));
    }
}

pub(crate) fn report_for(info: &ManifestInfo, set: &FileSet, warnings: Vec<String>) -> Report {
    Report {
        author: info.author.clone(),
        name: info.name.clone(),
        version: info.version.clone(),
        files: set.names().map(str::to_string).collect(),
        total_size: set.total_size(),
        warnings,
    }
}

/// Files of a source tree that go into the package (binaries excluded).
pub(crate) fn source_files(tree: &DirTree, declared: &Declared) -> FileSet {
    let mut set = FileSet::default();
    let names = FIXED_FILES.iter().map(|s| s.to_string()).chain(declared.referenced.iter().cloned());
    for name in names {
        if let Ok(Some(size)) = tree.stat(&name) {
            set.insert_disk(&name, tree.path_of(&name), size);
        }
    }
    set
}

/// Validates a plugin source directory (declarations, icons, fixed files, size) without
/// binaries. Reusable as a marketplace pre-check.
pub fn validate_plugin_dir(dir: &Path) -> Result<Report, ValidationError> {
    plugin_dir_report(dir).map_err(ValidationError::new)
}

fn plugin_dir_report(dir: &Path) -> Result<Report, Vec<Problem>> {
    if !dir.is_dir() {
        return Err(vec![Problem::new(dir.display().to_string(), "", "is not a directory")]);
    }
    let tree = DirTree { root: dir };
    let (mut problems, mut warnings) = (Vec::new(), Vec::new());
    let declared = check_declarations(&tree, &mut problems, &mut warnings);
    let Some(declared) = declared.filter(|_| problems.is_empty()) else {
        return Err(problems);
    };
    let set = source_files(&tree, &declared);
    check_sizes(&set, &mut problems);
    if problems.is_empty() {
        Ok(report_for(&declared.info, &set, warnings))
    } else {
        Err(problems)
    }
}

/// Validates the files of a built package: names, declarations, nothing outside the
/// layout, binaries matching `meta.arch`, size.
pub(crate) fn validate_package_files(set: &FileSet) -> Result<Report, Vec<Problem>> {
    let (mut problems, mut warnings) = (Vec::new(), Vec::new());
    for name in set.names() {
        if let Err(e) = super::archive::check_entry_name(name) {
            problems.push(Problem::new(name, "", e.to_string()));
        }
    }
    let Some(declared) = check_declarations(set, &mut problems, &mut warnings) else {
        return Err(problems);
    };
    let mut packaged = Vec::new();
    for name in set.names() {
        let arch = [Arch::Amd64, Arch::Arm64].into_iter().find(|a| a.binary_entry() == name);
        if let Some(arch) = arch {
            packaged.push(arch);
        } else if !FIXED_FILES.contains(&name) && !declared.referenced.contains(name) && name != VERIFICATION_FILE {
            problems.push(Problem::new(
                name,
                "",
                "is not part of the package layout (fixed files, declared YAML and icons, bin/stateful-tool-<arch>)",
            ));
        }
    }
    if packaged.is_empty() {
        problems.push(Problem::new(
            "bin/",
            "",
            "no binary: expected bin/stateful-tool-amd64 and/or bin/stateful-tool-arm64",
        ));
    } else if !declared.info.arches.is_empty() && !same_arches(&declared.info.arches, &packaged) {
        problems.push(Problem::new(
            "manifest.yaml",
            "meta.arch",
            format!("lists [{}] but the package holds binaries for [{}]", list(&declared.info.arches), list(&packaged)),
        ));
    }
    check_sizes(set, &mut problems);
    if problems.is_empty() {
        Ok(report_for(&declared.info, set, warnings))
    } else {
        Err(problems)
    }
}

/// Validates an unzipped package directory.
pub fn validate_package_dir(dir: &Path) -> Result<Report, ValidationError> {
    let set = scan_dir(dir).map_err(ValidationError::new)?;
    validate_package_files(&set).map_err(ValidationError::new)
}

/// Validates a `.difypkg` given as bytes.
pub fn validate_package_bytes(bytes: Vec<u8>) -> Result<Report, ValidationError> {
    let package =
        read_package(bytes).map_err(|e| ValidationError::new(vec![Problem::new("(package)", "", chain(&e))]))?;
    let mut set = FileSet::default();
    for entry in package.entries {
        set.insert_memory(&entry.name, entry.data);
    }
    validate_package_files(&set).map_err(ValidationError::new)
}

/// Checks one trigger provider file by the daemon's rules (the events it lists are not read).
pub fn validate_trigger_provider(file: &str, text: &[u8]) -> Result<(), ValidationError> {
    let (mut problems, mut warnings) = (Vec::new(), Vec::new());
    let checked = check_trigger_provider(&mut Checker::new(file, &mut problems, &mut warnings), text);
    match checked {
        Some(_) if problems.is_empty() => Ok(()),
        _ => Err(ValidationError::new(problems)),
    }
}

/// Checks one trigger event file by the daemon's rules; returns the event's identity name.
pub fn validate_trigger_event(file: &str, text: &[u8]) -> Result<String, ValidationError> {
    let (mut problems, mut warnings) = (Vec::new(), Vec::new());
    let name = check_event(&mut Checker::new(file, &mut problems, &mut warnings), text);
    match name {
        Some(name) if problems.is_empty() => Ok(name),
        _ => Err(ValidationError::new(problems)),
    }
}

pub(crate) fn same_arches(a: &[Arch], b: &[Arch]) -> bool {
    a.iter().collect::<BTreeSet<_>>() == b.iter().collect::<BTreeSet<_>>()
}

pub(crate) fn list(arches: &[Arch]) -> String {
    arches.iter().map(|a| a.as_str()).collect::<Vec<_>>().join(", ")
}
