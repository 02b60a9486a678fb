//! Rules for the tool provider YAML and each tool YAML (spec §2.1, §2.2).

use std::collections::HashSet;

use yaml_serde::Value;

use super::field_rules::icon_entry;
use super::patterns;
use super::yamlcheck::{at, kind, Checker};

/// Provider tags the SDK accepts (`ToolLabelEnum`, narrower than the daemon's list).
pub const PROVIDER_TAGS: [&str; 17] = [
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
    "rag",
    "other",
];

pub(crate) const CREDENTIAL_TYPES: [&str; 7] =
    ["secret-input", "text-input", "select", "boolean", "model-selector", "app-selector", "array[tools]"];

/// Tool parameter types the daemon and the SDK accept (`ToolParameter.type`).
pub const PARAMETER_TYPES: [&str; 16] = [
    "string",
    "number",
    "boolean",
    "select",
    "secret-input",
    "file",
    "files",
    "app-selector",
    "model-selector",
    "any",
    "dynamic-select",
    "array",
    "object",
    "checkbox",
    "date",
    "date-range",
];

/// Tool parameter forms (`ToolParameter.form`).
pub const PARAMETER_FORMS: [&str; 3] = ["llm", "form", "schema"];

/// What the packager needs from a provider file.
#[derive(Debug, Default)]
pub(crate) struct ProviderInfo {
    pub(crate) name: String,
    /// Paths listed in `tools`.
    pub(crate) tools: Vec<String>,
    /// `(field, entry name under _assets/)` for `identity.icon` and `identity.icon_dark`.
    pub(crate) icons: Vec<(String, String)>,
}

/// Options of a select (credential or parameter): a non-empty list of `{value, label}`.
pub(crate) fn check_options(c: &mut Checker, v: Option<&Value>, field: &str) {
    let Some(options) = c.req_list(v, field) else {
        return;
    };
    if options.is_empty() || options.len() >= 128 {
        c.problem(field, "must list 1 to 127 options");
    }
    for (i, option) in options.iter().enumerate() {
        let f = format!("{field}[{i}]");
        match at(option, "value") {
            Some(Value::String(s)) if s.chars().count() >= 128 => {
                c.problem(&format!("{f}.value"), "must be under 128 characters")
            }
            Some(Value::String(_) | Value::Number(_) | Value::Bool(_)) => {}
            Some(other) => c.problem(&format!("{f}.value"), format!("must be a string, found {}", kind(other))),
            None => c.problem(&format!("{f}.value"), "is required"),
        }
        c.i18n(at(option, "label"), &format!("{f}.label"), true);
    }
}

fn check_credentials(c: &mut Checker, doc: &Value) {
    let field = "credentials_for_provider";
    match at(doc, field) {
        None => {}
        Some(Value::Sequence(_)) => {
            c.problem(field, "must be a mapping from credential name to its settings; the SDK rejects the list form")
        }
        Some(Value::Mapping(map)) => {
            for (key, cred) in map {
                let Some(name) = key.as_str().filter(|k| !k.is_empty()) else {
                    c.problem(field, "credential names must be non-empty strings");
                    continue;
                };
                let f = format!("{field}.{name}");
                if c.req_map(Some(cred), &f).is_none() {
                    continue;
                }
                let ty = c.one_of(at(cred, "type"), &format!("{f}.type"), &CREDENTIAL_TYPES);
                c.i18n(at(cred, "label"), &format!("{f}.label"), true);
                c.opt_bool(at(cred, "required"), &format!("{f}.required"));
                c.opt_bool(at(cred, "multiple"), &format!("{f}.multiple"));
                c.i18n(at(cred, "placeholder"), &format!("{f}.placeholder"), false);
                c.i18n(at(cred, "help"), &format!("{f}.help"), false);
                c.opt_str(at(cred, "url"), &format!("{f}.url"));
                if let Some(d @ (Value::Mapping(_) | Value::Sequence(_))) = at(cred, "default") {
                    c.problem(&format!("{f}.default"), format!("must be a plain value, found {}", kind(d)));
                }
                if ty.as_deref() == Some("select") {
                    check_options(c, at(cred, "options"), &format!("{f}.options"));
                }
            }
        }
        Some(other) => c.problem(field, format!("must be a mapping, found {}", kind(other))),
    }
    if at(doc, "credentials_schema").is_some() {
        c.warn("credentials_schema", "the SDK ignores it; declare credentials under credentials_for_provider");
    }
}

/// Checks a provider's `identity` (tool or trigger provider alike) with its allowed `tags`;
/// fills `info.name` and `info.icons`.
pub(crate) fn check_identity(c: &mut Checker, doc: &Value, tags: &[&str], info: &mut ProviderInfo) {
    if c.req_map(at(doc, "identity"), "identity").is_some() {
        c.req_str(at(doc, "identity.author"), "identity.author");
        if let Some(name) = c.req_str(at(doc, "identity.name"), "identity.name") {
            if patterns::is_identity_name(name) {
                info.name = name.to_string();
            } else {
                c.problem("identity.name", format!("`{name}` must match ^[a-zA-Z0-9_-]+$"));
            }
        }
        c.i18n(at(doc, "identity.label"), "identity.label", true);
        c.i18n(at(doc, "identity.description"), "identity.description", true);
        for (field, required) in [("identity.icon", true), ("identity.icon_dark", false)] {
            let icon = if required { c.req_str(at(doc, field), field) } else { c.opt_str(at(doc, field), field) };
            if let Some(entry) = icon.and_then(|i| icon_entry(c, i, field)) {
                info.icons.push((field.to_string(), entry));
            }
        }
        for (i, tag) in c.str_list(at(doc, "identity.tags"), "identity.tags", false).into_iter().enumerate() {
            if !tags.contains(&tag) {
                c.problem(&format!("identity.tags[{i}]"), format!("`{tag}` is not one of: {}", tags.join(", ")));
            }
        }
    }
}

