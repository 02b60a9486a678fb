//! `package`: collect the allow-listed files, validate them, write the deterministic `.difypkg`.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::arch::{rewrite_arch, Arch, RewriteError};
use super::archive::write_zip;
use super::checksum::{checked_unique_identifier, checksum_of_entries};
use super::decl_check::check_declarations;
use super::error::{chain, ValidationError};
use super::layout::{DirTree, FileSet, Tree, WARN_COMPRESSED};
use super::validate::{check_sizes, list, report_for, same_arches, source_files, Problem, Report};

/// Everything that will go into the package, validated.
pub struct Plan {
    pub(crate) files: FileSet,
    pub report: Report,
    /// Per-arch binary sizes, in arch order.
    pub binaries: Vec<(Arch, u64)>,
    /// What was changed on the way in (the `meta.arch` rewrite).
    pub notes: Vec<String>,
}

fn add_binaries(set: &mut FileSet, bins: &[(Arch, PathBuf)], problems: &mut Vec<Problem>) -> Vec<(Arch, u64)> {
    let mut out: Vec<(Arch, u64)> = Vec::new();
    for (arch, path) in bins {
        let shown = path.display().to_string();
        if out.iter().any(|(a, _)| a == arch) {
            problems.push(Problem::new("--bin", arch.as_str(), "is given more than once"));
            continue;
        }
        match fs::metadata(path) {
            Ok(meta) if meta.is_file() => {
                set.insert_disk(&arch.binary_entry(), path.clone(), meta.len());
                out.push((*arch, meta.len()));
            }
            Ok(_) => problems.push(Problem::new(shown, "", format!("the {arch} binary is not a regular file"))),
            Err(e) => problems.push(Problem::new(shown, "", format!("the {arch} binary cannot be read: {e}"))),
        }
    }
    if bins.is_empty() {
        problems.push(Problem::new("--bin", "", "no binary to package"));
    }
    out.sort();
    out
}

/// Packages `path` as the package's `README.md` (what Dify's plugin panel shows) instead of
/// the source tree's, which can be written for another reader (the repository's page).
fn replace_readme(set: &mut FileSet, path: &Path, problems: &mut Vec<Problem>) {
    match fs::metadata(path) {
        Ok(meta) if meta.is_file() => set.insert_disk("README.md", path.to_path_buf(), meta.len()),
        Ok(_) => problems.push(Problem::new("--readme", "", format!("{} is not a regular file", path.display()))),
        Err(e) => problems.push(Problem::new("--readme", "", format!("{} cannot be read: {e}", path.display()))),
    }
}

/// Collects and validates a source tree plus binaries. When `meta.arch` differs from the
/// packaged arches, the manifest that goes into the package gets exactly the packaged
/// arches (a minimal text edit of the `arch:` list; the source file is left untouched).
pub fn plan_package(source: &Path, bins: &[(Arch, PathBuf)]) -> Result<Plan, ValidationError> {
    plan_package_with_readme(source, bins, None).map_err(ValidationError::new)
}

/// [`plan_package`], with `readme` (when given) packaged as `README.md` in place of the
/// source tree's.
pub(crate) fn plan_package_with_readme(
    source: &Path,
    bins: &[(Arch, PathBuf)],
    readme: Option<&Path>,
) -> Result<Plan, Vec<Problem>> {
    if !source.is_dir() {
        return Err(vec![Problem::new(source.display().to_string(), "", "the source is not a directory")]);
    }
    let tree = DirTree { root: source };
    let (mut problems, mut warnings) = (Vec::new(), Vec::new());
    let declared = check_declarations(&tree, &mut problems, &mut warnings);
    let mut files = declared.as_ref().map(|d| source_files(&tree, d)).unwrap_or_default();
    let binaries = add_binaries(&mut files, bins, &mut problems);
    if let Some(path) = readme {
        replace_readme(&mut files, path, &mut problems);
    }
    let Some(declared) = declared else {
        return Err(problems);
    };
    let mut notes = Vec::new();
    let packaged: Vec<Arch> = binaries.iter().map(|(a, _)| *a).collect();
    let declared_arches = &declared.info.arches;
    if !packaged.is_empty() && !declared_arches.is_empty() && !same_arches(declared_arches, &packaged) {
        let text = tree.read("manifest.yaml").unwrap_or_default();
        let rewritten =
            String::from_utf8(text).map_err(|_| RewriteError::NotUtf8).and_then(|t| rewrite_arch(&t, &packaged));
        match rewritten {
            Ok(new_text) => {
                files.insert_memory("manifest.yaml", new_text.into_bytes());
                notes.push(format!(
                    "manifest.yaml: meta.arch [{}] written as [{}] in the package (only these binaries are packaged; the source file is unchanged)",
                    list(declared_arches),
                    list(&packaged)
                ));
            }
            Err(e) => problems.push(Problem::new(
                "manifest.yaml",
                "meta.arch",
                format!("lists [{}] but binaries are packaged for [{}], and the list cannot be rewritten ({}); edit meta.arch or pass --bin for each listed arch", list(declared_arches), list(&packaged), chain(&e)),
            )),
        }
    }
    check_sizes(&files, &mut problems);
    if !problems.is_empty() {
        return Err(problems);
    }
    let report = report_for(&declared.info, &files, warnings);
    Ok(Plan { files, report, binaries, notes })
}

/// A package built in memory.
pub struct Built {
    pub bytes: Vec<u8>,
    pub file_name: String,
    pub checksum: String,
    pub identifier: String,
    pub plan: Plan,
    pub warnings: Vec<String>,
}

/// `<name>-<version>.difypkg`.
pub(crate) fn output_name(name: &str, version: &str) -> String {
    format!("{name}-{version}.difypkg")
}

/// Validates and builds the package bytes; nothing is written.
pub fn build_package(source: &Path, bins: &[(Arch, PathBuf)]) -> Result<Built, ValidationError> {
    build_package_with_readme(source, bins, None)
}

/// [`build_package`], with `readme` (when given) packaged as `README.md`.
pub fn build_package_with_readme(
    source: &Path,
    bins: &[(Arch, PathBuf)],
    readme: Option<&Path>,
) -> Result<Built, ValidationError> {
    let plan = plan_package_with_readme(source, bins, readme).map_err(ValidationError::new)?;
    let fail = |msg: String| ValidationError::new(vec![Problem::new("(package)", "", msg)]);
    let entries = plan.files.to_entries().map_err(|e| fail(chain(&e)))?;
    // Files may change between the size check and the read; check what was read.
    let total: u64 = entries.iter().map(|e| e.data.len() as u64).sum();
    if total != plan.report.total_size {
        return Err(fail("source files changed while being packaged; run again".into()));
    }
    let checksum = checksum_of_entries(&entries);
    let r = &plan.report;
    let identifier =
        checked_unique_identifier(&r.author, &r.name, &r.version, &checksum).map_err(|e| fail(e.to_string()))?;
    let bytes = write_zip(&entries, b"").map_err(|e| fail(chain(&e)))?;
    let mut warnings = plan.report.warnings.clone();
    if bytes.len() as u64 > WARN_COMPRESSED {
        warnings.push(format!(
            "the package is {} bytes, over Dify's default upload limit of {WARN_COMPRESSED} bytes (15 MiB, PLUGIN_MAX_PACKAGE_SIZE)",
            bytes.len()
        ));
    }
    Ok(Built { file_name: output_name(&r.name, &r.version), bytes, checksum, identifier, plan, warnings })
}

/// Writes `bytes` to `path` through a temporary file in the same directory, so a reader
/// never sees a half-written package.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
    let result = fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
        .and_then(|()| fs::rename(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}
