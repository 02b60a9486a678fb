//! Declarations (manifest, provider, tools) embedded from the package YAML files.
//!
//! The package's YAML files (`manifest.yaml`, `provider/stateful_tool.yaml`, `tools/*.yaml`)
//! and icons (`_assets/*.svg`) are compiled into the binary, so the declarations the plugin
//! reports (remote-debug registration) and the files the package ships are one source of
//! truth. The JSON forms are built from the YAML in the shapes the Python SDK sends during
//! remote registration: i18n objects filled to all four locales, credentials as a list with
//! `name`, tools inline.

use std::sync::OnceLock;

use serde_json::{json, Map, Value};

pub(crate) mod trigger;

/// The locales every i18n object carries; missing ones are filled from `en_US` (as the SDK does).
pub(crate) const LOCALES: [&str; 4] = ["en_US", "zh_Hans", "ja_JP", "pt_BR"];

/// Path of the manifest inside the package.
pub(crate) const MANIFEST_PATH: &str = "manifest.yaml";

const MANIFEST_YAML: &str = include_str!("../../manifest.yaml");

/// Every declaration file of the package: (path inside the package, content).
static YAML_FILES: [(&str, &str); 5] = [
    (MANIFEST_PATH, MANIFEST_YAML),
    ("provider/stateful_tool.yaml", include_str!("../../provider/stateful_tool.yaml")),
    ("tools/event_ingest.yaml", include_str!("../../tools/event_ingest.yaml")),
    ("tools/event_status.yaml", include_str!("../../tools/event_status.yaml")),
    ("tools/event_complete.yaml", include_str!("../../tools/event_complete.yaml")),
];

/// The icons, by their name under `_assets/` (the name the declarations use).
static ASSETS: [(&str, &[u8]); 2] = [
    ("icon.svg", include_bytes!("../../_assets/icon.svg")),
    ("icon-dark.svg", include_bytes!("../../_assets/icon-dark.svg")),
];

/// The plugin version, read from `manifest.yaml` at compile time.
pub(crate) const PLUGIN_VERSION: &str = yaml_top_level_scalar(MANIFEST_YAML, "version");

// The daemon identifies a package by the manifest version; the binary reports Cargo's.
const _: () = assert!(
    const_str_eq(PLUGIN_VERSION, env!("CARGO_PKG_VERSION")),
    "manifest.yaml `version` must equal the version in Cargo.toml"
);

/// Permission blocks of `resource.permission`, in the order the SDK sends them.
const PERMISSION_KINDS: [&str; 6] = ["tool", "model", "node", "endpoint", "app", "storage"];

/// Provider lists of `plugins`, in the order the SDK sends them.
const PROVIDER_KINDS: [&str; 6] = ["tools", "models", "endpoints", "agent_strategies", "datasources", "triggers"];

/// The manifest as the SDK's `manifest_declaration` JSON (plus `tags` and `privacy`, which
/// the daemon's `PluginDeclaration` also carries).
pub fn manifest() -> &'static Value {
    static MANIFEST: OnceLock<Value> = OnceLock::new();
    MANIFEST.get_or_init(|| manifest_declaration(&parse_yaml(MANIFEST_PATH)))
}

/// The tool provider as the SDK's `tool_declaration[0]` JSON: `identity`,
/// `credentials_schema` (a list, each item with `name`), `oauth_schema`, and `tools` inline.
pub fn tool_provider() -> &'static Value {
    static PROVIDER: OnceLock<Value> = OnceLock::new();
    PROVIDER.get_or_init(|| {
        // The daemon uses the last file of `plugins.tools` as the provider.
        let path = manifest()["plugins"]["tools"]
            .as_array()
            .and_then(|paths| paths.last())
            .and_then(Value::as_str)
            .expect("manifest.yaml lists a tool provider under plugins.tools");
        provider_declaration(&parse_yaml(path))
    })
}

/// One inline tool declaration, by tool name.
pub fn declared_tool(name: &str) -> Option<&'static Value> {
    tools().iter().find(|t| t["identity"]["name"] == name)
}

/// The tool names, in declaration order.
pub fn tool_names() -> Vec<&'static str> {
    tools().iter().filter_map(|t| t["identity"]["name"].as_str()).collect()
}

/// The provider name (`identity.name` of the provider): `stateful_tool`.
#[cfg(test)]
pub(crate) fn provider_name() -> &'static str {
    tool_provider()["identity"]["name"].as_str().expect("provider identity.name is a string")
}

