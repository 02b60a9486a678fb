//! Validation catches broken declarations and layouts, naming file and field, all at once.

use std::fs;
use std::path::Path;

use crate::fixtures::*;
use difypkg::{
    build_package, plan_package, validate_package_bytes, validate_plugin_dir, write_zip, PackageFile, Problem,
};

/// Problems from validating the source tree and from planning a package with binaries;
/// both must agree that the tree is broken.
fn problems_of(source: &Path, bins: &[(difypkg::Arch, std::path::PathBuf)]) -> Vec<Problem> {
    let from_dir = validate_plugin_dir(source).expect_err("validate_plugin_dir accepted a broken tree");
    let from_plan = plan_package(source, bins).err().expect("plan_package accepted a broken tree");
    assert_eq!(from_dir, from_plan, "both entry points report the same problems");
    from_plan.into_problems()
}

fn has(problems: &[Problem], file: &str, field: &str, needle: &str) -> bool {
    problems.iter().any(|p| p.file == file && p.field == field && p.message.contains(needle))
}

#[test]
fn the_fixture_is_valid() {
    let report = validate_plugin_dir(&fixture()).unwrap_or_else(|p| panic!("{p:#?}"));
    assert_eq!(report.name, "stateful_tool");
    assert_eq!(report.files.len(), 10);
}

#[test]
fn bad_authors_are_rejected() {
    for (author, needle) in [
        ("Acme", "^[a-z0-9_-]{1,64}$"),
        ("my-dify", "must not contain `dify`"),
        ("langgenius", "must not contain `langgenius`"),
        ("123e4567-e89b-12d3-a456-426614174000", "UUID"),
    ] {
        let (_tmp, source, bins) = fixture_copy();
        edit(&source, "manifest.yaml", "author: acme", &format!("author: {author}"));
        let problems = problems_of(&source, &bins);
        assert!(has(&problems, "manifest.yaml", "author", needle), "{author}: {problems:#?}");
    }
}

#[test]
fn bad_versions_are_rejected() {
    for (version, needle) in [
        ("v1.0.0", "does not match"),
        ("1.0", "reads as a number"),
        ("1.0.0-foo", "PEP 440"),
        ("1.0.0+local", "does not match"),
    ] {
        let (_tmp, source, bins) = fixture_copy();
        edit(&source, "manifest.yaml", "version: 0.1.0", &format!("version: {version}"));
        let problems = problems_of(&source, &bins);
        assert!(has(&problems, "manifest.yaml", "version", needle), "{version}: {problems:#?}");
    }
}

#[test]
fn missing_icon_and_tool_file_are_named() {
    let (_tmp, source, bins) = fixture_copy();
    fs::remove_file(source.join("_assets/icon-dark.svg")).unwrap();
    fs::remove_file(source.join("tools/event_status.yaml")).unwrap();
    let problems = problems_of(&source, &bins);
    assert!(has(&problems, "manifest.yaml", "icon_dark", "_assets/icon-dark.svg does not exist"), "{problems:#?}");
    assert!(has(&problems, "provider/stateful_tool.yaml", "identity.icon_dark", "does not exist"));
    assert!(has(&problems, "provider/stateful_tool.yaml", "tools[1]", "tools/event_status.yaml does not exist"));
}

#[test]
fn directories_where_files_belong_are_rejected() {
    let (_tmp, source, bins) = fixture_copy();
    fs::remove_file(source.join("_assets/icon.svg")).unwrap();
    fs::create_dir(source.join("_assets/icon.svg")).unwrap();
    fs::remove_file(source.join("README.md")).unwrap();
    fs::create_dir(source.join("README.md")).unwrap();
    let problems = problems_of(&source, &bins);
    assert!(has(&problems, "manifest.yaml", "icon", "not a regular file"), "{problems:#?}");
    assert!(has(&problems, "README.md", "", "not a regular file"), "{problems:#?}");
}

#[test]
fn directory_entries_and_bad_names_in_a_package_are_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    let built = build_package(&fixture(), &fake_bins(tmp.path())).unwrap();
    let mut entries = difypkg::read_package(built.bytes).unwrap().entries;
    entries.push(PackageFile::new("tools/extra.yaml", "x: 1"));
    let with_extra = write_zip(&entries, b"").unwrap();
    let problems = validate_package_bytes(with_extra).unwrap_err().into_problems();
    assert!(has(&problems, "tools/extra.yaml", "", "not part of the package layout"), "{problems:#?}");
    let problems =
        validate_package_bytes(vector_bytes("neg.with_directory_entries.difypkg")).unwrap_err().into_problems();
    assert!(problems[0].message.contains("`_assets/` is a directory entry"), "{problems:#?}");
    assert!(problems[0].message.contains("`tools/` is a directory entry"), "{problems:#?}");
}

