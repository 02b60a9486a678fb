//! The trigger as Dify 1.13's web UI draws it, from the declarations we ship: the manual
//! subscription form (`base/form` BaseField: label, input or select, the help link under it),
//! the node on the canvas beside the tool's nodes, the block selector's card and the node's
//! output variables (trigger-plugin/panel.tsx: an object output once more as a tree row).

use serde_json::Value;

use super::{out_dir, page, shoot};
use crate::dify_face::path;

fn yaml(rel: &str) -> Value {
    yaml_serde::from_str(&std::fs::read_to_string(path(rel)).unwrap()).unwrap()
}

fn esc(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn en(v: &Value) -> Option<&str> {
    v["en_US"].as_str()
}

/// Light theme tokens of Dify's components (themes/light.css) used below.
const STYLE: &str = "body{margin:0;background:#f2f4f7;font:13px/1.4 Inter,'DejaVu Sans',sans-serif;color:#101828}\
    .modal{width:640px;box-sizing:border-box;margin:24px auto;background:#fff;border-radius:16px;\
    box-shadow:0 20px 24px -4px rgba(9,9,11,.08)}.modal .title{padding:24px 24px 12px;font-size:20px;font-weight:600}\
    .modal .desc{margin-top:4px;font-size:12px;font-weight:400;color:#676f83}.modal .body{padding:12px 24px 24px}\
    .field+.field{margin-top:16px}.label{display:flex;gap:4px;align-items:center;margin-bottom:8px;font-size:13px;\
    font-weight:500}.req{color:#f04438}.input{height:32px;box-sizing:border-box;border-radius:8px;padding:0 12px;\
    display:flex;align-items:center;justify-content:space-between;background:rgba(200,206,218,.25);color:#101828;\
    white-space:nowrap;overflow:hidden}.ph{color:#98a2b2}.help{margin-top:16px;display:block;font-size:12px;\
    color:#155aef}.help::after{content:' \\2197'}.chev{color:#98a2b2}\
    .canvas{display:flex;gap:24px;padding:24px;background:#f2f4f7 radial-gradient(#d0d5dc 1px,transparent 1px);\
    background-size:16px 16px;align-items:flex-start;flex-wrap:wrap}\
    .node{width:240px;box-sizing:border-box;background:#fcfcfd;border-radius:15px;padding:12px 12px 8px;\
    box-shadow:0 1px 2px rgba(16,24,40,.05)}.head{display:flex;align-items:center}\
    .ico{width:24px;height:24px;border-radius:6px;flex-shrink:0;margin-right:8px;background-size:cover}\
    .ntitle{flex-grow:1;margin-right:4px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;\
    font-size:13px;font-weight:600;text-transform:uppercase}\
    .tip{width:224px;box-sizing:border-box;background:#fff;border:.5px solid rgba(0,0,0,.05);border-radius:12px;\
    padding:10px 12px;font-size:12px;line-height:18px;color:#354052;box-shadow:0 12px 16px -4px rgba(9,9,11,.08)}\
    .tip .ico{margin-bottom:8px}.tip b{display:block;font-size:14px;font-weight:400;line-height:20px;color:#101828}\
    .panel{width:420px;box-sizing:border-box;background:#fff;border-radius:16px;padding:16px}\
    .sec{font-size:13px;font-weight:600;text-transform:uppercase;color:#354052;margin-bottom:4px}\
    .var{padding:4px 0}.vn{font:600 12px 'DejaVu Sans Mono',monospace;color:#354052}.vt{margin-left:8px;\
    font-size:12px;color:#676f83}.vd{font-size:12px;color:#676f83;margin-top:2px}\
    .row{display:flex;align-items:center;height:24px}.row .vd{overflow:hidden;text-overflow:ellipsis;\
    white-space:nowrap;width:0;flex-grow:1;margin:0 0 0 12px}";

/// What BaseField draws for one property: its label (a star when required), an input with the
/// default's value or the placeholder (Dify's "Please enter" when there is none), a select
/// with its chosen option or placeholder, and `help` as a link only when `url` is set.
fn field(p: &Value) -> String {
    let label = en(&p["label"]).unwrap();
    let star = if p["required"] == true { "<span class=req>*</span>" } else { "" };
    let placeholder = en(&p["placeholder"]).unwrap_or("Please enter");
    let default = match &p["default"] {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(true) => Some("true".into()),
        _ => None,
    };
    let shown = match (p["type"].as_str().unwrap(), &default) {
        ("select", Some(v)) => {
            let option = p["options"].as_array().unwrap().iter().find(|o| o["value"].as_str() == Some(v));
            format!("<span>{}</span><span class=chev>⌄</span>", esc(en(&option.unwrap()["label"]).unwrap()))
        }
        ("select", None) => format!("<span class=ph>{}</span><span class=chev>⌄</span>", esc(placeholder)),
        (_, Some(v)) => format!("<span>{}</span>", esc(v)),
        (_, None) => format!("<span class=ph>{}</span>", esc(placeholder)),
    };
    let help = match (p["url"].as_str(), en(&p["help"])) {
        (Some(url), Some(help)) => format!("<a class=help href=\"{}\">{}</a>", esc(url), esc(help)),
        _ => String::new(),
    };
    format!("<div class=field><div class=label>{}{star}</div><div class=input>{shown}</div>{help}</div>", esc(label))
}

#[test]
fn the_subscription_form_explains_every_property() {
    let provider = yaml("trigger/provider/stateful_trigger.yaml");
    let properties = provider["subscription_schema"].as_array().unwrap();
    let mut body = String::from(
        "<div class=modal><div class=title>Manual Setup<div class=desc>Configure your webhook subscription manually\
         </div></div><div class=body>\
         <div class=field><div class=label>Subscription Name<span class=req>*</span></div>\
         <div class=input><span class=ph>Enter subscription name</span></div></div>\
         <div class=field><div class=label>Callback URL</div><div class=input><span>\
         https://dify.example.com/triggers/plugin/4f1c…</span></div></div>",
    );
    let mut drawn = Vec::new();
    for p in properties {
        let html = field(p);
        assert!(!html.contains("Please enter"), "{}: Dify's fallback placeholder shows", p["name"]);
        assert!(html.contains("class=help"), "{}: no help link under the field", p["name"]);
        drawn.push(html);
    }
    body.push_str(&drawn.concat());
    body.push_str("</div></div>");
    let (dir, _guard) = out_dir();
    let shot = shoot(&dir, "dify-trigger-form", &page(STYLE, &body, ""), 688);
    assert!(shot.height > 1200, "every property is in the screenshot: {} px", shot.height);
}

/// The titles the canvas cuts with an ellipsis, and the tree rows whose description is cut.
const CUT: &str = "function report() {\n\
    return [...document.querySelectorAll('.ntitle, .row .vd')]\n\
      .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent);\n\
  }";

fn node(icon: &str, title: &str) -> String {
    let src = format!("file://{}", path(icon).display());
    format!(
        "<div class=node><div class=head><span class=ico style=\"background-image:url('{src}')\"></span>\
         <div class=ntitle title=\"{0}\">{0}</div></div></div>",
        esc(title)
    )
}

#[test]
fn the_trigger_node_is_drawn_whole_and_apart_from_the_tools() {
    let event = yaml("trigger/events/webhook_received.yaml");
    let manifest = yaml("trigger/manifest.yaml");
    let label = en(&event["identity"]["label"]).unwrap();
    let icon = path("trigger/_assets/icon.svg");
    let mut body = String::from("<div class=canvas>");
    body.push_str(&node("trigger/_assets/icon.svg", label));
    body.push_str(&node("_assets/icon.svg", "Ingest event"));
    body.push_str(&node("_assets/icon.svg", "Complete event"));
    body.push_str(&format!(
        "<div class=tip><span class=ico style=\"display:block;background-image:url('file://{}')\"></span>\
         <b>{}</b>{}</div>",
        icon.display(),
        esc(label),
        esc(en(&event["description"]).unwrap())
    ));
    body.push_str(&format!("<div class=panel><div class=head style=\"margin-bottom:12px\"><span class=ico \
         style=\"background-image:url('file://{}')\"></span><b>{}</b>&nbsp;· {}</div><div class=sec>Output Variables</div>",
        icon.display(), esc(label), esc(en(&manifest["label"]).unwrap())));
    let outputs = event["output_schema"]["properties"].as_object().unwrap();
    for (name, schema) in outputs {
        let (ty, description) = (schema["type"].as_str().unwrap(), esc(schema["description"].as_str().unwrap()));
        body.push_str(&format!(
            "<div class=var><span class=vn>{name}</span><span class=vt>{ty}</span><div class=vd>{description}</div></div>"
        ));
    }
    // Dify draws every object output a second time, as a one-line tree row.
    for (name, schema) in outputs.iter().filter(|(_, s)| s["type"] == "object") {
        let description = esc(schema["description"].as_str().unwrap());
        body.push_str(&format!(
            "<div class=row><span class=vn>{name}</span><span class=vt>object</span><span class=vd>{description}</span></div>"
        ));
    }
    body.push_str("</div></div>");
    let (dir, _guard) = out_dir();
    let shot = shoot(&dir, "dify-trigger-node", &page(STYLE, &body, CUT), 1000);
    assert_eq!(shot.report, Vec::<String>::new(), "cut on the canvas or in the panel");
    let tool_icon = std::fs::read(path("_assets/icon.svg")).unwrap();
    assert_ne!(std::fs::read(icon).unwrap(), tool_icon, "the trigger's node is drawn apart from the tools'");
}
