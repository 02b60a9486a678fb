//! Rules for `manifest.yaml` (spec §1.2, §1.3): the intersection of daemon, CLI and SDK checks.

use yaml_serde::Value;

use super::arch::Arch;
use super::field_rules::{check_version, icon_entry};
use super::patterns;
use super::runtime_rules::{check_meta, check_resource};
use super::yamlcheck::{at, Checker};

/// Manifest tags (`daemon:pkg/entities/manifest_entities/tags.go`).
pub const MANIFEST_TAGS: [&str; 19] = [
    "search",
    "image",
    "videos",
    "weather",
    "finance",
    "design",
    "travel",
    "social",
    "news",
    "medical",
    "productivity",
    "education",
    "business",
    "entertainment",
    "utilities",
    "agent",
    "rag",
    "other",
    "trigger",
];

const OTHER_PROVIDER_KINDS: [&str; 4] = ["models", "endpoints", "agent_strategies", "datasources"];

/// What the rest of the packager needs from a manifest that parsed.
#[derive(Debug, Default, Clone)]
pub(crate) struct ManifestInfo {
    pub(crate) author: String,
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) arches: Vec<Arch>,
    /// Paths listed in `plugins.tools` (or `plugins.triggers` for a trigger plugin).
    pub(crate) providers: Vec<String>,
    /// True for a trigger plugin (`plugins.triggers`), false for a tool plugin.
    pub(crate) trigger: bool,
    /// `(field, entry name under _assets/)` for `icon` and `icon_dark`.
    pub(crate) icons: Vec<(String, String)>,
}

fn check_author(c: &mut Checker, v: Option<&Value>) -> Option<String> {
    let s = c.req_str(v, "author")?;
    let mut ok = true;
    if !patterns::is_author(s) {
        c.problem("author", format!("`{s}` must match ^[a-z0-9_-]{{1,64}}$ (lower case)"));
        ok = false;
    }
    if patterns::looks_like_uuid(s) {
        c.problem("author", format!("`{s}` parses as a UUID, which the daemon refuses"));
        ok = false;
    }
    for reserved in ["langgenius", "dify"] {
        if s.to_ascii_lowercase().contains(reserved) {
            c.problem("author", format!("`{s}` must not contain `{reserved}` (reserved for official plugins)"));
            ok = false;
        }
    }
    ok.then(|| s.to_string())
}

fn check_plugins(c: &mut Checker, doc: &Value) -> (Vec<String>, bool) {
    if c.req_map(at(doc, "plugins"), "plugins").is_none() {
        return (Vec::new(), false);
    }
    for other in OTHER_PROVIDER_KINDS {
        let field = format!("plugins.{other}");
        if at(doc, &field).is_some_and(|v| v.as_sequence().is_none_or(|s| !s.is_empty())) {
            c.problem(&field, "this packager builds tool and trigger plugins only; remove it");
        }
    }
    let listed = |kind: &str| at(doc, kind).is_some_and(|v| v.as_sequence().is_none_or(|s| !s.is_empty()));
    // `ManifestValidate`: a trigger provider cannot share a package with tools.
    let trigger = listed("plugins.triggers");
    if trigger && listed("plugins.tools") {
        c.problem("plugins.triggers", "trigger and tool cannot be provided at the same time (the daemon refuses it)");
    }
    let kind = if trigger { "plugins.triggers" } else { "plugins.tools" };
    let tools = c.str_list(at(doc, kind), kind, true);
    if tools.len() != 1 {
        c.problem(
            kind,
            format!("must list exactly one provider file (the daemon keeps only the last one), found {}", tools.len()),
        );
    }
    let mut out = Vec::new();
    for (i, path) in tools.iter().enumerate() {
        let field = format!("{kind}[{i}]");
        let stem = path.strip_prefix("provider/").and_then(|p| p.strip_suffix(".yaml"));
        if path.len() > 128 || stem.is_none_or(|s| s.is_empty() || s.contains('/')) {
            c.problem(&field, format!("`{path}` must be provider/<name>.yaml (at most 128 characters)"));
        } else if let Err(e) = super::archive::check_entry_name(path) {
            c.problem(&field, format!("`{path}`: {e}"));
        } else {
            out.push(path.to_string());
        }
    }
    (out, trigger)
}

fn check_misc(c: &mut Checker, doc: &Value) {
    if let Some(s) = c.req_str(at(doc, "created_at"), "created_at") {
        let t_sep = s.as_bytes().get(10).is_some_and(|b| *b == b'T' || *b == b't');
        if !t_sep || chrono::DateTime::parse_from_rfc3339(s).is_err() {
            c.problem("created_at", format!("`{s}` is not an RFC 3339 timestamp with zone, e.g. 2025-01-01T00:00:00Z"));
        }
    }
    if let Some(p) = c.opt_str(at(doc, "privacy"), "privacy") {
        if p != "PRIVACY.md" {
            c.problem("privacy", format!("`{p}` is not packaged; only PRIVACY.md is (write `privacy: PRIVACY.md`)"));
        }
    }
    if let Some(repo) = c.opt_str(at(doc, "repo"), "repo") {
        let host = repo.strip_prefix("https://").or_else(|| repo.strip_prefix("http://"));
        if host.is_none_or(|h| h.is_empty() || h.starts_with('/')) {
            c.problem("repo", format!("`{repo}` must be an http(s) URL"));
        }
    }
    for (i, tag) in c.str_list(at(doc, "tags"), "tags", false).into_iter().enumerate() {
        if !MANIFEST_TAGS.contains(&tag) {
            c.problem(&format!("tags[{i}]"), format!("`{tag}` is not one of: {}", MANIFEST_TAGS.join(", ")));
        }
    }
    if at(doc, "verified").is_some() {
        c.warn("verified", "is ignored: the daemon overwrites it with the signature result");
    }
}

/// Checks a manifest; returns what could be read even when problems were recorded.
pub(crate) fn check_manifest(c: &mut Checker, text: &[u8]) -> Option<ManifestInfo> {
    let doc = c.parse(text)?;
    let mut info = ManifestInfo {
        version: check_version(c, at(&doc, "version"), "version").unwrap_or_default(),
        ..ManifestInfo::default()
    };
    c.one_of(at(&doc, "type"), "type", &["plugin"]);
    info.author = check_author(c, at(&doc, "author")).unwrap_or_default();
    if let Some(name) = c.req_str(at(&doc, "name"), "name") {
        if patterns::is_plugin_name(name) {
            info.name = name.to_string();
        } else {
            c.problem("name", format!("`{name}` must match ^[a-z0-9_-]{{1,128}}$"));
        }
    }
    c.i18n(at(&doc, "label"), "label", true);
    c.i18n(at(&doc, "description"), "description", true);
    for (field, required) in [("icon", true), ("icon_dark", false)] {
        let icon = if required { c.req_str(at(&doc, field), field) } else { c.opt_str(at(&doc, field), field) };
        if let Some(entry) = icon.and_then(|i| icon_entry(c, i, field)) {
            info.icons.push((field.to_string(), entry));
        }
    }
    check_resource(c, &doc);
    (info.providers, info.trigger) = check_plugins(c, &doc);
    info.arches = check_meta(c, &doc);
    check_misc(c, &doc);
    Some(info)
}
