//! Checks of the declarations against every static rule of the package spec and vector 12.

use super::*;
use std::collections::BTreeSet;

/// Raw YAML of one embedded file.
fn raw(path: &str) -> Value {
    parse_yaml(path)
}

fn raw_tools() -> Vec<(String, Value)> {
    raw(provider_path())["tools"]
        .as_array()
        .expect("provider tools is a list")
        .iter()
        .map(|p| {
            let path = p.as_str().expect("tool entries are paths").to_owned();
            let yaml = raw(&path);
            (path, yaml)
        })
        .collect()
}

fn provider_path() -> &'static str {
    manifest()["plugins"]["tools"][0].as_str().unwrap()
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object().unwrap_or_else(|| panic!("expected an object, got {v}")).keys().map(String::as_str).collect()
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str().unwrap_or_else(|| panic!("{what} must be a string, got {v}"))
}

// Tiny character-class checks standing in for the validators' regexes.
fn only(s: &str, allowed: impl Fn(char) -> bool) -> bool {
    s.chars().all(allowed)
}
/// `^[a-z0-9_-]{1,max}$`
fn is_lower_slug(s: &str, max: usize) -> bool {
    (1..=max).contains(&s.len()) && only(s, |c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}
/// `^[a-zA-Z0-9_-]+$`
fn is_identity_name(s: &str) -> bool {
    !s.is_empty() && only(s, |c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}
/// `^\d{1,4}(\.\d{1,4}){2}$` (also a valid PEP 440 release)
fn is_version(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() == 3 && parts.iter().all(|p| (1..=4).contains(&p.len()) && only(p, |c| c.is_ascii_digit()))
}
/// What google/uuid would parse (8-4-4-4-12 hex, or 32 bare hex digits).
fn looks_like_uuid(s: &str) -> bool {
    let hex = s.replace('-', "");
    hex.len() == 32 && only(&hex, |c| c.is_ascii_hexdigit())
}

/// An i18n object of the YAML: all four locales, non-empty strings, < 1024 chars each.
fn assert_i18n_full(v: &Value, what: &str) {
    let obj = v.as_object().unwrap_or_else(|| panic!("{what}: i18n object missing"));
    for locale in LOCALES {
        let text = obj.get(locale).and_then(Value::as_str).unwrap_or_else(|| panic!("{what}: locale {locale} missing"));
        assert!(!text.trim().is_empty(), "{what}.{locale} is empty");
        assert!(text.chars().count() < 1024, "{what}.{locale} is >= 1024 chars");
    }
    for key in obj.keys() {
        assert!(LOCALES.contains(&key.as_str()), "{what}: unknown locale {key}");
    }
}

/// Every i18n-valued key anywhere in a YAML document (outside `output_schema`, whose
/// `description`s are plain JSON-Schema strings) has all four locales.
fn walk_i18n(v: &Value, path: &str, found: &mut usize) {
    const I18N_KEYS: [&str; 6] = ["label", "description", "human", "human_description", "help", "placeholder"];
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let here = format!("{path}.{k}");
                if k == "output_schema" {
                    continue;
                }
                let is_tool_description = k == "description" && child.get("human").is_some();
                if I18N_KEYS.contains(&k.as_str()) && !is_tool_description {
                    assert_i18n_full(child, &here);
                    *found += 1;
                } else {
                    walk_i18n(child, &here, found);
                }
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                walk_i18n(child, &format!("{path}[{i}]"), found);
            }
        }
        _ => {}
    }
}

fn asset_names() -> BTreeSet<&'static str> {
    assets().iter().map(|(name, _)| *name).collect()
}

#[test]
fn every_yaml_file_parses_to_a_mapping() {
    assert_eq!(yaml_files().len(), 5);
    for (path, text) in yaml_files() {
        let v: Value = yaml_serde::from_str(text).unwrap_or_else(|e| panic!("{path} does not parse: {e}"));
        assert!(v.is_object(), "{path} is not a mapping");
    }
    // The embedded set is exactly what the package references.
    let mut referenced: BTreeSet<String> = BTreeSet::from([MANIFEST_PATH.to_owned()]);
    referenced.insert(provider_path().to_owned());
    referenced.extend(raw_tools().into_iter().map(|(path, _)| path));
    let embedded: BTreeSet<String> = yaml_files().iter().map(|(p, _)| (*p).to_owned()).collect();
    assert_eq!(referenced, embedded);
}

