//! Building, signing and verifying the .difypkg.
//!
//! `package` validates an allow-listed source tree and writes a deterministic zip;
//! `keygen`/`sign`/`verify` implement the daemon's signature scheme byte for byte.
//!
//! Package contents: `manifest.yaml`, `README.md`, `PRIVACY.md`, `requirements.txt`,
//! `main.py`, the provider YAML named in `plugins.tools`, the tool YAML it lists, the
//! icons named by manifest and provider (under `_assets/`), and `bin/stateful-tool-<arch>`
//! per `--bin`. Nothing else from the source tree is read, except the file `--readme`
//! names, packaged as `README.md`. When the packaged arches differ
//! from `meta.arch`, the manifest written into the package has its `arch:` list replaced
//! by exactly the packaged arches (only those lines change; the source file is untouched)
//! and `package` prints a note saying so.

mod arch;
mod archive;
pub mod checksum;
mod decl_check;
mod field_rules;
pub mod gofs;
mod keygen;
pub mod keys;
mod layout;
pub mod manifest_rules;
pub mod pack;
mod patterns;
mod runtime_rules;
pub mod sign;
pub mod tool_rules;
pub mod trigger_rules;
mod validate;
pub mod verify;
pub mod yamlcheck;
pub mod zipread;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

pub use arch::Arch;
pub use archive::{read_package, write_zip, PackageFile};
use sign::Category;
pub use validate::{validate_package_bytes, validate_package_dir, validate_plugin_dir, Problem, Report};

#[derive(clap::Args)]
pub struct PackageArgs {
    /// Output directory.
    #[arg(long, default_value = "dist")]
    pub(crate) out: PathBuf,
    /// Plugin source tree (manifest.yaml, provider/, tools/, _assets/, README.md, …).
    #[arg(long, default_value = ".")]
    pub(crate) source: PathBuf,
    /// Binary per arch, ARCH=PATH with ARCH amd64 or arm64 (repeatable); packaged as
    /// bin/stateful-tool-ARCH. Default: this executable, for the host arch. The packaged
    /// manifest's meta.arch is set to exactly the packaged arches.
    #[arg(long = "bin", value_name = "ARCH=PATH")]
    pub(crate) bins: Vec<String>,
    /// Validate (and build in memory) without writing anything.
    #[arg(long)]
    pub(crate) check_only: bool,
    /// File to package as README.md (what Dify's plugin panel shows) instead of the source
    /// tree's README.md; `make package` passes docs/dify-panel-readme.md.
    #[arg(long, value_name = "PATH")]
    pub(crate) readme: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct KeygenArgs {
    /// Directory for the two PEM files, created (mode 0700) when missing. The default, keys/,
    /// is ignored by the repository's git, so a key pair made there is never committed.
    #[arg(long, default_value = "keys")]
    pub(crate) out_dir: PathBuf,
    /// File name prefix: NAME.private.pem and NAME.public.pem.
    #[arg(long, default_value = "stateful_tool_signing_key")]
    pub(crate) name: String,
    /// RSA modulus size in bits: 2048, 2560, 3072, 3584 or 4096, the sizes the signer (ring) signs with.
    #[arg(long, default_value_t = 4096)]
    pub(crate) bits: usize,
}

#[derive(clap::Args)]
pub struct SignArgs {
    /// Package to sign.
    pub(crate) pkg: PathBuf,
    /// PKCS#1 PEM private key (`RSA PRIVATE KEY`).
    #[arg(long)]
    pub(crate) key: PathBuf,
    /// authorized_category written to .verification.dify.json.
    #[arg(long, value_enum, ignore_case = true, default_value = "community")]
    pub(crate) category: Category,
    /// Signature time, Unix seconds (default: now).
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) time: Option<i64>,
    /// Output file (default: <dir>/<base>.signed.difypkg).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct VerifyArgs {
    /// Package to verify.
    pub(crate) pkg: PathBuf,
    /// Trusted PKCS#1 PEM public key (`RSA PUBLIC KEY`); repeatable.
    #[arg(long = "key", value_name = "PUBLIC_PEM")]
    pub(crate) keys: Vec<PathBuf>,
    /// Also trust the official Dify marketplace key (tried first, as the daemon does).
    #[arg(long)]
    pub(crate) official: bool,
}

fn print_problems(what: &str, problems: &[Problem]) {
    for p in problems {
        eprintln!("error: {p}");
    }
    eprintln!("{what}: {} problem(s) found; nothing written", problems.len());
}

fn resolve_bins(args: &[String]) -> anyhow::Result<Vec<(Arch, PathBuf)>> {
    if args.is_empty() {
        let host = Arch::host().context("unknown host arch; pass --bin amd64=PATH or --bin arm64=PATH")?;
        let exe = std::env::current_exe().context("cannot locate the running executable; pass --bin")?;
        return Ok(vec![(host, exe)]);
    }
    args.iter().map(|a| arch::parse_bin_arg(a).map_err(anyhow::Error::msg)).collect()
}

