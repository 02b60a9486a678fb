//! Both packages checked by Dify's editor rules (editor.rs): the documented wirings can be
//! clicked together, every output is a type some field takes and carries values of it, and
//! the forms explain themselves.

use serde_json::{json, Value};

use super::*;
use crate::declarations::{declared_tool, tool_names, tool_provider, trigger, LOCALES};

fn repo_file(path: &str) -> String {
    let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

#[test]
fn the_rules_turn_away_what_the_editor_turned_away() {
    // Issue 38: `attempt` declared `integer` was offered by no Attempt field, no text field.
    let integer = var_type(&json!({"type": "integer"}));
    assert_eq!(integer, VarType::Integer);
    assert!(!offers(Field::Number, integer) && !offers(Field::Text, integer) && !offers(Field::CodeInput, integer));
    assert!(offers(Field::IfElse, integer) && offers(Field::Select, integer));
    // An object is not text: a Payload field does not offer one.
    assert!(!offers(Field::Text, var_type(&json!({"type": "object"}))));
    assert_eq!(var_type(&json!({"type": ["number", "null"]})), VarType::Number);
    assert_eq!(var_type(&json!({"type": "array", "items": {"type": "integer"}})), VarType::ArrayNumber);
    assert_eq!(tool_field("number"), Field::Number);
}

#[test]
fn every_documented_wiring_is_offered_by_the_field_it_goes_to() {
    for w in &WIRINGS {
        let what = format!("{:?}.{} -> {:?}", w.from, w.output, w.into);
        let ty = var_type(output(w.from, w.output));
        let field = field_of(w.into);
        assert!(offers(field, ty), "{what}: a {field:?} field's picker does not offer a {ty:?} variable");
        if let Target::IfElse(operator) = w.into {
            assert!(if_else_operators(ty).contains(&operator), "{what}: If/Else has no {operator} for {ty:?}");
        }
        let (file, words) = w.said;
        assert!(repo_file(file).contains(words), "{what}: {file} no longer says {words:?}");
    }
}

/// Every output of a node: `(node, name, schema)`.
fn all_outputs() -> Vec<(Node, &'static str, &'static Value)> {
    let mut out = Vec::new();
    for name in tool_names() {
        for (output, schema) in declared_tool(name).unwrap()["output_schema"]["properties"].as_object().unwrap() {
            out.push((Node::Tool(name), output.as_str(), schema));
        }
    }
    for (output, schema) in trigger::provider()["events"][0]["output_schema"]["properties"].as_object().unwrap() {
        out.push((Node::Trigger, output.as_str(), schema));
    }
    out
}

#[test]
fn every_output_is_a_type_that_fields_take() {
    for (node, name, schema) in all_outputs() {
        let ty = var_type(schema);
        assert!(offers(Field::CodeInput, ty), "{node:?}.{name}: {ty:?} is taken by no number, text or Code field");
        // Dify lists an object output a second time as a one-line tree row that cuts what
        // does not fit: its description is short enough to be read there whole.
        let description = schema["description"].as_str().unwrap();
        if ty == VarType::Object {
            assert!(description.chars().count() <= 48, "{node:?}.{name}: {description:?} is cut in the tree row");
        }
    }
}

/// Whether a JSON value is of a declared output type, or a null the description announces.
fn holds(schema: &Value, value: &Value) -> bool {
    let typed = match var_type(schema) {
        VarType::String => value.is_string(),
        VarType::Number => value.is_number(),
        VarType::Boolean => value.is_boolean(),
        VarType::Object => value.is_object(),
        other => panic!("no value rule for {other:?}"),
    };
    typed || (value.is_null() && schema["description"].as_str().unwrap().contains("null"))
}

#[test]
fn the_triggers_variables_have_their_declared_types() {
    let claim = json!({
        "delivery_id": "d-1", "event_type": "push", "attempt": 2, "claimed_at": "2026-12-04T10:00:00Z",
        "lease_until": "2026-12-04T10:20:00Z", "headers": {"x-github-delivery": "d-1"},
        "body_json": {"action": "opened"}, "body_text": "{\"action\":\"opened\"}", "body_truncated": false,
        "content_type": "application/json", "key": "evt_d-1",
    });
    // A payload from our dispatch, and one from elsewhere (every variable still comes back).
    for payload in [claim, json!({})] {
        let variables = crate::trigger::reply::variables(&payload, None);
        for (name, value) in &variables {
            let schema = output(Node::Trigger, name);
            assert!(holds(schema, value), "{name} = {value} is not a {:?}", var_type(schema));
        }
        // A workflow branching on `attempt = 1` compares a number with a number.
        assert!(variables["attempt"].is_u64(), "{payload}");
    }
}

#[test]
fn help_is_link_text_and_every_field_says_what_to_enter() {
    for (package, f) in form_fields() {
        let name = format!("{package}.{}", f["name"].as_str().unwrap());
        // base/form BaseField (and the credential form) render `help` only as the link to `url`.
        assert_eq!(f["url"].is_string(), f["help"].is_object(), "{name}: help without url, or url without help");
        assert!(f["url"].is_string(), "{name}: no url, so no help is shown");
        for locale in LOCALES {
            let help = f["help"][locale].as_str().unwrap();
            // A phrase: CJK ones are short, Portuguese ones run longest.
            let shortest = if locale == "en_US" { 10 } else { 4 };
            assert!((shortest..=80).contains(&help.chars().count()), "{name}: help is link text, a phrase: {help:?}");
            assert!(!help.ends_with('.'), "{name}: link text, not a sentence: {help:?}");
        }
        let ty = f["type"].as_str().unwrap();
        let default = &f["default"];
        // Without a placeholder an empty field says only "Please enter".
        if matches!(ty, "text-input" | "secret-input") && default.is_null() {
            assert!(f["placeholder"]["en_US"].is_string(), "{name}: empty and no placeholder");
        }
        // BaseForm takes only a truthy default, and a boolean field shows two radios: false
        // would leave both unselected.
        assert!(ty != "boolean" || default == &json!(true), "{name}: a boolean shows neither option selected");
        if ty == "select" {
            let values: Vec<&Value> = f["options"].as_array().unwrap().iter().map(|o| &o["value"]).collect();
            let chosen = values.contains(&default);
            assert!(chosen || f["placeholder"]["en_US"].is_string(), "{name}: no option selected and no placeholder");
        }
    }
}

fn property(package: &str, name: &str) -> &'static Value {
    let list = match package {
        "stateful_tool" => &tool_provider()["credentials_schema"],
        _ => &trigger::provider()["subscription_schema"],
    };
    list.as_array().unwrap().iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("{package}.{name}"))
}

