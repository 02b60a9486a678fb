//! `stateful-tool call`: plays the daemon — spawns `serve` over pipes, sends one request
//! serialised as the daemon does, and prints the answer. How users try the plugin without Dify.

use std::process::{ExitCode, Stdio};

use anyhow::Context;
use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use stateful_tool::{request_line_from, DEFAULT_KV_URL, PROVIDER};

#[derive(clap::Args)]
pub(crate) struct CallArgs {
    /// Tool to invoke (event_ingest, event_status, event_complete), or `validate` to check the
    /// credentials, or `parameters:<tool>` for get_tool_runtime_parameters.
    pub(crate) tool: String,
    /// A tool parameter, `name=value` (repeatable).
    #[arg(long = "param", short = 'p', value_name = "NAME=VALUE")]
    pub(crate) params: Vec<String>,
    /// A provider credential, `name=value` (repeatable). kv_url defaults to $KV_URL or http://127.0.0.1:8123.
    #[arg(long = "credential", short = 'c', value_name = "NAME=VALUE")]
    pub(crate) credentials: Vec<String>,
    /// Print every protocol line the plugin wrote, as received.
    #[arg(long)]
    pub(crate) raw: bool,
    /// Which Dify caller to play: `workflow` (a workflow tool node: also gets one variable
    /// message per declared output), `agent` (an agent app) or `backwards` (an Agent node
    /// strategy calling back through Dify).
    #[arg(long, default_value = "workflow", value_parser = ["workflow", "agent", "backwards"])]
    pub(crate) caller: String,
}

fn pairs(items: &[String], what: &str) -> anyhow::Result<Map<String, Value>> {
    let mut map = Map::new();
    for item in items {
        let (k, v) = item.split_once('=').with_context(|| format!("{what} {item:?} is not name=value"))?;
        map.insert(k.to_owned(), Value::String(v.to_owned()));
    }
    Ok(map)
}

fn request_data(args: &CallArgs) -> anyhow::Result<Value> {
    let mut creds = pairs(&args.credentials, "credential")?;
    if !creds.contains_key("kv_url") {
        let url = std::env::var("KV_URL").unwrap_or_else(|_| DEFAULT_KV_URL.to_owned());
        creds.insert("kv_url".into(), Value::String(url));
    }
    let base = json!({"credentials": creds, "provider": PROVIDER, "type": "tool", "user_id": "cli"});
    let mut data = base.as_object().cloned().expect("object");
    if args.tool == "validate" {
        data.insert("action".into(), json!("validate_tool_credentials"));
    } else if let Some(tool) = args.tool.strip_prefix("parameters:") {
        data.insert("action".into(), json!("get_tool_runtime_parameters"));
        data.insert("tool".into(), json!(tool));
    } else {
        data.insert("action".into(), json!("invoke_tool"));
        data.insert("credential_type".into(), json!("api-key"));
        data.insert("tool".into(), json!(args.tool));
        data.insert("tool_parameters".into(), Value::Object(pairs(&args.params, "param")?));
    }
    Ok(Value::Object(data))
}

pub(crate) fn run(args: CallArgs) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(call(args))
}

async fn call(args: CallArgs) -> anyhow::Result<ExitCode> {
    let session_id = format!("cli-{:016x}", rand::random::<u64>());
    let (app_id, message_id) = match args.caller.as_str() {
        "agent" => (Some("cli-app"), Some("cli-message")),
        "backwards" => (None, None),
        _ => (Some("cli-app"), None),
    };
    let request = request_data(&args)?;
    let line = request_line_from(&session_id, request.clone(), app_id, message_id);
    let exe = std::env::current_exe().context("cannot find this executable")?;
    let mut child = tokio::process::Command::new(exe)
        .arg("serve")
        .env("INSTALL_METHOD", "local")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .context("cannot start `stateful-tool serve`")?;
    let mut stdin = child.stdin.take().context("no stdin pipe")?;
    stdin.write_all(line.as_bytes()).await?;
    // Closing stdin is how the daemon's one-shot runner works: serve answers, then exits.
    drop(stdin);
    let mut lines = BufReader::new(child.stdout.take().context("no stdout pipe")?).lines();
    let mut failed = false;
    while let Some(l) = lines.next_line().await? {
        if args.raw {
            emit(format_args!("{l}"))?;
        }
        let Ok(msg) = serde_json::from_str::<Value>(&l) else {
            continue;
        };
        if msg["event"] != "session" || msg["session_id"] != session_id.as_str() {
            continue;
        }
        let data = &msg["data"]["data"];
        match msg["data"]["type"].as_str() {
            Some("stream") if !args.raw && args.tool == "validate" => print_validation(data, &request)?,
            Some("stream") if !args.raw => print_chunk(data)?,
            Some("error") => {
                failed = true;
                eprintln!(
                    "error: {}: {}",
                    data["error_type"].as_str().unwrap_or("?"),
                    data["message"].as_str().unwrap_or("?")
                );
            }
            Some("end") => break,
            _ => {}
        }
    }
    let status = child.wait().await?;
    if !status.success() {
        anyhow::bail!("the plugin exited with {status}");
    }
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// Shows each message by kind: the `text` one (the sentence agents read) as it is, the
/// `json` one pretty-printed, each `variable` one (a workflow node's output) as `name = value`.
fn print_chunk(chunk: &Value) -> std::io::Result<()> {
    let message = &chunk["message"];
    match chunk["type"].as_str() {
        Some("json") => {
            emit(format_args!("json: {}", serde_json::to_string_pretty(&message["json_object"]).unwrap_or_default()))
        }
        Some("text") => emit(format_args!("text: {}", message["text"].as_str().unwrap_or_default().trim_end())),
        Some("variable") => emit(format_args!(
            "variable {} = {}",
            message["variable_name"].as_str().unwrap_or("?"),
            message["variable_value"]
        )),
        _ => emit(format_args!("{chunk}")),
    }
}

/// `validate` answers `{"result": true}` and nothing else; say what that means in a sentence,
/// as the tools' answers do, then show the answer itself. The URL is shown redacted: it may
/// carry a password.
fn print_validation(chunk: &Value, request: &Value) -> std::io::Result<()> {
    if chunk["result"] == true {
        let url = request["credentials"]["kv_url"].as_str().unwrap_or_default();
        emit(format_args!(
            "text: The credentials are valid: the store at {} is reachable, accepts them and can create records \
             atomically; save them in the provider's credential form.",
            event_store::url::redact(url)
        ))?;
    }
    emit(format_args!("json: {chunk}"))
}

/// Writes one line to stdout. A reader that went away (`call … | head`) ends the output
/// quietly instead of panicking, as command-line tools do.
fn emit(line: std::fmt::Arguments) -> std::io::Result<()> {
    use std::io::Write;
    match writeln!(std::io::stdout().lock(), "{line}") {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => other,
    }
}
