//! What a Dify admin and a model see of the plugin: credential help links into the docs, the
//! README the package ships for Dify's panel, output descriptions checked against the real
//! answers, and the tokens (cl100k) a model pays for the tool definitions and each result.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tiktoken_rs::CoreBPE;

use crate::dify_callers::{lifecycle, run, Caller, Transport};
use crate::support::kv::KvServer;
use crate::support::package::fake_bins;
use difypkg::{build_package_with_readme, read_package, validate_package_bytes};
use stateful_tool::{declared_tool as tool, tool_names, tool_provider};

pub(crate) const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// The README the package ships (scripts/package.sh passes it to `package --readme`).
pub(crate) const PANEL_README: &str = "docs/dify-panel-readme.md";
/// The trigger package's README (its tree's own; `package --source trigger` packs it).
pub(crate) const TRIGGER_README: &str = "trigger/README.md";
/// Where each credential's `url` points: the docs file and its anchors.
const DOCS_URL: &str = "https://github.com/eventsmith/stateful_tool/blob/main/";
/// The README panel is ~580 px wide; a table cell longer than this scrolls or breaks words.
const MAX_CELL_CHARS: usize = 72;

/// Targets of issue 30: what every model call pays for the definitions, and one result.
const DEFINITIONS_MAX_TOKENS: usize = 600;
const RESULT_MAX_TOKENS: usize = 150;

