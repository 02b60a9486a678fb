//! Cross-file declaration checks: fixed files, manifest, provider, tools and icons together.

use std::collections::{BTreeSet, HashSet};

use super::checksum::checked_unique_identifier;
use super::error::chain;
use super::layout::{Tree, FIXED_FILES};
use super::manifest_rules::{check_manifest, ManifestInfo};
use super::tool_rules::{check_provider, check_tool};
use super::trigger_rules::{check_event, check_trigger_provider};
use super::yamlcheck::Checker;
use super::yamlcheck::Problem;

/// Declarations that parsed, plus the YAML and icon files they reference.
pub(crate) struct Declared {
    pub(crate) info: ManifestInfo,
    pub(crate) referenced: BTreeSet<String>,
}

fn require(tree: &dyn Tree, name: &str, owner: &str, field: &str, problems: &mut Vec<Problem>) -> bool {
    match tree.stat(name) {
        Ok(Some(_)) => true,
        Ok(None) => {
            problems.push(Problem::new(owner, field, format!("{name} does not exist")));
            false
        }
        Err(e) => {
            problems.push(Problem::new(owner, field, chain(&e)));
            false
        }
    }
}

fn read(tree: &dyn Tree, name: &str, problems: &mut Vec<Problem>) -> Option<Vec<u8>> {
    tree.read(name).map_err(|e| problems.push(Problem::new(name, "", chain(&e)))).ok()
}

/// Checks the fixed files, the manifest, the provider, every tool and every icon.
pub(crate) fn check_declarations(
    tree: &dyn Tree,
    problems: &mut Vec<Problem>,
    warnings: &mut Vec<String>,
) -> Option<Declared> {
    for name in FIXED_FILES {
        match tree.stat(name) {
            Ok(Some(_)) => {}
            Ok(None) => problems.push(Problem::new(name, "", "is missing; every package needs it")),
            Err(e) => problems.push(Problem::new(name, "", chain(&e))),
        }
    }
    let text = read(tree, "manifest.yaml", problems)?;
    let info = check_manifest(&mut Checker::new("manifest.yaml", problems, warnings), &text)?;
    let mut referenced = BTreeSet::new();
    for (field, entry) in &info.icons {
        if require(tree, entry, "manifest.yaml", field, problems) {
            referenced.insert(entry.clone());
        }
    }
    let mut tool_names = HashSet::new();
    let (kind, item) = if info.trigger { ("plugins.triggers", "event") } else { ("plugins.tools", "tool") };
    for (i, provider) in info.providers.iter().enumerate() {
        if !require(tree, provider, "manifest.yaml", &format!("{kind}[{i}]"), problems) {
            continue;
        }
        referenced.insert(provider.clone());
        let Some(text) = read(tree, provider, problems) else {
            continue;
        };
        let check = if info.trigger { check_trigger_provider } else { check_provider };
        let Some(p) = check(&mut Checker::new(provider, problems, warnings), &text) else {
            continue;
        };
        if !p.name.is_empty() && !info.name.is_empty() && p.name != info.name {
            warnings
                .push(format!("{provider}: identity.name: `{}` differs from the plugin name `{}`", p.name, info.name));
        }
        for (field, entry) in &p.icons {
            if require(tree, entry, provider, field, problems) {
                referenced.insert(entry.clone());
            }
        }
        for (j, tool) in p.tools.iter().enumerate() {
            if !require(tree, tool, provider, &format!("{item}s[{j}]"), problems) {
                continue;
            }
            referenced.insert(tool.clone());
            let Some(text) = read(tree, tool, problems) else {
                continue;
            };
            let check_item = if info.trigger { check_event } else { check_tool };
            if let Some(name) = check_item(&mut Checker::new(tool, problems, warnings), &text) {
                if !tool_names.insert(name.clone()) {
                    problems.push(Problem::new(
                        tool,
                        "identity.name",
                        format!("`{name}` is also the name of another {item}"),
                    ));
                }
            }
        }
    }
    if !info.author.is_empty() && !info.name.is_empty() && !info.version.is_empty() {
        if let Err(e) = checked_unique_identifier(&info.author, &info.name, &info.version, &"0".repeat(64)) {
            problems.push(Problem::new("manifest.yaml", "", e.to_string()));
        }
    }
    if tree.read("main.py").is_ok_and(|t| !String::from_utf8_lossy(&t).contains("stateful-tool-")) {
        warnings.push("main.py: does not mention `stateful-tool-`; the shim must exec bin/stateful-tool-<arch>".into());
    }
    Some(Declared { info, referenced })
}