/// The declared default of a provider credential, as text (`None` when it has none or the
/// credential does not exist).
#[cfg(test)]
pub(crate) fn credential_default(name: &str) -> Option<String> {
    let credential = tool_provider()["credentials_schema"].as_array()?.iter().find(|c| c["name"] == name)?;
    match &credential["default"] {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The icons: `(name under _assets/, bytes)`.
pub fn assets() -> &'static [(&'static str, &'static [u8])] {
    &ASSETS
}

/// The declaration files as packaged: `(path inside the package, YAML text)`.
#[cfg(test)]
pub(crate) fn yaml_files() -> &'static [(&'static str, &'static str)] {
    &YAML_FILES
}

fn tools() -> &'static [Value] {
    tool_provider()["tools"].as_array().map(Vec::as_slice).unwrap_or_default()
}

fn parse_yaml(path: &str) -> Value {
    parse_embedded(&YAML_FILES, "", path)
}

/// Embedded declaration file `path` of `files` (a package's, whose folder in this repository
/// is `folder`), parsed.
fn parse_embedded(files: &[(&str, &str)], folder: &str, path: &str) -> Value {
    let text = files
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, text)| *text)
        .unwrap_or_else(|| panic!("declaration file {folder}{path} is not embedded in the binary"));
    yaml_serde::from_str(text).unwrap_or_else(|e| panic!("embedded {folder}{path} is not valid: {e}"))
}

/// A provider's `identity` as the daemon's declarations carry it (tool and trigger alike).
fn provider_identity(id: &Value) -> Value {
    json!({
        "author": id["author"],
        "name": id["name"],
        "description": i18n(&id["description"]),
        "icon": id["icon"],
        "icon_dark": id["icon_dark"],
        "label": i18n(&id["label"]),
        "tags": list_or_empty(&id["tags"]),
    })
}

/// An i18n object with all four locales (missing or empty ones take `en_US`); `null` when
/// the YAML has none.
fn i18n(v: &Value) -> Value {
    let Some(obj) = v.as_object() else {
        return Value::Null;
    };
    let en = obj.get("en_US").cloned().unwrap_or(Value::Null);
    let mut out = Map::new();
    for locale in LOCALES {
        let text = match obj.get(locale) {
            Some(Value::String(s)) if !s.is_empty() => Value::String(s.clone()),
            _ => en.clone(),
        };
        out.insert(locale.to_owned(), text);
    }
    Value::Object(out)
}

fn bool_or_false(v: &Value) -> bool {
    v.as_bool().unwrap_or(false)
}

fn list_or_empty(v: &Value) -> Value {
    if v.is_array() {
        v.clone()
    } else {
        json!([])
    }
}

/// Option `value`s are strings to both the daemon and the SDK (the SDK coerces them).
fn option_value(v: &Value) -> Value {
    match v {
        Value::String(_) => v.clone(),
        Value::Null => Value::Null,
        other => Value::String(other.to_string()),
    }
}

fn manifest_declaration(y: &Value) -> Value {
    let permission = match y["resource"]["permission"].as_object() {
        Some(perm) => Value::Object(
            PERMISSION_KINDS.iter().map(|k| ((*k).to_owned(), perm.get(*k).cloned().unwrap_or(Value::Null))).collect(),
        ),
        None => Value::Null,
    };
    let plugins: Map<String, Value> =
        PROVIDER_KINDS.iter().map(|k| ((*k).to_owned(), list_or_empty(&y["plugins"][*k]))).collect();
    let meta = &y["meta"];
    json!({
        "version": y["version"],
        "type": y["type"],
        "author": y["author"],
        "name": y["name"],
        "repo": y["repo"],
        "description": i18n(&y["description"]),
        "icon": y["icon"],
        "icon_dark": y["icon_dark"],
        "label": i18n(&y["label"]),
        "created_at": y["created_at"],
        "resource": {
            "memory": y["resource"]["memory"],
            "permission": permission,
        },
        "plugins": plugins,
        "meta": {
            "version": meta["version"],
            "arch": meta["arch"],
            "runner": {
                "language": meta["runner"]["language"],
                "version": meta["runner"]["version"],
                "entrypoint": meta["runner"]["entrypoint"],
            },
            "minimum_dify_version": meta["minimum_dify_version"],
        },
        "tags": list_or_empty(&y["tags"]),
        "privacy": y["privacy"],
    })
}

fn provider_declaration(y: &Value) -> Value {
    let id = &y["identity"];
    // Mapping form (name -> config) is what the YAML uses; a list with `name` also works.
    let credentials: Vec<Value> = match &y["credentials_for_provider"] {
        Value::Object(map) => map.iter().map(|(n, c)| credential(n, c)).collect(),
        Value::Array(items) => items.iter().map(|c| credential(c["name"].as_str().unwrap_or_default(), c)).collect(),
        _ => Vec::new(),
    };
    let tools: Vec<Value> = y["tools"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|item| match item.as_str() {
            Some(path) => tool_declaration(&parse_yaml(path)),
            None => tool_declaration(item),
        })
        .collect();
    json!({
        "identity": provider_identity(id),
        "credentials_schema": credentials,
        "oauth_schema": y["oauth_schema"],
        "tools": tools,
    })
}

