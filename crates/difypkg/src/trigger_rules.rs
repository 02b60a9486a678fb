//! Rules for the trigger provider YAML and each event YAML (trigger spec §2.2, §2.3: the
//! daemon's `TriggerProviderDeclaration` / `EventDeclaration`, plus Dify's required
//! provider description).

use std::collections::HashSet;

use yaml_serde::Value;

use super::manifest_rules::MANIFEST_TAGS;
use super::patterns;
use super::tool_rules::{check_identity, check_listed, check_options, ProviderInfo, CREDENTIAL_TYPES};
use super::yamlcheck::{at, kind, Checker};

/// Event parameter types (`daemon: trigger_declaration.go` L29-42).
pub(crate) const EVENT_PARAMETER_TYPES: [&str; 12] = [
    "string",
    "number",
    "boolean",
    "select",
    "file",
    "files",
    "model-selector",
    "app-selector",
    "object",
    "array",
    "dynamic-select",
    "checkbox",
];

/// One `ProviderConfig` of `subscription_schema` (type and label required).
fn check_config(c: &mut Checker, cfg: &Value, f: &str) {
    if c.req_map(Some(cfg), f).is_none() {
        return;
    }
    let ty = c.one_of(at(cfg, "type"), &format!("{f}.type"), &CREDENTIAL_TYPES);
    c.i18n(at(cfg, "label"), &format!("{f}.label"), true);
    c.opt_bool(at(cfg, "required"), &format!("{f}.required"));
    c.i18n(at(cfg, "placeholder"), &format!("{f}.placeholder"), false);
    c.i18n(at(cfg, "help"), &format!("{f}.help"), false);
    if let Some(d @ (Value::Mapping(_) | Value::Sequence(_))) = at(cfg, "default") {
        c.problem(&format!("{f}.default"), format!("must be a plain value, found {}", kind(d)));
    }
    if ty.as_deref() == Some("select") {
        check_options(c, at(cfg, "options"), &format!("{f}.options"));
    }
}

/// `subscription_schema`: present, a list of configs with `name`, or a name → config map.
fn check_subscription_schema(c: &mut Checker, doc: &Value) {
    let field = "subscription_schema";
    let mut names = HashSet::new();
    match at(doc, field) {
        None => c.problem(field, "is required (it may be empty): the daemon's decoder reads it"),
        Some(Value::Sequence(items)) => {
            for (i, item) in items.iter().enumerate() {
                let f = format!("{field}[{i}]");
                match c.req_str(at(item, "name"), &format!("{f}.name")) {
                    Some(name) if !names.insert(name.to_owned()) => {
                        c.problem(&format!("{f}.name"), format!("`{name}` is declared twice"))
                    }
                    _ => {}
                }
                check_config(c, item, &f);
            }
        }
        Some(Value::Mapping(map)) => {
            for (key, cfg) in map {
                match key.as_str().filter(|k| !k.is_empty()) {
                    Some(name) => check_config(c, cfg, &format!("{field}.{name}")),
                    None => c.problem(field, "property names must be non-empty strings"),
                }
            }
        }
        Some(other) => c.problem(field, format!("must be a list or a mapping, found {}", kind(other))),
    }
}

/// Checks a trigger provider file; `tools` of the returned info holds its event files.
pub(crate) fn check_trigger_provider(c: &mut Checker, text: &[u8]) -> Option<ProviderInfo> {
    let doc = c.parse(text)?;
    let mut info = ProviderInfo::default();
    check_identity(c, &doc, &MANIFEST_TAGS, &mut info);
    check_subscription_schema(c, &doc);
    if at(&doc, "tools").is_some() || at(&doc, "credentials_for_provider").is_some() {
        c.problem("tools", "a trigger provider declares events, not tools or credentials_for_provider");
    }
    let events = c.req_list(at(&doc, "events"), "events").unwrap_or_default();
    if events.is_empty() {
        c.problem("events", "must list at least one event");
    }
    let mut seen = HashSet::new();
    for (i, item) in events.iter().enumerate() {
        let field = format!("events[{i}]");
        let Some(path) = item.as_str() else {
            // An inline event mapping is allowed by the daemon; check it in place.
            check_event_doc(c, item, &field);
            continue;
        };
        check_listed(c, &field, path, "events", &mut seen, &mut info.tools);
    }
    Some(info)
}

