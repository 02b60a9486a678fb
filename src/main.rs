//! `stateful-tool`: the plugin runtime, its KV container, a local caller, and the package tools.

mod cli;

use clap::{Parser, Subcommand};

use cli::call;
use cli::package;
use kv_container::KvCommand;
use stateful_tool::{serve, SERVE_ENV_HELP};

#[derive(Parser)]
#[command(name = "stateful-tool", version, about = "Exactly-once event ingestion for Dify")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the plugin runtime (INSTALL_METHOD=local: stdio; remote: TCP; serverless/aws_lambda: HTTP).
    #[command(after_help = SERVE_ENV_HELP)]
    Serve,
    /// Play the daemon: start `serve` over pipes, send one request, print the answer.
    Call(call::CallArgs),
    /// The HTTP key-value container that stores events durably.
    #[command(subcommand)]
    Kv(KvCommand),
    /// Build the .difypkg package.
    Package(package::PackageArgs),
    /// Generate an RSA key pair (PKCS#1 PEM) for signing packages.
    Keygen(package::KeygenArgs),
    /// Sign a .difypkg the way the Dify daemon verifies it.
    Sign(package::SignArgs),
    /// Verify a .difypkg signature against one or more public keys.
    Verify(package::VerifyArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // STATEFUL_TOOL_LOG, else RUST_LOG, else info (for every command, so it is read here).
    dify_plugin::logging::init(std::env::var("STATEFUL_TOOL_LOG").ok().as_deref());
    let result = match cli.command {
        Command::Serve => return serve_exit(serve()),
        Command::Call(args) => call::run(args),
        Command::Kv(cmd) => kv_container::run(cmd),
        Command::Package(args) => package::run_package(args),
        Command::Keygen(args) => package::run_keygen(args),
        Command::Sign(args) => package::run_sign(args),
        Command::Verify(args) => package::run_verify(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("stateful-tool: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `serve`'s end as an exit code: 0 when the daemon is done with the plugin, 2 when remote
/// debugging was refused (retrying cannot help), 3 when the protocol output closed, else 1.
fn serve_exit(result: Result<dify_plugin::Exit, dify_plugin::Error>) -> std::process::ExitCode {
    let e = match result {
        Ok(_) => return std::process::ExitCode::SUCCESS,
        Err(e) => e,
    };
    let code = match e {
        dify_plugin::Error::Refused(_) => 2,
        dify_plugin::Error::OutputClosed(_) => 3,
        _ => 1,
    };
    eprintln!("stateful-tool: {:#}", anyhow::Error::from(e));
    std::process::ExitCode::from(code)
}
