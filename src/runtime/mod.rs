//! The plugin runtime.
#[derive(clap::Args)]
pub struct ServeArgs {}
pub fn run(_a: ServeArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("serve: not built yet")
}
