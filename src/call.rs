//! `stateful-tool call`: plays the daemon over pipes.
#[derive(clap::Args)]
pub struct CallArgs {}
pub fn run(_a: CallArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("call: not built yet")
}
