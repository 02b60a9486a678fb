//! Building, signing and verifying the .difypkg.

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct PackageArgs {
    /// Output directory.
    #[arg(long, default_value = "dist")]
    pub out: std::path::PathBuf,
}

#[derive(clap::Args)]
pub struct KeygenArgs {}

#[derive(clap::Args)]
pub struct SignArgs {}

#[derive(clap::Args)]
pub struct VerifyArgs {}

pub fn run_package(_args: PackageArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("package: not built yet")
}
pub fn run_keygen(_args: KeygenArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("keygen: not built yet")
}
pub fn run_sign(_args: SignArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("sign: not built yet")
}
pub fn run_verify(_args: VerifyArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("verify: not built yet")
}