#[test]
fn plugin_version_is_the_manifest_and_cargo_version() {
    assert_eq!(PLUGIN_VERSION, env!("CARGO_PKG_VERSION"));
    assert_eq!(manifest()["version"], PLUGIN_VERSION);
    assert!(is_version(PLUGIN_VERSION));
}

#[test]
fn const_yaml_scalar_reader() {
    const TEXT: &str = "a: 1\nversion: \"1.2.3\" # note\n  version: 9.9.9\nname: x\n";
    assert_eq!(yaml_top_level_scalar(TEXT, "version"), "1.2.3");
    assert_eq!(yaml_top_level_scalar(TEXT, "name"), "x");
    assert!(const_str_eq("abc", "abc"));
    assert!(!const_str_eq("abc", "abcd"));
    assert!(!const_str_eq("abd", "abc"));
}

#[test]
fn manifest_follows_spec_section_1() {
    let y = raw(MANIFEST_PATH);
    let version = str_of(&y["version"], "version");
    assert!(is_version(version), "version {version}");
    assert_eq!(y["type"], "plugin");
    let author = str_of(&y["author"], "author");
    assert!(is_lower_slug(author, 64), "author {author}");
    assert!(!author.contains("dify") && !author.contains("langgenius"));
    assert!(!looks_like_uuid(author));
    assert_eq!(author, "eventsmith");
    let name = str_of(&y["name"], "name");
    assert!(is_lower_slug(name, 128), "name {name}");
    assert_eq!(name, "stateful_tool");
    assert_i18n_full(&y["label"], "manifest.label");
    assert_i18n_full(&y["description"], "manifest.description");
    for key in ["icon", "icon_dark"] {
        let icon = str_of(&y[key], key);
        assert!(icon.len() <= 128 && !icon.contains('/'), "{key} is a bare file name");
        assert!(asset_names().contains(icon), "{key} {icon} is not in assets()");
    }
    assert_eq!(y["resource"]["memory"], 268_435_456);
    let permission = y["resource"]["permission"].as_object().unwrap();
    assert_eq!(permission.keys().collect::<Vec<_>>(), ["tool"]);
    assert_eq!(permission["tool"], json!({ "enabled": true }));
    let plugins = y["plugins"].as_object().unwrap();
    assert_eq!(plugins.keys().collect::<Vec<_>>(), ["tools"]);
    assert_eq!(plugins["tools"], json!(["provider/stateful_tool.yaml"]));
    let meta = &y["meta"];
    assert!(is_version(str_of(&meta["version"], "meta.version")));
    assert_eq!(meta["arch"], json!(["amd64", "arm64"]));
    assert_eq!(meta["runner"]["language"], "python");
    // Quoted: an unquoted 3.12 is a float and fails the SDK.
    assert_eq!(meta["runner"]["version"], json!("3.12"));
    assert_eq!(meta["runner"]["entrypoint"], "main");
    assert!(is_version(str_of(&meta["minimum_dify_version"], "minimum_dify_version")));
    let created_at = str_of(&y["created_at"], "created_at");
    assert!(created_at.ends_with('Z'), "created_at {created_at} is UTC with Z");
    chrono::DateTime::parse_from_rfc3339(created_at).expect("created_at is RFC 3339");
    assert_eq!(y["privacy"], "PRIVACY.md");
    let repo = str_of(&y["repo"], "repo");
    assert!(repo.starts_with("https://") && !repo.contains(' '));
    use difypkg::MANIFEST_TAGS as DAEMON_TAGS;
    for tag in y["tags"].as_array().unwrap() {
        assert!(DAEMON_TAGS.contains(&str_of(tag, "tag")), "tag {tag}");
    }
    assert!(y.get("verified").is_none(), "`verified` is set by the daemon");
}