/// Checks one event file; returns its identity name.
pub(crate) fn check_event(c: &mut Checker, text: &[u8]) -> Option<String> {
    let doc = c.parse(text)?;
    check_event_doc(c, &doc, "")
}

fn check_event_doc(c: &mut Checker, doc: &Value, prefix: &str) -> Option<String> {
    let f = |name: &str| if prefix.is_empty() { name.to_owned() } else { format!("{prefix}.{name}") };
    let mut name = None;
    if c.req_map(at(doc, "identity"), &f("identity")).is_some() {
        c.req_str(at(doc, "identity.author"), &f("identity.author"));
        if let Some(n) = c.req_str(at(doc, "identity.name"), &f("identity.name")) {
            if patterns::is_identity_name(n) {
                name = Some(n.to_owned());
            } else {
                c.problem(&f("identity.name"), format!("`{n}` must match ^[a-zA-Z0-9_-]+$"));
            }
        }
        c.i18n(at(doc, "identity.label"), &f("identity.label"), true);
    }
    c.i18n(at(doc, "description"), &f("description"), true);
    let mut names = HashSet::new();
    for (i, p) in c.opt_list(at(doc, "parameters"), &f("parameters")).unwrap_or_default().iter().enumerate() {
        let pf = f(&format!("parameters[{i}]"));
        if let Some(n) = c.req_str(at(p, "name"), &format!("{pf}.name")) {
            if !names.insert(n.to_owned()) {
                c.problem(&format!("{pf}.name"), format!("`{n}` is used by another parameter"));
            }
        }
        c.one_of(at(p, "type"), &format!("{pf}.type"), &EVENT_PARAMETER_TYPES);
        c.i18n(at(p, "label"), &format!("{pf}.label"), true);
    }
    if c.opt_map(at(doc, "output_schema"), &f("output_schema")).is_some() {
        c.one_of(at(doc, "output_schema.type"), &f("output_schema.type"), &["object"]);
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems_of(check: impl FnOnce(&mut Checker)) -> Vec<String> {
        let (mut problems, mut warnings) = (Vec::new(), Vec::new());
        check(&mut Checker::new("f.yaml", &mut problems, &mut warnings));
        problems.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn the_daemons_rules_are_enforced() {
        let bad_provider = b"identity: {author: a, name: 'bad name', label: {en_US: x}, icon: i.svg}\n\
subscription_schema: [{name: k, type: password, label: {en_US: k}}, {name: k, type: text-input}]\nevents: []\n";
        let p = problems_of(|c| {
            check_trigger_provider(c, bad_provider);
        })
        .join("\n");
        for says in [
            "identity.name",
            "identity.description",
            "subscription_schema[0].type",
            "declared twice",
            "subscription_schema[1].label",
            "at least one event",
        ] {
            assert!(p.contains(says), "{says} missing in:\n{p}");
        }
        let missing_schema = b"identity: {author: a, name: n, label: {en_US: x}, description: {en_US: d}, icon: i.svg}\nevents: [events/e.yaml]\n";
        assert!(problems_of(|c| {
            check_trigger_provider(c, missing_schema);
        })
        .join("\n")
        .contains("subscription_schema"));
        let bad_event = b"identity: {author: a, name: 'e!', label: {en_US: x}}\nparameters: [{name: p, type: secret-input, label: {en_US: p}}]\n";
        let e = problems_of(|c| {
            check_event(c, bad_event);
        })
        .join("\n");
        for says in ["identity.name", "description", "parameters[0].type"] {
            assert!(e.contains(says), "{says} missing in:\n{e}");
        }
    }
}