fn credential(name: &str, c: &Value) -> Value {
    let options = c["options"].as_array().map(|opts| {
        opts.iter()
            .map(|o| json!({ "value": option_value(&o["value"]), "label": i18n(&o["label"]) }))
            .collect::<Vec<_>>()
    });
    json!({
        "name": name,
        "type": c["type"],
        "scope": c["scope"],
        "required": bool_or_false(&c["required"]),
        "default": c["default"],
        "options": options,
        "multiple": bool_or_false(&c["multiple"]),
        "label": i18n(&c["label"]),
        "help": i18n(&c["help"]),
        "url": c["url"],
        "placeholder": i18n(&c["placeholder"]),
    })
}

fn tool_declaration(y: &Value) -> Value {
    let id = &y["identity"];
    let parameters: Vec<Value> =
        y["parameters"].as_array().map(Vec::as_slice).unwrap_or_default().iter().map(parameter).collect();
    json!({
        "identity": {
            "author": id["author"],
            "name": id["name"],
            "label": i18n(&id["label"]),
        },
        "parameters": parameters,
        "description": {
            "human": i18n(&y["description"]["human"]),
            "llm": y["description"]["llm"],
        },
        "has_runtime_parameters": bool_or_false(&y["has_runtime_parameters"]),
        "output_schema": y["output_schema"],
    })
}

fn parameter(p: &Value) -> Value {
    let options = p["options"].as_array().map(|opts| {
        opts.iter()
            .map(|o| {
                json!({
                    "value": option_value(&o["value"]),
                    "label": i18n(&o["label"]),
                    "icon": o["icon"],
                    "show_on": list_or_empty(&o["show_on"]),
                })
            })
            .collect::<Vec<_>>()
    });
    json!({
        "name": p["name"],
        "label": i18n(&p["label"]),
        "human_description": i18n(&p["human_description"]),
        "type": p["type"],
        "auto_generate": p["auto_generate"],
        "template": p["template"],
        "scope": p["scope"],
        "form": p["form"],
        "llm_description": p["llm_description"],
        "required": bool_or_false(&p["required"]),
        "multiple": bool_or_false(&p["multiple"]),
        "default": p["default"],
        "min": p["min"],
        "max": p["max"],
        "precision": p["precision"],
        "options": options,
        "input_schema": p["input_schema"],
        "show_on": list_or_empty(&p["show_on"]),
    })
}

/// The scalar value of a top-level `key: value` line of a YAML text (quotes and a trailing
/// `# comment` removed). Compile-time only; panics (a build error) when the key is missing.
const fn yaml_top_level_scalar(text: &'static str, key: &str) -> &'static str {
    let b = text.as_bytes();
    let k = key.as_bytes();
    let mut i = 0;
    while i + k.len() < b.len() {
        if (i == 0 || b[i - 1] == b'\n') && b[i + k.len()] == b':' && bytes_at(b, i, k) {
            let mut start = i + k.len() + 1;
            while start < b.len() && b[start] == b' ' {
                start += 1;
            }
            let mut end = start;
            while end < b.len() && b[end] != b'\n' && b[end] != b'\r' && !(b[end] == b'#' && b[end - 1] == b' ') {
                end += 1;
            }
            while end > start && b[end - 1] == b' ' {
                end -= 1;
            }
            if end - start >= 2 && (b[start] == b'"' || b[start] == b'\'') && b[end - 1] == b[start] {
                start += 1;
                end -= 1;
            }
            assert!(end > start, "empty top-level YAML value");
            let (_, rest) = b.split_at(start);
            let (value, _) = rest.split_at(end - start);
            return match core::str::from_utf8(value) {
                Ok(s) => s,
                Err(_) => panic!("top-level YAML value is not UTF-8"),
            };
        }
        i += 1;
    }
    panic!("top-level YAML key not found")
}

const fn bytes_at(haystack: &[u8], at: usize, needle: &[u8]) -> bool {
    let mut j = 0;
    while j < needle.len() {
        if haystack[at + j] != needle[j] {
            return false;
        }
        j += 1;
    }
    true
}

const fn const_str_eq(a: &str, b: &str) -> bool {
    a.len() == b.len() && bytes_at(a.as_bytes(), 0, b.as_bytes())
}

/// Dify's editor as rules (tests only): what its pickers offer, what its forms show.
#[cfg(test)]
mod editor;
#[cfg(test)]
mod tests;