#[test]
fn files_the_manifest_and_shim_need_exist() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let y = raw(MANIFEST_PATH);
    let entrypoint = str_of(&y["meta"]["runner"]["entrypoint"], "entrypoint");
    for file in [format!("{entrypoint}.py"), "requirements.txt".to_owned(), str_of(&y["privacy"], "privacy").to_owned()]
    {
        assert!(root.join(&file).is_file(), "{file} is missing");
    }
    for (name, bytes) in assets() {
        let on_disk = std::fs::read(root.join("_assets").join(name)).unwrap();
        assert_eq!(&on_disk[..], *bytes, "_assets/{name}");
    }
}

#[test]
fn every_i18n_object_has_four_locales() {
    let mut found = 0;
    for (path, text) in yaml_files() {
        let v: Value = yaml_serde::from_str(text).unwrap();
        walk_i18n(&v, path, &mut found);
    }
    assert!(found >= 40, "only {found} i18n objects seen");
    // And the JSON forms carry exactly the four locales too.
    let mut found_json = 0;
    walk_i18n_json(manifest(), &mut found_json);
    walk_i18n_json(tool_provider(), &mut found_json);
    assert!(found_json >= 40, "only {found_json} i18n objects in JSON");
}

fn walk_i18n_json(v: &Value, found: &mut usize) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                if k == "output_schema" {
                    continue;
                }
                let i18n_key = ["label", "human", "human_description", "help", "placeholder"].contains(&k.as_str())
                    || (k == "description" && child.get("human").is_none());
                if i18n_key && !child.is_null() {
                    assert_eq!(keys(child), BTreeSet::from(LOCALES), "{k}");
                    *found += 1;
                } else {
                    walk_i18n_json(child, found);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|c| walk_i18n_json(c, found)),
        _ => {}
    }
}

#[test]
fn provider_follows_spec_section_2_1() {
    let y = raw(provider_path());
    let m = raw(MANIFEST_PATH);
    let id = &y["identity"];
    assert_eq!(id["author"], m["author"]);
    let name = str_of(&id["name"], "identity.name");
    assert!(is_identity_name(name));
    assert_eq!(name, str_of(&m["name"], "name"));
    assert_i18n_full(&id["label"], "provider.label");
    assert_i18n_full(&id["description"], "provider.description");
    for key in ["icon", "icon_dark"] {
        let icon = str_of(&id[key], key);
        assert!(asset_names().contains(icon), "provider {key} {icon}");
    }
    use difypkg::PROVIDER_TAGS as SDK_TAGS;
    for tag in id["tags"].as_array().unwrap() {
        assert!(SDK_TAGS.contains(&str_of(tag, "tag")), "provider tag {tag}");
    }
    // The SDK accepts credentials only in mapping form under credentials_for_provider.
    assert!(y.get("credentials_schema").is_none());
    let creds = y["credentials_for_provider"].as_object().expect("credentials_for_provider is a mapping");
    let expected = [
        ("kv_url", "text-input", true),
        ("kv_token", "secret-input", false),
        ("namespace", "text-input", false),
        ("event_types", "text-input", false),
        ("retention", "text-input", false),
        ("min_replicas", "text-input", false),
        ("default_lease_seconds", "text-input", false),
    ];
    let names: Vec<&str> = creds.keys().map(String::as_str).collect();
    assert_eq!(names, expected.map(|e| e.0));
    const CREDENTIAL_TYPES: [&str; 7] =
        ["secret-input", "text-input", "select", "boolean", "model-selector", "app-selector", "array[tools]"];
    for (name, ty, required) in expected {
        let c = &creds[name];
        assert_eq!(c["type"], ty, "{name}.type");
        assert!(CREDENTIAL_TYPES.contains(&ty));
        assert_eq!(c["required"], required, "{name}.required");
        assert!(c.get("name").is_none(), "{name}: name comes from the mapping key");
        assert_i18n_full(&c["label"], &format!("{name}.label"));
        assert_i18n_full(&c["help"], &format!("{name}.help"));
        assert_i18n_full(&c["placeholder"], &format!("{name}.placeholder"));
        assert!(
            matches!(c["default"], Value::Null | Value::String(_) | Value::Number(_) | Value::Bool(_)),
            "{name}.default is a scalar"
        );
        assert!(c.get("options").is_none() || ty == "select");
        assert!(c.get("scope").is_none(), "scope is only for selectors");
    }
    let tools = y["tools"].as_array().unwrap();
    assert!(tools.iter().all(Value::is_string), "tools are paths");
    assert!(y.get("extra").is_none(), "no extra.python: native plugin");
}

