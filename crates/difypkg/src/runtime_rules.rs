//! Rules for the manifest's `resource` and `meta` blocks: memory, permissions, arch, runner.

use yaml_serde::Value;

use super::arch::Arch;
use super::field_rules::check_version;
use super::patterns;
use super::yamlcheck::{at, kind, Checker};

pub(crate) fn check_resource(c: &mut Checker, doc: &Value) {
    if c.req_map(at(doc, "resource"), "resource").is_none() {
        return;
    }
    match at(doc, "resource.memory") {
        None => c.problem("resource.memory", "is required (bytes, e.g. 268435456)"),
        Some(Value::Number(n)) if n.as_u64().is_some_and(|m| m > 0) => {}
        Some(other) => {
            c.problem("resource.memory", format!("must be a whole number of bytes above 0, found {}", kind(other)))
        }
    }
    if c.opt_map(at(doc, "resource.permission"), "resource.permission").is_none() {
        return;
    }
    for block in ["tool", "model", "node", "endpoint", "app", "storage"] {
        let field = format!("resource.permission.{block}");
        if let Some(map) = c.opt_map(at(doc, &field), &field) {
            for (key, value) in map {
                let (Some(key), false) = (key.as_str(), value.is_null()) else {
                    continue;
                };
                if key != "size" {
                    c.opt_bool(Some(value), &format!("{field}.{key}"));
                }
            }
        }
    }
    if let Some(size) = at(doc, "resource.permission.storage.size") {
        let ok = size.as_u64().is_some_and(|s| (1024..=1_073_741_824).contains(&s));
        if !ok {
            c.problem("resource.permission.storage.size", "must be a whole number of bytes from 1024 to 1073741824");
        }
    }
}

pub(crate) fn check_meta(c: &mut Checker, doc: &Value) -> Vec<Arch> {
    if c.req_map(at(doc, "meta"), "meta").is_none() {
        return Vec::new();
    }
    check_version(c, at(doc, "meta.version"), "meta.version");
    let mut arches = Vec::new();
    let listed = c.str_list(at(doc, "meta.arch"), "meta.arch", true);
    if listed.is_empty() && at(doc, "meta.arch").is_some() {
        c.problem("meta.arch", "must list at least one of amd64, arm64");
    }
    for (i, name) in listed.iter().enumerate() {
        match Arch::parse(name) {
            Some(a) if arches.contains(&a) => {
                c.problem(&format!("meta.arch[{i}]"), format!("`{name}` is listed twice"))
            }
            Some(a) => arches.push(a),
            None => c.problem(&format!("meta.arch[{i}]"), format!("`{name}` is not amd64 or arm64")),
        }
    }
    if c.req_map(at(doc, "meta.runner"), "meta.runner").is_some() {
        c.one_of(at(doc, "meta.runner.language"), "meta.runner.language", &["python"]);
        match at(doc, "meta.runner.version") {
            Some(Value::Number(n)) => c.problem(
                "meta.runner.version",
                format!("must be a quoted string (\"{n}\"); unquoted it is a number and the SDK refuses it"),
            ),
            v => {
                if c.req_str(v, "meta.runner.version").is_some_and(|s| s.len() > 128) {
                    c.problem("meta.runner.version", "must be at most 128 characters");
                }
            }
        }
        if let Some(entry) = c.req_str(at(doc, "meta.runner.entrypoint"), "meta.runner.entrypoint") {
            if entry != "main" {
                c.problem("meta.runner.entrypoint", format!("`{entry}` must be `main`: the packaged shim is main.py"));
            }
        }
    }
    if let Some(v) = at(doc, "meta.minimum_dify_version") {
        if let Some(s) = c.req_str(Some(v), "meta.minimum_dify_version") {
            if !patterns::is_pep440(s) {
                c.problem("meta.minimum_dify_version", format!("`{s}` is not a PEP 440 version"));
            }
        }
    }
    arches
}
