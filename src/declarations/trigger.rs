//! The trigger package's declarations (`trigger/`), embedded like the tool's: what remote
//! debugging registers when `STATEFUL_TOOL_PACKAGE=trigger` (a `trigger_declaration` in the
//! daemon's `TriggerProviderDeclaration` JSON shape, events inline).

use std::sync::OnceLock;

use serde_json::{json, Value};

use super::{
    credential, i18n, list_or_empty, manifest_declaration, parse_embedded, provider_identity, yaml_top_level_scalar,
};

const MANIFEST_YAML: &str = include_str!("../../trigger/manifest.yaml");

/// The trigger package's declaration files: (path inside that package, content).
static YAML_FILES: [(&str, &str); 3] = [
    ("manifest.yaml", MANIFEST_YAML),
    ("provider/stateful_trigger.yaml", include_str!("../../trigger/provider/stateful_trigger.yaml")),
    ("events/webhook_received.yaml", include_str!("../../trigger/events/webhook_received.yaml")),
];

/// The trigger's own icons (a sibling of the tool's, so the two are told apart on the canvas).
static ASSETS: [(&str, &[u8]); 2] = [
    ("icon.svg", include_bytes!("../../trigger/_assets/icon.svg")),
    ("icon-dark.svg", include_bytes!("../../trigger/_assets/icon-dark.svg")),
];

/// The trigger package's icons: `(name under _assets/, bytes)`.
pub(crate) fn assets() -> &'static [(&'static str, &'static [u8])] {
    &ASSETS
}

// Both packages ship one binary: one version.
const _: () = assert!(
    super::const_str_eq(yaml_top_level_scalar(MANIFEST_YAML, "version"), env!("CARGO_PKG_VERSION")),
    "trigger/manifest.yaml `version` must equal the version in Cargo.toml (make bump sets both)"
);

fn parse(path: &str) -> Value {
    parse_embedded(&YAML_FILES, "trigger/", path)
}

/// The trigger package's manifest, in the shape the tool's is registered in.
pub(crate) fn manifest() -> &'static Value {
    static MANIFEST: OnceLock<Value> = OnceLock::new();
    MANIFEST.get_or_init(|| manifest_declaration(&parse("manifest.yaml")))
}

/// The provider as the daemon's `TriggerProviderDeclaration`: identity, `subscription_schema`
/// as a list of `ProviderConfig`, no constructor (manual subscriptions), events inline.
pub(crate) fn provider() -> &'static Value {
    static PROVIDER: OnceLock<Value> = OnceLock::new();
    PROVIDER.get_or_init(|| {
        let path = manifest()["plugins"]["triggers"]
            .as_array()
            .and_then(|paths| paths.last())
            .and_then(Value::as_str)
            .expect("trigger/manifest.yaml lists a provider under plugins.triggers");
        let y = parse(path);
        let id = &y["identity"];
        let schema: Vec<Value> = y["subscription_schema"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|c| credential(c["name"].as_str().unwrap_or_default(), c))
            .collect();
        let events: Vec<Value> = y["events"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|item| event(&item.as_str().map(parse).unwrap_or_else(|| item.clone())))
            .collect();
        json!({
            "identity": provider_identity(id),
            "subscription_schema": schema,
            "subscription_constructor": Value::Null,
            "events": events,
        })
    })
}

fn event(y: &Value) -> Value {
    json!({
        "identity": {
            "author": y["identity"]["author"],
            "name": y["identity"]["name"],
            "label": i18n(&y["identity"]["label"]),
        },
        "parameters": list_or_empty(&y["parameters"]),
        "description": i18n(&y["description"]),
        "output_schema": y["output_schema"],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registration_shape_holds_the_declared_names() {
        let m = manifest();
        assert_eq!((m["name"].as_str(), &m["plugins"]["tools"]), (Some("stateful_trigger"), &json!([])));
        assert_eq!(m["plugins"]["triggers"], json!(["provider/stateful_trigger.yaml"]));
        assert_eq!(m["meta"]["minimum_dify_version"], "1.10.0");
        let p = provider();
        assert_eq!(p["identity"]["name"], "stateful_trigger");
        let names: Vec<&str> =
            p["subscription_schema"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        for wanted in [
            "id_header",
            "id_json_pointer",
            "event_type_header",
            "event_type_json_pointer",
            "signature_scheme",
            "webhook_secret",
            "kv_url",
            "kv_token",
            "lease_seconds",
            "duplicate_status",
        ] {
            assert!(names.contains(&wanted), "{wanted} missing from {names:?}");
        }
        let schemes =
            p["subscription_schema"].as_array().unwrap().iter().find(|c| c["name"] == "signature_scheme").unwrap();
        let options: Vec<&str> =
            schemes["options"].as_array().unwrap().iter().map(|o| o["value"].as_str().unwrap()).collect();
        assert_eq!(options, crate::trigger::signature::SCHEMES);
        let events = p["events"].as_array().unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0]["identity"]["name"], crate::trigger::EVENT);
        let outputs: Vec<&str> =
            events[0]["output_schema"]["properties"].as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(outputs, crate::trigger::reply::VARIABLES, "invoke returns exactly the declared variables");
    }

    /// The trigger declarations we ship pass the package tool's own rules for them (the
    /// daemon's and the SDK's), and the event they declare is the one the plugin emits.
    #[test]
    fn the_shipped_declarations_pass_the_package_rules() {
        let provider = include_bytes!("../../trigger/provider/stateful_trigger.yaml");
        difypkg::validate_trigger_provider("provider.yaml", provider).unwrap_or_else(|e| panic!("{e}"));
        let event = include_bytes!("../../trigger/events/webhook_received.yaml");
        let name = difypkg::validate_trigger_event("event.yaml", event).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(name, crate::trigger::EVENT);
    }
}
