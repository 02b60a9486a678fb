//! Dify's workflow editor (web, 1.13.2) written down as rules, and both packages checked by
//! them: which variables each kind of field's picker offers, the wirings our docs tell a
//! user to click together, and what the two forms show (help, placeholders, defaults).

use serde_json::Value;

use super::{declared_tool, tool_provider, trigger};

/// A workflow variable's type (`web/app/components/workflow/types.ts`, `VarType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum VarType {
    String,
    Number,
    Integer,
    Boolean,
    Object,
    Array,
    ArrayString,
    ArrayNumber,
    ArrayBoolean,
    ArrayObject,
    Any,
}

/// The variable type an `output_schema` property becomes: `resolveVarType`, the same switch
/// in `nodes/tool/output-schema-utils.ts` (tools) and `nodes/trigger-plugin/default.ts`
/// (trigger events). `integer` stays a type of its own; an array takes its items' type.
pub(super) fn var_type(schema: &Value) -> VarType {
    let json_type = match &schema["type"] {
        Value::String(t) => Some(t.as_str()),
        // A type list counts as its first non-null member.
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).find(|t| *t != "null"),
        _ if schema["properties"].is_object() => Some("object"),
        _ if !schema["items"].is_null() => Some("array"),
        _ => None,
    };
    match json_type {
        Some("string") => VarType::String,
        Some("number") => VarType::Number,
        Some("integer") => VarType::Integer,
        Some("boolean") => VarType::Boolean,
        Some("object") => VarType::Object,
        Some("array") => match var_type(&schema["items"]) {
            VarType::String => VarType::ArrayString,
            VarType::Number | VarType::Integer => VarType::ArrayNumber,
            VarType::Boolean => VarType::ArrayBoolean,
            VarType::Object => VarType::ArrayObject,
            _ => VarType::Array,
        },
        _ => VarType::Any,
    }
}

/// A kind of field a variable can be wired into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Field {
    /// A tool's `string` parameter: a mixed text input (`text-input`).
    Text,
    /// A tool's `number` parameter (`number-input`).
    Number,
    Boolean,
    Select,
    Object,
    Array,
    /// A condition of an If/Else node.
    IfElse,
    /// An input variable of a Code node.
    CodeInput,
}

/// The field a tool parameter is drawn as: `toType` of `tools/utils/to-form-schema.ts`, then
/// `nodes/_base/components/form-input-item.tsx`.
pub(super) fn tool_field(param_type: &str) -> Field {
    match param_type {
        "string" | "text-input" | "secret-input" => Field::Text,
        "number" => Field::Number,
        "boolean" => Field::Boolean,
        "select" | "dynamic-select" => Field::Select,
        "object" => Field::Object,
        "array" => Field::Array,
        other => panic!("no rule for a {other} parameter"),
    }
}

/// Whether a field's variable picker offers a variable of type `ty`: `getFilterVar` of
/// form-input-item.tsx (a number field takes `number` only, a select anything), the filter of
/// its mixed text input (`string`, `number`, `secret`), `if-else/use-config.ts` (anything) and
/// `code/use-config.ts` (every concrete type; `integer` is not among them).
pub(super) fn offers(field: Field, ty: VarType) -> bool {
    use VarType as V;
    match field {
        Field::Text => matches!(ty, V::String | V::Number),
        Field::Number => ty == V::Number,
        Field::Boolean => ty == V::Boolean,
        Field::Select | Field::IfElse => true,
        Field::Object => ty == V::Object,
        Field::Array => matches!(ty, V::Array | V::ArrayString | V::ArrayNumber | V::ArrayObject),
        Field::CodeInput => !matches!(ty, V::Integer | V::Any),
    }
}

/// If/Else's comparison operators for a variable type (`if-else/utils.ts`, `getOperators`).
pub(super) fn if_else_operators(ty: VarType) -> &'static [&'static str] {
    match ty {
        VarType::String => {
            &["contains", "not contains", "start with", "end with", "is", "is not", "empty", "not empty"]
        }
        VarType::Number | VarType::Integer => &["=", "≠", ">", "<", "≥", "≤", "empty", "not empty"],
        VarType::Boolean => &["is", "is not"],
        VarType::ArrayString | VarType::ArrayNumber | VarType::ArrayBoolean => {
            &["contains", "not contains", "empty", "not empty"]
        }
        VarType::Array | VarType::ArrayObject => &["empty", "not empty"],
        VarType::Object | VarType::Any => &["is", "is not", "empty", "not empty"],
    }
}