#[test]
fn one_label_help_and_link_per_concept_across_both_packages() {
    for name in ["kv_url", "kv_token", "namespace"] {
        let (tool_side, trigger_side) = (property("stateful_tool", name), property("stateful_trigger", name));
        for key in ["label", "help", "url", "placeholder"] {
            assert_eq!(tool_side[key], trigger_side[key], "{name}.{key} differs between the packages");
        }
    }
    assert!(property("stateful_tool", "kv_url")["label"]["en_US"].as_str().unwrap().contains("PostgreSQL"));
    // The lease: the tool's is a default that Ingest event may override, the trigger's is not.
    let tool_lease = property("stateful_tool", "default_lease_seconds")["label"]["en_US"].as_str().unwrap();
    let trigger_lease = property("stateful_trigger", "lease_seconds")["label"]["en_US"].as_str().unwrap();
    assert_eq!(tool_lease.strip_prefix("Default l"), trigger_lease.strip_prefix('L'), "{tool_lease} / {trigger_lease}");
}

/// Width of a title in upper-case Latin letters (a CJK character is about two).
fn title_width(text: &str) -> usize {
    text.chars().map(|c| if c.is_ascii() { 1 } else { 2 }).sum()
}

#[test]
fn the_event_reads_as_the_editor_shows_it() {
    let event = &trigger::provider()["events"][0];
    for locale in LOCALES {
        // The canvas node's title is 180 px of 13 px upper case: about 20 letters, so 18 fit.
        let label = event["identity"]["label"][locale].as_str().unwrap();
        assert!(title_width(label) <= 18, "{locale}: {label:?} is cut on the canvas");
        // The editor's names: provider › tool, and the field labels of Complete event.
        let description = event["description"][locale].as_str().unwrap();
        let complete = declared_tool("event_complete").unwrap();
        let field = |p: &str| {
            let decl = complete["parameters"].as_array().unwrap().iter().find(|x| x["name"] == p).unwrap();
            decl["label"][locale].as_str().unwrap().to_owned()
        };
        let path = format!(
            "{} › {}",
            tool_provider()["identity"]["label"][locale].as_str().unwrap(),
            complete["identity"]["label"][locale].as_str().unwrap()
        );
        for said in [path, format!("{} = delivery_id", field("event_id")), format!("{} = attempt", field("attempt"))] {
            assert!(description.contains(&said), "{locale}: {description:?} does not say {said:?}");
        }
    }
}
