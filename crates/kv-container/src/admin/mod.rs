//! The `kv` subcommands: `kv serve` and `kv check` (the KV container itself), and the operator
//! commands against a store: `kv ls`, `kv get` (KV container or Redis), `kv backup`,
//! `kv restore`, `kv compact` and `kv usage` (KV container), and `kv reload` (re-read a running
//! container's tokens file).

mod show;
mod source;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};

use crate::server::{self, BackupFormat};
use source::Source;

/// `stateful-tool kv …`.
#[derive(clap::Subcommand)]
pub enum KvCommand {
    /// Serve the v1 KV protocol.
    Serve(server::ServeArgs),
    /// List keys (event records decoded) of a KV container or a Redis.
    Ls(LsArgs),
    /// Show one key: every field of its event record, lease and TTL left.
    Get(GetArgs),
    /// Write a consistent snapshot: online (--url) or from a stopped server's --data.
    Backup(BackupArgs),
    /// Restore a snapshot into an empty data directory.
    Restore(RestoreArgs),
    /// Verify a stopped store's data file offline: every page checksum and every record.
    Check(server::CheckArgs),
    /// Give the space of deleted and purged records back: a stopped store's live records
    /// are copied into a new data file that replaces the old one.
    Compact(server::CompactArgs),
    /// Where a stopped store's disk goes: file length and blocks on disk, per table the bytes
    /// of keys and values, overhead and unused page space, and per record.
    Usage(server::CheckArgs),
    /// Make a running KV container re-read its --tokens-file (as SIGHUP does).
    Reload(ReloadArgs),
    /// The background integrity check of a running `kv serve`, which starts it.
    #[command(hide = true)]
    CheckPinned(server::CheckPinnedArgs),
}

/// Runs one `kv` subcommand.
pub fn run(cmd: KvCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        KvCommand::Serve(args) => server::serve(args),
        KvCommand::Ls(args) => ls(args),
        KvCommand::Get(args) => get(args),
        KvCommand::Backup(args) => backup(args),
        KvCommand::Restore(args) => restore(args),
        KvCommand::Check(args) => server::check(&args.data),
        KvCommand::Compact(args) => server::compact(&args),
        KvCommand::Usage(args) => server::usage(&args.data),
        KvCommand::Reload(args) => reload(args),
        KvCommand::CheckPinned(args) => server::check_pinned(&args),
    }
}

/// `kv reload`: which container to tell to re-read its tokens file.
#[derive(clap::Args)]
pub struct ReloadArgs {
    /// `http(s)://host:port` of the KV container (`?tls_ca=…` as in the plugin's kv_url).
    #[arg(long)]
    pub(crate) url: String,
    /// A `*` token of the container.
    #[arg(long, env = "KV_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
}

pub(crate) fn reload(args: ReloadArgs) -> anyhow::Result<ExitCode> {
    let tokens = runtime()?.block_on(source::reload(&args.url, args.token.as_deref()))?;
    println!("tokens file re-read: {tokens} tokens in force");
    Ok(ExitCode::SUCCESS)
}

/// `kv ls`: which store, and which keys.
#[derive(clap::Args)]
pub struct LsArgs {
    /// `http(s)://host:port` of a KV container, or a `redis://` / `rediss://` URL.
    #[arg(long)]
    pub(crate) url: String,
    /// Bearer token of the KV container (for Redis, put the password in the URL).
    #[arg(long, env = "KV_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// Only keys starting with this (`evt_` = event records; `evt_<namespace>~` = one namespace).
    #[arg(long, default_value = "")]
    pub(crate) prefix: String,
    /// At most this many keys (in key order for the KV container).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub(crate) limit: u64,
}

/// `kv get`: which store, and which key.
#[derive(clap::Args)]
pub struct GetArgs {
    /// The storage key (`kv ls` shows them), e.g. `evt_EVT-1`.
    pub(crate) key: String,
    #[arg(long)]
    pub(crate) url: String,
    #[arg(long, env = "KV_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
}

/// `kv backup`: a running container or a stopped one's data, and where the snapshot goes.
#[derive(clap::Args)]
pub struct BackupArgs {
    /// Online: the running KV container (`GET /backup`, one consistent snapshot).
    #[arg(long, conflicts_with = "data", required_unless_present = "data")]
    pub(crate) url: Option<String>,
    #[arg(long, env = "KV_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// Offline: the data directory of a stopped KV container.
    #[arg(long)]
    pub(crate) data: Option<PathBuf>,
    /// The backup file to write (replaced only once complete).
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// `jsonl`: the live records as JSON lines, in key order. `image`: the data file in page
    /// order under one held commit, read sequentially (several times faster on a large store;
    /// larger by the file's free pages; `kv restore` checks every page and record of it)
    #[arg(long, value_enum, default_value_t = BackupFormat::Jsonl)]
    pub(crate) format: BackupFormat,
}

/// `kv restore`: the snapshot, and the empty data directory it goes into.
#[derive(clap::Args)]
pub struct RestoreArgs {
    /// A file written by `kv backup`.
    pub(crate) file: PathBuf,
    /// An empty data directory to restore into; start `kv serve --data` on it afterwards.
    #[arg(long)]
    pub(crate) data: PathBuf,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

pub(crate) fn ls(args: LsArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let src = Source::connect(&args.url, args.token.as_deref()).await?;
        let items = src.list(&args.prefix, args.limit as usize).await?;
        print!("{}", show::table(&items));
        Ok(ExitCode::SUCCESS)
    })
}

pub(crate) fn get(args: GetArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let src = Source::connect(&args.url, args.token.as_deref()).await?;
        match src.get(&args.key).await? {
            Some(item) => {
                print!("{}", show::detail(&item));
                Ok(ExitCode::SUCCESS)
            }
            None => {
                eprintln!("stateful-tool: {} not found (absent or expired)", args.key);
                Ok(ExitCode::from(1))
            }
        }
    })
}

pub(crate) fn backup(args: BackupArgs) -> anyhow::Result<ExitCode> {
    let summary = match (&args.url, &args.data) {
        (_, Some(dir)) => server::backup_dir(dir, &args.out, args.format)?,
        (Some(url), None) => {
            runtime()?.block_on(source::download_backup(url, args.token.as_deref(), &args.out, args.format))?
        }
        (None, None) => bail!("give --url (online) or --data (offline)"),
    };
    println!("backup written: {} ({} keys, revision {})", args.out.display(), summary.records, summary.last_rev);
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn restore(args: RestoreArgs) -> anyhow::Result<ExitCode> {
    let summary = server::restore(&args.file, &args.data)
        .with_context(|| format!("restoring {} into {}", args.file.display(), args.data.display()))?;
    println!("restored {} keys (revision {}) into {}", summary.records, summary.last_rev, args.data.display());
    Ok(ExitCode::SUCCESS)
}
