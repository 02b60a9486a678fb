//! Our HTTP KV container (`stateful-tool kv serve`): conditional writes, TTL, group commit.

use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub enum KvCommand {
    /// Serve the v1 KV protocol.
    Serve(ServeArgs),
}

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Address to bind (loopback unless told otherwise).
    #[arg(long, default_value = "127.0.0.1:8123")]
    pub listen: String,
    /// Data directory.
    #[arg(long, default_value = "./data")]
    pub data: std::path::PathBuf,
    /// Bearer token required on every request (or env KV_TOKEN).
    #[arg(long, env = "KV_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

pub fn run(cmd: KvCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        KvCommand::Serve(_args) => anyhow::bail!("kv serve: not built yet"),
    }
}