/// Checks a provider file.
pub(crate) fn check_provider(c: &mut Checker, text: &[u8]) -> Option<ProviderInfo> {
    let doc = c.parse(text)?;
    let mut info = ProviderInfo::default();
    check_identity(c, &doc, &PROVIDER_TAGS, &mut info);
    check_credentials(c, &doc);
    let tools = c.str_list(at(&doc, "tools"), "tools", true);
    if tools.is_empty() && at(&doc, "tools").is_some() {
        c.problem("tools", "must list at least one tool file");
    }
    let mut seen = HashSet::new();
    for (i, path) in tools.into_iter().enumerate() {
        check_listed(c, &format!("tools[{i}]"), path, "tools", &mut seen, &mut info.tools);
    }
    Some(info)
}

/// One entry of a provider's file list (`tools`, a trigger's `events`): `<dir>/<name>.yaml`,
/// a usable entry name, listed once; added to `out` when it is all three.
pub(crate) fn check_listed(
    c: &mut Checker,
    field: &str,
    path: &str,
    dir: &str,
    seen: &mut HashSet<String>,
    out: &mut Vec<String>,
) {
    let stem = path.strip_prefix(dir).and_then(|p| p.strip_prefix('/')).and_then(|p| p.strip_suffix(".yaml"));
    if stem.is_none_or(|s| s.is_empty() || s.contains('/')) {
        c.problem(field, format!("`{path}` must be {dir}/<name>.yaml"));
    } else if let Err(e) = super::archive::check_entry_name(path) {
        c.problem(field, format!("`{path}`: {e}"));
    } else if !seen.insert(path.to_owned()) {
        c.problem(field, format!("`{path}` is listed twice"));
    } else {
        out.push(path.to_string());
    }
}

fn check_parameter(c: &mut Checker, p: &Value, f: &str, names: &mut HashSet<String>) {
    if c.req_map(Some(p), f).is_none() {
        return;
    }
    if let Some(name) = c.req_str(at(p, "name"), &format!("{f}.name")) {
        if name.chars().count() > 1023 {
            c.problem(&format!("{f}.name"), "must be at most 1023 characters");
        }
        if !names.insert(name.to_string()) {
            c.problem(&format!("{f}.name"), format!("`{name}` is used by another parameter"));
        }
    }
    let ty = c.one_of(at(p, "type"), &format!("{f}.type"), &PARAMETER_TYPES);
    let form = c.one_of(at(p, "form"), &format!("{f}.form"), &PARAMETER_FORMS);
    c.i18n(at(p, "label"), &format!("{f}.label"), true);
    c.i18n(at(p, "human_description"), &format!("{f}.human_description"), true);
    c.opt_bool(at(p, "required"), &format!("{f}.required"));
    let llm = c.opt_str(at(p, "llm_description"), &format!("{f}.llm_description"));
    if form.as_deref() == Some("llm") && llm.is_none() {
        c.warn(f, "form: llm without llm_description gives the model no hint");
    }
    let is_select = matches!(ty.as_deref(), Some("select" | "dynamic-select"));
    let multiple = c.opt_bool(at(p, "multiple"), &format!("{f}.multiple"));
    if multiple.is_some() && ty.is_some() && !is_select {
        c.problem(&format!("{f}.multiple"), "is only valid for select and dynamic-select");
    }
    if let (true, Some(default)) = (is_select, at(p, "default")) {
        if default.is_sequence() != multiple.unwrap_or(false) {
            c.problem(&format!("{f}.default"), "must be a list exactly when multiple is true");
        }
    }
    if ty.as_deref() == Some("select") {
        check_options(c, at(p, "options"), &format!("{f}.options"));
    }
}

/// Checks one tool file; returns its identity name.
pub(crate) fn check_tool(c: &mut Checker, text: &[u8]) -> Option<String> {
    let doc = c.parse(text)?;
    let mut name = None;
    if c.req_map(at(&doc, "identity"), "identity").is_some() {
        if let Some(n) = c.req_str(at(&doc, "identity.name"), "identity.name") {
            if patterns::is_identity_name(n) {
                name = Some(n.to_string());
            } else {
                c.problem("identity.name", format!("`{n}` must match ^[a-zA-Z0-9_-]+$"));
            }
        }
        c.req_str(at(&doc, "identity.author"), "identity.author");
        c.i18n(at(&doc, "identity.label"), "identity.label", true);
    }
    if c.req_map(at(&doc, "description"), "description").is_some() {
        c.i18n(at(&doc, "description.human"), "description.human", true);
        c.req_str(at(&doc, "description.llm"), "description.llm");
    }
    let mut names = HashSet::new();
    for (i, p) in c.opt_list(at(&doc, "parameters"), "parameters").unwrap_or_default().iter().enumerate() {
        check_parameter(c, p, &format!("parameters[{i}]"), &mut names);
    }
    c.opt_map(at(&doc, "output_schema"), "output_schema");
    if at(&doc, "has_runtime_parameters").is_some() {
        c.warn("has_runtime_parameters", "is set by the SDK, not by the declaration");
    }
    name
}