use difypkg::{PARAMETER_FORMS, PARAMETER_TYPES};
const JSON_SCHEMA_TYPES: [&str; 7] = ["string", "number", "integer", "boolean", "object", "array", "null"];

#[test]
fn tools_follow_spec_section_2_2() {
    let author = raw(MANIFEST_PATH)["author"].clone();
    let mut tool_names_seen = BTreeSet::new();
    for (path, y) in raw_tools() {
        let id = &y["identity"];
        let name = str_of(&id["name"], "identity.name");
        assert!(is_identity_name(name), "{path}: name {name}");
        assert!(tool_names_seen.insert(name.to_owned()), "duplicate tool {name}");
        assert_eq!(path, format!("tools/{name}.yaml"));
        assert_eq!(id["author"], author, "{path}: author");
        assert_i18n_full(&id["label"], &format!("{path}: label"));
        assert_i18n_full(&y["description"]["human"], &format!("{path}: human"));
        let llm = str_of(&y["description"]["llm"], "description.llm");
        assert!(!llm.trim().is_empty(), "{path}: description.llm");
        assert!(y.get("extra").is_none(), "{path}: no extra.python");
        assert!(y.get("has_runtime_parameters").is_none(), "{path}");

        let mut param_names = BTreeSet::new();
        for p in y["parameters"].as_array().unwrap() {
            let pname = str_of(&p["name"], "parameter name");
            let what = format!("{path}: {pname}");
            assert!((1..1024).contains(&pname.len()), "{what}");
            assert!(param_names.insert(pname), "{what}: duplicate");
            let ty = str_of(&p["type"], "type");
            assert!(PARAMETER_TYPES.contains(&ty), "{what}: type {ty}");
            let form = str_of(&p["form"], "form");
            assert!(PARAMETER_FORMS.contains(&form), "{what}: form {form}");
            assert_i18n_full(&p["label"], &format!("{what}.label"));
            assert_i18n_full(&p["human_description"], &format!("{what}.human_description"));
            let llm = str_of(&p["llm_description"], "llm_description");
            assert!(!llm.trim().is_empty(), "{what}: llm_description");
            assert!(p["required"].is_boolean(), "{what}: required is a bool");
            let multiple = p["multiple"].as_bool().unwrap_or(false);
            assert!(!multiple || ty == "select" || ty == "dynamic-select", "{what}: multiple only for selects");
            if ty == "select" {
                let options = p["options"].as_array().expect("select has options");
                assert!(!options.is_empty() && options.len() < 128, "{what}");
                let mut values = Vec::new();
                for o in options {
                    let value = str_of(&o["value"], "option value");
                    assert!(!value.is_empty() && value.len() < 128, "{what}");
                    assert_i18n_full(&o["label"], &format!("{what} option {value}"));
                    values.push(value);
                }
                match &p["default"] {
                    Value::Null => {}
                    Value::Array(_) => assert!(multiple, "{what}: list default needs multiple"),
                    d => assert!(
                        !multiple && values.contains(&str_of(d, "default")),
                        "{what}: default {d} must be one of the options"
                    ),
                }
            } else {
                assert!(p.get("options").is_none(), "{what}: options only for selects");
            }
            for bound in ["min", "max"] {
                if let Some(b) = p.get(bound) {
                    assert!(ty == "number" && b.is_number(), "{what}: {bound}");
                }
            }
            if let (Some(lo), Some(hi)) = (p["min"].as_f64(), p["max"].as_f64()) {
                assert!(lo <= hi, "{what}: min <= max");
            }
        }

        let schema = &y["output_schema"];
        assert_eq!(schema["type"], "object", "{path}: output_schema");
        let props = schema["properties"].as_object().expect("properties");
        assert!(!props.is_empty());
        for (prop, s) in props {
            // One string type: Dify's tool panels read `type` as a string.
            let ty = str_of(&s["type"], &format!("{path}: {prop}.type"));
            assert!(JSON_SCHEMA_TYPES.contains(&ty), "{path}: {prop}.type {ty}");
            assert!(s["description"].is_string(), "{path}: {prop}.description");
        }
    }
}