/// Where an output comes from: a tool of `stateful_tool`, or the trigger's one event.
#[derive(Clone, Copy, Debug)]
pub(super) enum Node {
    Tool(&'static str),
    Trigger,
}

/// The declared `output_schema` property `name` of a node.
pub(super) fn output(node: Node, name: &str) -> &'static Value {
    let schema = match node {
        Node::Tool(t) => &declared_tool(t).unwrap_or_else(|| panic!("no tool {t}"))["output_schema"],
        Node::Trigger => &trigger::provider()["events"][0]["output_schema"],
    };
    let property = &schema["properties"][name];
    assert!(property.is_object(), "{node:?} declares no output {name}");
    property
}

/// Where a documented wiring goes.
#[derive(Clone, Copy, Debug)]
pub(super) enum Target {
    /// A tool's parameter (tool, parameter).
    Param(&'static str, &'static str),
    /// An If/Else condition with this operator.
    IfElse(&'static str),
    /// Any field of this kind (a Code node's input, an LLM prompt's text).
    Kind(Field),
}

/// A wiring the docs tell a user to build, and the file and words that say so.
pub(super) struct Wiring {
    pub from: Node,
    pub output: &'static str,
    pub into: Target,
    pub said: (&'static str, &'static str),
}

const PANEL: &str = "docs/dify-panel-readme.md";
const TRIGGER_README: &str = "trigger/README.md";

const INGEST: Node = Node::Tool("event_ingest");
const STATUS: Node = Node::Tool("event_status");
const COMPLETE: Node = Node::Tool("event_complete");
const TRIGGER: Node = Node::Trigger;

const fn wire(from: Node, output: &'static str, into: Target, file: &'static str, words: &'static str) -> Wiring {
    Wiring { from, output, into, said: (file, words) }
}

/// Every wiring our READMEs (the panels Dify shows) and docs/trigger.md tell a user to click.
#[rustfmt::skip]
pub(super) const WIRINGS: [Wiring; 14] = {
    use Target::{IfElse, Kind, Param};
    const README: &str = TRIGGER_README;
    [
        wire(INGEST, "attempt", Param("event_complete", "attempt"), PANEL, "`attempt` = Ingest event's `attempt`"),
        wire(INGEST, "outcome", IfElse("is"), PANEL, "**If/Else** on the node's `outcome`"),
        wire(INGEST, "attempt", IfElse("="), README, "`attempt` = 1"),
        wire(INGEST, "status", IfElse("is"), PANEL, "`status`"),
        wire(STATUS, "status", IfElse("is"), README, "Event status's `status`"),
        wire(STATUS, "lease_until", IfElse("empty"), README, "its `lease_until` is empty"),
        wire(COMPLETE, "outcome", IfElse("is"), PANEL, "`outcome` (Complete event)"),
        wire(TRIGGER, "delivery_id", Param("event_complete", "event_id"), README, "**Event ID** = `delivery_id`"),
        wire(TRIGGER, "attempt", Param("event_complete", "attempt"), README, "**Attempt** = `attempt`"),
        wire(TRIGGER, "attempt", IfElse("="), README, "`attempt` = 1"),
        wire(TRIGGER, "delivery_id", Param("event_status", "event_id"), README, "Event status the `delivery_id`"),
        wire(TRIGGER, "body_text", Param("event_ingest", "payload"), README, "Payload or a prompt, pick `body_text`"),
        wire(TRIGGER, "body_json", Kind(Field::CodeInput), README, "`body_json` is for If/Else conditions and Code"),
        wire(TRIGGER, "lease_until", Kind(Field::Text), "docs/trigger.md", "`lease_until`"),
    ]
};

/// The field a wiring lands in.
pub(super) fn field_of(into: Target) -> Field {
    match into {
        Target::Param(t, p) => {
            let decl = declared_tool(t).unwrap_or_else(|| panic!("no tool {t}"));
            let param = decl["parameters"].as_array().unwrap().iter().find(|x| x["name"] == p);
            tool_field(param.unwrap_or_else(|| panic!("{t} has no parameter {p}"))["type"].as_str().unwrap())
        }
        Target::IfElse(_) => Field::IfElse,
        Target::Kind(f) => f,
    }
}

/// Both forms as `(package, property)`: the tool's credentials, the trigger's subscription.
pub(super) fn form_fields() -> Vec<(&'static str, &'static Value)> {
    let tool_form = tool_provider()["credentials_schema"].as_array().unwrap().iter().map(|c| ("stateful_tool", c));
    let trigger_form =
        trigger::provider()["subscription_schema"].as_array().unwrap().iter().map(|c| ("stateful_trigger", c));
    tool_form.chain(trigger_form).collect()
}

#[path = "editor_tests.rs"]
mod tests;