#[test]
fn oversize_packages_are_rejected_before_reading() {
    let (tmp, source, mut bins) = fixture_copy();
    // A sparse 60 MiB file: the size check uses metadata, so nothing is read.
    let big = tmp.path().join("huge-binary");
    fs::File::create(&big).unwrap().set_len(60 << 20).unwrap();
    bins[1].1 = big;
    let problems = build_package(&source, &bins).err().unwrap().into_problems();
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(has(&problems, "(package)", "size", "over the daemon's limit of 52428800"), "{problems:#?}");
    assert!(problems[0].message.contains("bin/stateful-tool-arm64 (62914560 bytes)"));
}

#[test]
fn all_problems_are_reported_together() {
    let (_tmp, source, bins) = fixture_copy();
    edit(&source, "manifest.yaml", "author: acme", "author: Acme");
    edit(&source, "manifest.yaml", "version: \"3.12\"", "version: 3.12");
    edit(&source, "manifest.yaml", "created_at: 2025-01-01T00:00:00Z", "created_at: \"2025-01-01\"");
    edit(&source, "manifest.yaml", "  - utilities", "  - gadgets");
    edit(&source, "provider/stateful_tool.yaml", "type: secret-input", "type: password");
    edit(&source, "tools/event_ingest.yaml", "form: llm", "form: chat");
    edit(&source, "tools/event_status.yaml", "  llm: Looks", "  llm_text: Looks");
    fs::remove_file(source.join("PRIVACY.md")).unwrap();
    let problems = problems_of(&source, &bins);
    let want = [
        ("manifest.yaml", "author"),
        ("manifest.yaml", "meta.runner.version"),
        ("manifest.yaml", "created_at"),
        ("manifest.yaml", "tags[0]"),
        ("provider/stateful_tool.yaml", "credentials_for_provider.kv_token.type"),
        ("tools/event_ingest.yaml", "parameters[0].form"),
        ("tools/event_status.yaml", "description.llm"),
        ("PRIVACY.md", ""),
    ];
    for (file, field) in want {
        assert!(has(&problems, file, field, ""), "missing {file} {field}: {problems:#?}");
    }
    assert_eq!(problems.len(), want.len(), "{problems:#?}");
}

#[test]
fn arch_and_binary_rules() {
    let (_tmp, source, bins) = fixture_copy();
    edit(&source, "manifest.yaml", "    - arm64\n", "    - arm64\n    - riscv64\n");
    let problems = problems_of(&source, &bins);
    assert!(has(&problems, "manifest.yaml", "meta.arch[2]", "not amd64 or arm64"), "{problems:#?}");

    let (_tmp, source, mut bins) = fixture_copy();
    bins.push(bins[0].clone());
    let problems = plan_package(&source, &bins).err().unwrap().into_problems();
    assert!(has(&problems, "--bin", "amd64", "more than once"), "{problems:#?}");

    let (_tmp, source, _bins) = fixture_copy();
    let problems = plan_package(&source, &[]).err().unwrap().into_problems();
    assert!(has(&problems, "--bin", "", "no binary"), "{problems:#?}");
}

#[test]
fn a_package_over_the_upload_limit_builds_with_a_warning() {
    use rand::{RngCore, SeedableRng};
    let (tmp, source, mut bins) = fixture_copy();
    // Incompressible bytes, so the compressed package exceeds 15 MiB as well.
    let mut noise = vec![0u8; 16_000_000];
    rand::rngs::StdRng::seed_from_u64(7).fill_bytes(&mut noise);
    let big = tmp.path().join("noisy-binary");
    fs::write(&big, noise).unwrap();
    bins[0].1 = big;
    let built = build_package(&source, &bins).unwrap_or_else(|p| panic!("{p:#?}"));
    assert!(built.bytes.len() > 15 * 1024 * 1024);
    assert!(built.warnings.iter().any(|w| w.contains("over Dify's default upload limit")), "{:?}", built.warnings);
}