fn param<'a>(tool: &'a Value, name: &str) -> &'a Value {
    tool["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("parameter {name}"))
}

fn output_properties(tool: &Value) -> BTreeSet<&str> {
    keys(&tool["output_schema"]["properties"])
}

#[test]
fn tools_declare_the_agreed_contract() {
    assert_eq!(tool_names(), ["event_ingest", "event_status", "event_complete"]);
    assert!(declared_tool("nope").is_none());

    let ingest = declared_tool("event_ingest").unwrap();
    let shape = |t: &Value| -> Vec<(String, String, String, bool)> {
        t["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap().to_owned(),
                    p["type"].as_str().unwrap().to_owned(),
                    p["form"].as_str().unwrap().to_owned(),
                    p["required"].as_bool().unwrap(),
                )
            })
            .collect()
    };
    let s = |a: &str, b: &str, c: &str, d| (a.to_owned(), b.to_owned(), c.to_owned(), d);
    assert_eq!(
        shape(ingest),
        [
            s("event_id", "string", "llm", true),
            s("event_type", "string", "llm", true),
            s("payload", "string", "llm", false),
            s("lease_seconds", "number", "form", false),
            s("run_id", "string", "llm", false),
        ]
    );
    let lease = param(ingest, "lease_seconds");
    assert_eq!((lease["min"].as_f64(), lease["max"].as_f64()), (Some(0.0), Some(86400.0)));
    let id_llm = param(ingest, "event_id")["llm_description"].as_str().unwrap();
    assert!(id_llm.contains("source system's own id") && id_llm.contains("Never invent"), "{id_llm}");
    let attempt_llm = param(declared_tool("event_complete").unwrap(), "attempt")["llm_description"].as_str().unwrap();
    assert!(attempt_llm.contains("always pass it back"), "{attempt_llm}");
    assert_eq!(
        output_properties(ingest),
        BTreeSet::from([
            "outcome",
            "accepted",
            "duplicate",
            "retry",
            "retry_of_same_run",
            "event_id",
            "event_type",
            "status",
            "received_at",
            "updated_at",
            "attempt",
            "fingerprint",
            "lease_until",
            "key",
            // Also returned by the tool (the record's other fields):
            "completed_at",
            "result",
            "payload_compared_as",
        ])
    );
    let props = &ingest["output_schema"]["properties"];
    assert_eq!(props["payload_compared_as"]["enum"], json!(["json", "text", "none"]));
    assert_eq!(props["outcome"]["enum"], json!(["accepted", "duplicate"]));
    assert_eq!(props["status"]["enum"], json!(["processing", "completed", "failed"]));
    // `number`, not `integer`: Dify's editor offers only number variables to a number field (Attempt).
    assert_eq!(props["attempt"]["type"], "number");

    let status = declared_tool("event_status").unwrap();
    assert_eq!(shape(status), [s("event_id", "string", "llm", true)]);
    assert_eq!(
        output_properties(status),
        BTreeSet::from([
            "outcome",
            "found",
            "event_id",
            "event_type",
            "payload",
            "fingerprint",
            "status",
            "received_at",
            "updated_at",
            "attempt",
            "lease_until",
            "completed_at",
            "result",
            // Also returned by the tool (beyond the agreed minimum):
            "lease_expired",
            "stuck",
            "waiting_for_run",
            "started_at",
            "key",
        ])
    );
    assert_eq!(status["output_schema"]["properties"]["outcome"]["enum"], json!(["found", "not_found"]));

    let complete = declared_tool("event_complete").unwrap();
    assert_eq!(
        shape(complete),
        [
            s("event_id", "string", "llm", true),
            s("status", "select", "llm", true),
            s("attempt", "number", "llm", false),
            s("result", "string", "llm", false),
        ]
    );
    let st = param(complete, "status");
    assert_eq!(st["default"], "completed");
    let values: Vec<&str> = st["options"].as_array().unwrap().iter().map(|o| o["value"].as_str().unwrap()).collect();
    assert_eq!(values, ["completed", "failed"]);
    assert_eq!(
        output_properties(complete),
        BTreeSet::from([
            "outcome",
            "event_id",
            "status",
            "attempt",
            "completed_at",
            "result",
            // Also returned by the tool (the record's other fields):
            "event_type",
            "received_at",
            "updated_at",
            "fingerprint",
            "lease_until",
            "key",
        ])
    );
    assert_eq!(
        complete["output_schema"]["properties"]["outcome"]["enum"],
        json!(["completed", "failed", "already_completed", "already_failed"])
    );
}

