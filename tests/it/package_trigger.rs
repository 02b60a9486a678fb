//! The second package, stateful_trigger, built from the repository's `trigger/` tree: the
//! same validators (with the trigger declaration rules), signer and verifier as the tool's.

use std::path::{Path, PathBuf};

use crate::support::package::*;
use difypkg::{
    build_package, load_private_key, load_public_key, read_package, sign_package, validate_package_bytes,
    validate_plugin_dir, verify_bytes, Category,
};

fn trigger_tree() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/trigger"))
}

#[test]
fn the_trigger_package_builds_validates_signs_and_verifies() {
    let tmp = tempfile::tempdir().unwrap();
    let built = build_package(&trigger_tree(), &fake_bins(tmp.path())).unwrap_or_else(|p| panic!("{p:?}"));
    assert_eq!(built.file_name, format!("stateful_trigger-{}.difypkg", env!("CARGO_PKG_VERSION")));
    let names: Vec<String> = read_package(built.bytes.clone()).unwrap().entries.into_iter().map(|e| e.name).collect();
    assert_eq!(
        names,
        [
            "PRIVACY.md",
            "README.md",
            "_assets/icon-dark.svg",
            "_assets/icon.svg",
            "bin/stateful-tool-amd64",
            "bin/stateful-tool-arm64",
            "events/webhook_received.yaml",
            "main.py",
            "manifest.yaml",
            "provider/stateful_trigger.yaml",
            "requirements.txt",
        ]
    );
    // The shim is the tool package's, byte for byte: one launcher for one binary.
    let main_py = read_package(built.bytes.clone()).unwrap().entries.into_iter().find(|e| e.name == "main.py").unwrap();
    assert_eq!(main_py.data, std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("main.py")).unwrap());
    validate_package_bytes(built.bytes.clone()).unwrap_or_else(|p| panic!("{p:?}"));
    let key = load_private_key(&key1_private()).unwrap();
    let (signed, _) = sign_package(built.bytes, &key, Category::Community, 1_700_000_123).unwrap();
    assert!(verify_bytes(signed.clone(), &[load_public_key(&key1_public()).unwrap()]).result.is_ok());
    assert!(verify_bytes(signed.clone(), &[load_public_key(&key2_public()).unwrap()]).result.is_err());
    assert!(validate_package_bytes(signed).is_ok());
}

#[test]
fn both_manifests_carry_the_same_version_and_the_trigger_needs_dify_1_10() {
    let manifest = std::fs::read_to_string(trigger_tree().join("manifest.yaml")).unwrap();
    assert!(manifest.contains(&format!("\nversion: {}\n", env!("CARGO_PKG_VERSION"))), "run make bump");
    assert!(manifest.contains("minimum_dify_version: 1.10.0"));
}

#[test]
fn the_daemons_trigger_rules_refuse_what_it_refuses() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("trigger");
    copy_dir(&trigger_tree(), &source);
    let problems = |dir: &Path| {
        validate_plugin_dir(dir)
            .err()
            .map(difypkg::ValidationError::into_problems)
            .unwrap_or_default()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(problems(&source), "", "the shipped tree passes");
    // Tools and triggers in one manifest: ManifestValidate refuses it.
    edit(&source, "manifest.yaml", "plugins:\n  triggers:", "plugins:\n  tools:\n    - provider/x.yaml\n  triggers:");
    assert!(
        problems(&source).contains("trigger and tool cannot be provided at the same time"),
        "{}",
        problems(&source)
    );
    copy_dir(&trigger_tree(), &source);
    edit(&source, "events/webhook_received.yaml", "  name: webhook_received", "  name: webhook received");
    assert!(problems(&source).contains("identity.name"), "{}", problems(&source));
    copy_dir(&trigger_tree(), &source);
    edit(&source, "provider/stateful_trigger.yaml", "    type: secret-input", "    type: password");
    assert!(problems(&source).contains("subscription_schema[6].type"), "{}", problems(&source));
}

/// Copies the tree, following its symlinks (main.py and the icons are shared with the tool).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for item in std::fs::read_dir(from).unwrap() {
        let item = item.unwrap();
        let target = to.join(item.file_name());
        if std::fs::metadata(item.path()).unwrap().is_dir() {
            copy_dir(&item.path(), &target);
        } else {
            std::fs::copy(item.path(), &target).unwrap();
        }
    }
}