pub(crate) fn path(rel: &str) -> PathBuf {
    Path::new(ROOT).join(rel)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(path(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces
/// as `-`.
fn slug(heading: &str) -> String {
    let kept: String =
        heading.to_lowercase().chars().filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_')).collect();
    kept.replace(' ', "-")
}

/// `(anchor, heading text)` of every heading of a markdown file.
fn anchors(markdown: &str) -> BTreeMap<String, String> {
    let headings = markdown.lines().filter_map(|l| l.strip_prefix('#')).map(|l| l.trim_start_matches('#').trim());
    headings.map(|h| (slug(h), h.to_owned())).collect()
}

#[test]
fn every_credential_links_its_help_to_a_heading_of_the_docs() {
    let creds = tool_provider()["credentials_schema"].as_array().unwrap();
    assert!(creds.len() >= 7);
    let readme = read(PANEL_README);
    for c in creds {
        let name = c["name"].as_str().unwrap();
        let url = c["url"].as_str().unwrap_or_else(|| panic!("{name}: no url (Dify shows help only as its link)"));
        let help = c["help"]["en_US"].as_str().unwrap_or_else(|| panic!("{name}: no help"));
        assert!((10..=70).contains(&help.len()), "{name}: help is link text, a short phrase: {help:?}");
        for locale in ["zh_Hans", "ja_JP", "pt_BR"] {
            assert!(c["help"][locale].is_string() && c["label"][locale].is_string(), "{name}: {locale}");
        }
        let rest = url.strip_prefix(DOCS_URL).unwrap_or_else(|| panic!("{name}: {url} is not in the project's docs"));
        let (file, anchor) = rest.split_once('#').unwrap_or_else(|| panic!("{name}: {url} has no anchor"));
        let headings = anchors(&read(file));
        let heading = headings.get(anchor).unwrap_or_else(|| panic!("{name}: no heading #{anchor} in {file}"));
        // The README's credentials table names each field as the docs' heading does.
        assert!(readme.contains(&format!("| {heading} |")), "{name}: {PANEL_README} lists {heading:?}");
        // A default fills the field and hides the placeholder: the format must be in the label.
        let label = c["label"]["en_US"].as_str().unwrap();
        if c["default"].is_null() {
            assert!(c["placeholder"]["en_US"].is_string(), "{name}: no default, so a placeholder shows the format");
        } else {
            assert!(label.contains('('), "{name}: pre-filled, so the label says what to know: {label:?}");
        }
    }
}

/// A line that starts a new markdown block (so it may follow another non-blank line).
fn starts_block(line: &str) -> bool {
    let numbered = line.split_once(". ").is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    numbered || ["#", "|", "- ", "* ", "+ ", "> ", "```"].iter().any(|p| line.starts_with(p))
}

/// The cells of a table row (`|` inside backticks does not occur in our README).
fn cells(row: &str) -> Vec<&str> {
    row.trim().trim_matches('|').split('|').map(str::trim).collect()
}

/// A README for Dify's panel: one line per paragraph (Dify breaks every line), narrow
/// tables, the sections a reader looks for, and a link to the full docs.
fn check_panel_readme(rel: &str, sections: &[&str]) -> String {
    let text = read(rel);
    assert!(text.len() <= 15 * 1024, "{rel} is {} bytes, over 15 KiB", text.len());
    let mut in_code = false;
    let mut previous = "";
    for (n, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        if !in_code && !previous.is_empty() && !line.trim().is_empty() && !starts_block(line) {
            panic!("{rel}:{}: hard-wrapped: {previous:?} goes on as {line:?}", n + 1);
        }
        if line.starts_with('|') && !in_code {
            let row = cells(line);
            assert!(row.len() <= 3, "{rel}:{}: {} columns", n + 1, row.len());
            for cell in row {
                assert!(cell.chars().count() <= MAX_CELL_CHARS, "{rel}:{}: long cell {cell:?}", n + 1);
            }
        }
        previous = if in_code { "" } else { line.trim() };
    }
    let headings: Vec<String> = anchors(&text).into_values().collect();
    for needed in sections {
        assert!(headings.iter().any(|h| h == needed), "{rel} has a section {needed:?}: {headings:?}");
    }
    assert!(text.contains("](https://github.com/eventsmith/stateful_tool"), "{rel} links to the full docs");
    text
}

#[test]
fn the_panel_readme_has_one_line_per_paragraph_and_narrow_tables() {
    check_panel_readme(PANEL_README, &["Credentials", "Workflow recipe", "Retry recipe", "In an agent", "More"]);
}

/// The trigger's README is its package's, shown in the same panel: the same treatment, and
/// headed by the name Dify shows (not the package slug).
#[test]
fn the_trigger_readme_reads_in_difys_panel_under_its_name() {
    let text = check_panel_readme(TRIGGER_README, &["Set it up", "Finish every run", "More"]);
    let manifest: Value = yaml_serde::from_str(&read("trigger/manifest.yaml")).unwrap();
    let name = manifest["label"]["en_US"].as_str().unwrap();
    assert_eq!(text.lines().next(), Some(format!("# {name}").as_str()), "{TRIGGER_README} is headed by its label");
    assert!(!text.contains("stateful_trigger"), "{TRIGGER_README} names the plugin as Dify shows it");
    assert!(
        text.contains("](https://github.com/eventsmith/stateful_tool/blob/main/docs/trigger.md)"),
        "the guide is a link"
    );
}

/// Every subscription property's help is a link to a heading of the docs it names.
#[test]
fn every_trigger_property_links_its_help_to_a_heading_of_the_docs() {
    let provider: Value = yaml_serde::from_str(&read("trigger/provider/stateful_trigger.yaml")).unwrap();
    for p in provider["subscription_schema"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let url = p["url"].as_str().unwrap_or_else(|| panic!("{name}: no url (Dify shows help only as its link)"));
        let rest = url.strip_prefix(DOCS_URL).unwrap_or_else(|| panic!("{name}: {url} is not in the project's docs"));
        let (file, anchor) = rest.split_once('#').unwrap_or_else(|| panic!("{name}: {url} has no anchor"));
        assert!(anchors(&read(file)).contains_key(anchor), "{name}: no heading #{anchor} in {file}");
    }
}

#[test]
fn the_package_ships_the_panel_readme_and_the_icons() {
    let tmp = tempfile::tempdir().unwrap();
    let built = build_package_with_readme(Path::new(ROOT), &fake_bins(tmp.path()), Some(&path(PANEL_README)))
        .unwrap_or_else(|p| panic!("{p:?}"));
    validate_package_bytes(built.bytes.clone()).unwrap_or_else(|p| panic!("{p:?}"));
    let package = read_package(built.bytes.clone()).unwrap();
    let entry =
        |name: &str| package.entries.iter().find(|e| e.name == name).unwrap_or_else(|| panic!("{name}")).data.clone();
    assert_eq!(entry("README.md"), std::fs::read(path(PANEL_README)).unwrap());
    for icon in ["_assets/icon.svg", "_assets/icon-dark.svg"] {
        assert_eq!(entry(icon), std::fs::read(path(icon)).unwrap(), "{icon}");
    }
    let script = read("scripts/package.sh");
    assert!(script.contains(&format!("--readme {PANEL_README}")), "make package packs the panel README");
}

/// The trigger has icons of its own (light and dark): on the canvas, in the pickers and in the
/// plugin list it is not drawn as the tool is.
#[test]
fn the_trigger_has_icons_of_its_own() {
    for icon in ["_assets/icon.svg", "_assets/icon-dark.svg"] {
        let (tool_icon, trigger_icon) = (path(icon), path(&format!("trigger/{icon}")));
        assert!(!std::fs::symlink_metadata(&trigger_icon).unwrap().is_symlink(), "trigger/{icon} is a file of its own");
        assert_ne!(std::fs::read(&tool_icon).unwrap(), std::fs::read(&trigger_icon).unwrap(), "trigger/{icon}");
    }
}

/// The words of a description (`_` belongs to a word, so `failed` is not in `already_failed`).
fn words(text: &str) -> BTreeSet<&str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).collect()
}

#[test]
fn every_closed_set_output_names_its_values() {
    for name in tool_names() {
        for (output, decl) in tool(name).unwrap()["output_schema"]["properties"].as_object().unwrap() {
            let Some(values) = decl["enum"].as_array() else { continue };
            let description = decl["description"].as_str().unwrap();
            let said = words(description);
            for v in values {
                assert!(said.contains(v.as_str().unwrap()), "{name}.{output}: {description:?} does not name {v}");
            }
        }
    }
}

/// The real answers of every outcome: the lifecycle of dify_callers, run through the real
/// binary and Dify's consumers, once per caller.
async fn real_replays(caller: Caller) -> Vec<(&'static str, &'static str, Value)> {
    let dir = tempfile::tempdir().unwrap();
    let kv = KvServer::start(dir.path(), &[]);
    let mut t = Transport::stdio().await;
    // A fixed id of a realistic length: token counts must not depend on how a random one splits
    // (each test has a store of its own, so the id is new there).
    let steps = lifecycle("EVT-face-5f3a9c2e71d04b86");
    let replays = run(&mut t, &kv.url(), caller, &steps).await;
    let answered = steps.iter().zip(replays).filter(|(s, _)| !s.outcome.starts_with("error type: "));
    answered.map(|(s, r)| (s.tool, s.outcome, r)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_every_answer_leaves_null_says_so() {
    let replays = real_replays(Caller::Workflow).await;
    for name in tool_names() {
        let outcomes: BTreeSet<&str> = replays.iter().filter(|r| r.0 == name).map(|r| r.1).collect();
        let enum_values = &tool(name).unwrap()["output_schema"]["properties"]["outcome"]["enum"];
        assert_eq!(enum_values.as_array().unwrap().len(), outcomes.len(), "{name}: every outcome is driven");
        for (output, decl) in tool(name).unwrap()["output_schema"]["properties"].as_object().unwrap() {
            let always_null = replays.iter().filter(|r| r.0 == name).all(|r| r.2["tool_node"][output].is_null());
            let description = decl["description"].as_str().unwrap();
            // The tools' lifecycle claims nothing at the trigger's door: an output only such a
            // claim fills (its description says so) is null throughout it.
            if always_null && description.contains("the trigger claimed") {
                continue;
            }
            assert_eq!(description.starts_with("Always null"), always_null, "{name}.{output}: {description:?}");
        }
    }
}

fn cl100k() -> &'static CoreBPE {
    tiktoken_rs::cl100k_base_singleton()
}

fn tokens(text: &str) -> usize {
    cl100k().encode_with_special_tokens(text).len()
}

/// A tool as Dify's agent runners hand it to a model (`PromptMessageTool`): the `llm`
/// description, and only the `form: llm` parameters, each with its `llm_description`
/// (a select's options as `enum`), in an OpenAI-style function definition.
fn prompt_tool(name: &str) -> Value {
    let decl = tool(name).unwrap();
    let (mut properties, mut required) = (serde_json::Map::new(), vec![]);
    for p in decl["parameters"].as_array().unwrap().iter().filter(|p| p["form"] == "llm") {
        let pname = p["name"].as_str().unwrap();
        let ty = match p["type"].as_str().unwrap() {
            "select" | "string" | "secret-input" => "string",
            other => other,
        };
        let mut property = json!({"type": ty, "description": p["llm_description"]});
        if let Some(options) = p["options"].as_array() {
            property["enum"] = options.iter().map(|o| o["value"].clone()).collect();
        }
        properties.insert(pname.to_owned(), property);
        if p["required"] == true {
            required.push(pname);
        }
    }
    let parameters = json!({"type": "object", "properties": properties, "required": required});
    json!({"type": "function", "function": {"name": name, "description": decl["description"]["llm"], "parameters": parameters}})
}

/// JSON as Python's `json.dumps` writes it by default (`", "` and `": "`), which is how the
/// request body reaches the model's API from Dify's model plugins (httpx).
fn python_json(v: &Value) -> String {
    match v {
        Value::Array(items) => format!("[{}]", items.iter().map(python_json).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => {
            let fields: Vec<String> = map.iter().map(|(k, v)| format!("{}: {}", json!(k), python_json(v))).collect();
            format!("{{{}}}", fields.join(", "))
        }
        scalar => scalar.to_string(),
    }
}

#[test]
fn the_tool_definitions_cost_a_model_at_most_600_tokens() {
    let mut total = 0;
    for name in tool_names() {
        let n = tokens(&python_json(&prompt_tool(name)));
        eprintln!("definition of {name}: {n} tokens (cl100k)");
        total += n;
    }
    eprintln!("definitions: {total} tokens in all (target {DEFINITIONS_MAX_TOKENS})");
    assert!(total <= DEFINITIONS_MAX_TOKENS, "{total} tokens");
    // The guards that matter stay in what the model reads.
    let said = |name: &str| prompt_tool(name).to_string();
    assert!(said("event_ingest").contains("Never invent"));
    assert!(said("event_ingest").contains("call event_complete with the returned attempt"));
    assert!(said("event_complete").contains("always pass it back"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_costs_a_model_at_most_150_tokens() {
    for caller in [Caller::AgentApp, Caller::Backwards] {
        for (name, outcome, replay) in real_replays(caller).await {
            let key = if caller == Caller::AgentApp { "agent_app" } else { "agent_node" };
            let read = replay[key].as_str().unwrap();
            let n = tokens(read);
            eprintln!("{caller:?} {name} {outcome}: {n} tokens: {read}");
            // Sentence, line break, record: the two never run together.
            let sentence = replay["tool_node"]["text"].as_str().unwrap();
            assert!(sentence.ends_with(".\n") && read.starts_with(sentence), "{read}");
            if matches!(outcome, "accepted" | "duplicate") {
                assert!(n <= RESULT_MAX_TOKENS, "{caller:?} {name} {outcome}: {n} tokens");
            }
        }
    }
}