#[test]
fn provider_accessors() {
    assert_eq!(provider_name(), "stateful_tool");
    // No default: the placeholder shows both URL forms (127.0.0.1 is the plugin's own container).
    assert_eq!(credential_default("kv_url"), None);
    assert_eq!(credential_default("event_types").as_deref(), Some("created,updated,closed"));
    assert_eq!(credential_default("retention").as_deref(), Some("7d"));
    assert_eq!(credential_default("min_replicas").as_deref(), Some("0"));
    assert_eq!(credential_default("default_lease_seconds").as_deref(), Some("1200"));
    assert_eq!(credential_default("kv_token"), None);
    assert_eq!(credential_default("namespace"), None);
    assert_eq!(credential_default("nope"), None);
}

#[test]
fn json_forms_are_built_from_the_yaml() {
    let p = tool_provider();
    let creds = p["credentials_schema"].as_array().unwrap();
    let names: Vec<&str> = creds.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["kv_url", "kv_token", "namespace", "event_types", "retention", "min_replicas", "default_lease_seconds"]
    );
    assert_eq!(creds[0]["type"], "text-input");
    assert_eq!(creds[0]["required"], true);
    assert_eq!(creds[1]["type"], "secret-input");
    assert_eq!(creds[1]["default"], Value::Null);
    assert_eq!(p["oauth_schema"], Value::Null);
    assert_eq!(p["identity"]["icon_dark"], "icon-dark.svg");
    assert_eq!(p["identity"]["tags"], json!(["utilities", "productivity"]));
    for t in p["tools"].as_array().unwrap() {
        assert_eq!(t["has_runtime_parameters"], false);
        assert!(t["output_schema"].is_object());
        assert!(t.get("extra").is_none());
        assert!(t["description"]["llm"].is_string());
    }
    let m = manifest();
    assert_eq!(m["plugins"]["tools"], json!(["provider/stateful_tool.yaml"]));
    for kind in &PROVIDER_KINDS[1..] {
        assert_eq!(m["plugins"][*kind], json!([]), "plugins.{kind}");
    }
    assert_eq!(m["resource"]["permission"]["tool"], json!({ "enabled": true }));
    assert_eq!(m["resource"]["permission"]["storage"], Value::Null);
    assert_eq!(m["meta"]["minimum_dify_version"], "1.0.0");
    assert_eq!(m["meta"]["runner"]["version"], "3.12");
    assert_eq!(m["label"]["ja_JP"], raw(MANIFEST_PATH)["label"]["ja_JP"]);
    // Missing locales are filled from en_US, as the SDK does.
    assert_eq!(
        i18n(&json!({ "en_US": "x", "ja_JP": "" })),
        json!({ "en_US": "x", "zh_Hans": "x", "ja_JP": "x", "pt_BR": "x" })
    );
    assert_eq!(i18n(&Value::Null), Value::Null);
}