pub fn run_package(args: PackageArgs) -> anyhow::Result<ExitCode> {
    let bins = resolve_bins(&args.bins)?;
    let built = match pack::build_package_with_readme(&args.source, &bins, args.readme.as_deref()) {
        Ok(built) => built,
        Err(problems) => {
            print_problems("package", &problems);
            return Ok(ExitCode::FAILURE);
        }
    };
    let path = args.out.join(&built.file_name);
    for note in &built.plan.notes {
        println!("note: {note}");
    }
    for warning in &built.warnings {
        eprintln!("warning: {warning}");
    }
    if args.check_only {
        println!("check passed; would write {} ({} bytes)", path.display(), built.bytes.len());
    } else {
        std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
        pack::write_atomically(&path, &built.bytes).with_context(|| format!("cannot write {}", path.display()))?;
        println!("package: {} ({} bytes)", path.display(), built.bytes.len());
    }
    println!("identifier: {}", built.identifier);
    println!("uncompressed: {} bytes in {} files", built.plan.report.total_size, built.plan.report.files.len());
    for (arch, size) in &built.plan.binaries {
        println!("binary {arch}: {} ({size} bytes)", arch.binary_entry());
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run_keygen(args: KeygenArgs) -> anyhow::Result<ExitCode> {
    let (private, public) = keys::write_key_pair(&args.out_dir, &args.name, args.bits).map_err(anyhow::Error::msg)?;
    println!("private key: {} (mode 0600; keep it secret)", private.display());
    println!("public key: {} (mode 0644; give it to the daemon)", public.display());
    println!(
        "sign with: make package SIGNING_KEY={} (in the repository), or stateful-tool sign <package> --key {}",
        private.display(),
        private.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `<dir>/<base>.signed.difypkg`, where base is the file name without `.difypkg`.
pub(crate) fn default_signed_path(pkg: &Path) -> PathBuf {
    let name = pkg.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let base = name.strip_suffix(".difypkg").unwrap_or(&name);
    pkg.with_file_name(format!("{base}.signed.difypkg"))
}

pub fn run_sign(args: SignArgs) -> anyhow::Result<ExitCode> {
    let key = keys::load_private_key(&args.key).map_err(anyhow::Error::msg)?;
    let bytes = std::fs::read(&args.pkg).with_context(|| format!("cannot read {}", args.pkg.display()))?;
    if let Err(problems) = validate_package_bytes(bytes.clone()) {
        for p in problems {
            eprintln!("warning: {p}");
        }
        eprintln!("warning: the package does not follow the stateful_tool layout; signing it anyway");
    }
    let time = args.time.unwrap_or_else(|| chrono::Utc::now().timestamp());
    let (zip, signed) = sign::sign_package(bytes, &key, args.category, time).map_err(anyhow::Error::msg)?;
    let out = args.out.unwrap_or_else(|| default_signed_path(&args.pkg));
    pack::write_atomically(&out, &zip).with_context(|| format!("cannot write {}", out.display()))?;
    println!("signed: {} ({} bytes, category: {}, time: {time})", out.display(), zip.len(), args.category.as_str());
    // Self-check with the matching public key before reporting success.
    let outcome = verify::verify_bytes(zip, &[key.public_key()]);
    if let Err(failure) = outcome.result {
        anyhow::bail!("internal error: {} does not verify: {failure}", out.display());
    }
    if let Some(id) = outcome.identifier {
        println!("identifier: {id}");
    }
    println!("entries signed: {}", signed.entries.len());
    Ok(ExitCode::SUCCESS)
}

pub fn run_verify(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    if args.keys.is_empty() && !args.official {
        anyhow::bail!("verify: give at least one --key PUBLIC.pem, or --official");
    }
    let mut trusted = Vec::new();
    let mut names = Vec::new();
    if args.official {
        trusted.push(keys::official_public_key());
        names.push("official marketplace key".to_string());
    }
    // Like the daemon, one unusable key file fails the whole verification.
    for path in &args.keys {
        match keys::load_public_key(path) {
            Ok(key) => {
                trusted.push(key);
                names.push(path.display().to_string());
            }
            Err(e) => {
                println!("not verified: {e}");
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    let bytes = match std::fs::read(&args.pkg) {
        Ok(bytes) => bytes,
        Err(e) => {
            println!("not verified: cannot read {}: {e}", args.pkg.display());
            return Ok(ExitCode::FAILURE);
        }
    };
    let outcome = verify::verify_bytes(bytes, &trusted);
    match &outcome.checksum {
        Ok(sum) => println!("checksum: {sum}"),
        Err(e) => println!("checksum: error: {e}"),
    }
    if let Some(id) = &outcome.identifier {
        println!("identifier: {id}");
    }
    match outcome.result {
        Ok(v) => {
            let category = match &v.category {
                verify::CategoryInfo::Declared(c) => c.clone(),
                verify::CategoryInfo::Missing => {
                    "langgenius (no .verification.dify.json; the daemon reports langgenius)".into()
                }
                verify::CategoryInfo::Invalid(e) => format!("invalid ({e})"),
            };
            println!("verified (key: {}, category: {category}, time: {})", names[v.key_index], v.time);
            Ok(ExitCode::SUCCESS)
        }
        Err(failure) => {
            println!("not verified: {failure}");
            Ok(ExitCode::FAILURE)
        }
    }
}