/// The SDK's registration lines (`manifest_declaration`, `tool_declaration[0]`).
fn vector12() -> (Value, Value) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/spec/examples/12-remote-tcp-registration.plugin-to-daemon.jsonl"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read test vector {path}: {e}"));
    let (mut manifest, mut provider) = (None, None);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).expect("vector line is JSON");
        match v["type"].as_str() {
            Some("manifest_declaration") => manifest = Some(v["data"].clone()),
            Some("tool_declaration") => provider = Some(v["data"][0].clone()),
            _ => {}
        }
    }
    (manifest.expect("vector has manifest_declaration"), provider.expect("vector has tool_declaration"))
}

#[test]
fn json_shapes_match_vector_12() {
    let (vm, vp) = vector12();
    let m = manifest();
    // Manifest: the SDK's keys, plus `tags`/`privacy` (fields of the daemon's struct).
    let ours = keys(m);
    let theirs = keys(&vm);
    assert!(theirs.is_subset(&ours), "missing: {:?}", theirs.difference(&ours));
    let extra: BTreeSet<&str> = ours.difference(&theirs).copied().collect();
    assert_eq!(extra, BTreeSet::from(["privacy", "tags"]));
    for path in [
        &["resource"][..],
        &["resource", "permission"],
        &["plugins"],
        &["meta"],
        &["meta", "runner"],
        &["label"],
        &["description"],
    ] {
        let get = |mut v: &Value| {
            for k in path {
                v = &v[*k];
            }
            keys(v).into_iter().map(str::to_owned).collect::<BTreeSet<_>>()
        };
        assert_eq!(get(m), get(&vm), "manifest {path:?}");
    }
    assert_eq!(m["created_at"].as_str().map(|s| s.ends_with('Z')), Some(true));

    // Provider, credential item, tool, tool identity, parameter, description.
    let p = tool_provider();
    let mut vp_keys = keys(&vp);
    vp_keys.remove("extra"); // SDK-only (`extra.python`), deliberately absent
    assert_eq!(keys(p), vp_keys);
    assert_eq!(keys(&p["identity"]), keys(&vp["identity"]));
    assert_eq!(keys(&p["credentials_schema"][0]), keys(&vp["credentials_schema"][0]));
    for c in p["credentials_schema"].as_array().unwrap() {
        assert_eq!(keys(c), keys(&vp["credentials_schema"][0]));
    }
    let vtool = &vp["tools"][0];
    let mut vtool_keys = keys(vtool);
    vtool_keys.remove("extra"); // SDK-only, deliberately absent
    for t in p["tools"].as_array().unwrap() {
        assert_eq!(keys(t), vtool_keys);
        assert_eq!(keys(&t["identity"]), keys(&vtool["identity"]));
        assert_eq!(keys(&t["description"]), keys(&vtool["description"]));
        for prm in t["parameters"].as_array().unwrap() {
            assert_eq!(keys(prm), keys(&vtool["parameters"][0]));
            assert_eq!(keys(&prm["label"]), keys(&vtool["parameters"][0]["label"]));
        }
    }
    // Value types where the vector has non-null values.
    assert!(p["credentials_schema"].is_array());
    assert!(p["tools"][0]["parameters"][0]["show_on"].is_array());
    assert_eq!(
        keys(&declared_tool("event_complete").unwrap()["parameters"][1]["options"][0]),
        BTreeSet::from(["icon", "label", "show_on", "value"])
    );
}

#[test]
fn icons_are_small_original_self_contained_svgs() {
    assert_eq!(assets().iter().map(|(n, _)| *n).collect::<Vec<_>>(), ["icon.svg", "icon-dark.svg"]);
    for (name, bytes) in assets() {
        let text = std::str::from_utf8(bytes).expect("SVG is UTF-8");
        assert!(bytes.len() < 4096, "{name} is {} bytes", bytes.len());
        assert!(text.trim_start().starts_with("<svg"), "{name}");
        assert!(text.contains("viewBox=\"0 0 64 64\""), "{name}: square viewBox");
        assert!(!text.contains("DIFY_MARKETPLACE_TEMPLATE_ICON_DO_NOT_USE"));
        let body = text.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
        for external in ["http:", "https:", "href", "url(", "<image", "<script"] {
            assert!(!body.contains(external), "{name} references {external}");
        }
    }
    assert_ne!(assets()[0].1, assets()[1].1, "dark icon differs");
}
