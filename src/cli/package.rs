//! `package`, `keygen`, `sign` and `verify`: the `difypkg` library behind the commands' words.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use difypkg::{verify_bytes, Arch, CategoryInfo, Problem};

use super::Chain;

#[derive(clap::Args)]
pub(crate) struct PackageArgs {
    /// Output directory.
    #[arg(long, default_value = "dist")]
    out: PathBuf,
    /// Plugin source tree (manifest.yaml, provider/, tools/, _assets/, README.md, …).
    #[arg(long, default_value = ".")]
    source: PathBuf,
    /// Binary per arch, ARCH=PATH with ARCH amd64 or arm64 (repeatable); packaged as
    /// bin/stateful-tool-ARCH. Default: this executable, for the host arch. The packaged
    /// manifest's meta.arch is set to exactly the packaged arches.
    #[arg(long = "bin", value_name = "ARCH=PATH")]
    bins: Vec<String>,
    /// Validate (and build in memory) without writing anything.
    #[arg(long)]
    check_only: bool,
    /// File to package as README.md (what Dify's plugin panel shows) instead of the source
    /// tree's README.md; `make package` passes docs/dify-panel-readme.md.
    #[arg(long, value_name = "PATH")]
    readme: Option<PathBuf>,
}

#[derive(clap::Args)]
pub(crate) struct KeygenArgs {
    /// Directory for the two PEM files, created (mode 0700) when missing. The default, keys/,
    /// is ignored by the repository's git, so a key pair made there is never committed.
    #[arg(long, default_value = "keys")]
    out_dir: PathBuf,
    /// File name prefix: NAME.private.pem and NAME.public.pem.
    #[arg(long, default_value = "stateful_tool_signing_key")]
    name: String,
    /// RSA modulus size in bits: 2048, 2560, 3072, 3584 or 4096, the sizes the signer (ring) signs with.
    #[arg(long, default_value_t = 4096)]
    bits: usize,
}

/// `authorized_category` as the command line spells it (any case).
#[derive(Clone, Copy, clap::ValueEnum)]
enum CategoryArg {
    Langgenius,
    Partner,
    Community,
}

impl From<CategoryArg> for difypkg::Category {
    fn from(category: CategoryArg) -> Self {
        match category {
            CategoryArg::Langgenius => Self::Langgenius,
            CategoryArg::Partner => Self::Partner,
            CategoryArg::Community => Self::Community,
        }
    }
}

#[derive(clap::Args)]
pub(crate) struct SignArgs {
    /// Package to sign.
    pkg: PathBuf,
    /// PKCS#1 PEM private key (`RSA PRIVATE KEY`).
    #[arg(long)]
    key: PathBuf,
    /// authorized_category written to .verification.dify.json.
    #[arg(long, value_enum, ignore_case = true, default_value = "community")]
    category: CategoryArg,
    /// Signature time, Unix seconds (default: now).
    #[arg(long, allow_negative_numbers = true)]
    time: Option<i64>,
    /// Output file (default: <dir>/<base>.signed.difypkg).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(clap::Args)]
pub(crate) struct VerifyArgs {
    /// Package to verify.
    pkg: PathBuf,
    /// Trusted PKCS#1 PEM public key (`RSA PUBLIC KEY`); repeatable.
    #[arg(long = "key", value_name = "PUBLIC_PEM")]
    keys: Vec<PathBuf>,
    /// Also trust the official Dify marketplace key (tried first, as the daemon does).
    #[arg(long)]
    official: bool,
}

fn print_problems(what: &str, problems: &[Problem]) {
    for p in problems {
        eprintln!("error: {p}");
    }
    eprintln!("{what}: {} problem(s) found; nothing written", problems.len());
}

/// Parses `amd64=PATH` / `arm64=PATH`.
fn parse_bin_arg(arg: &str) -> anyhow::Result<(Arch, PathBuf)> {
    let (arch, path) = arg
        .split_once('=')
        .with_context(|| format!("--bin `{arg}`: expected ARCH=PATH, e.g. amd64=target/release/stateful-tool"))?;
    let arch =
        Arch::parse(arch).with_context(|| format!("--bin `{arg}`: unknown arch `{arch}` (use amd64 or arm64)"))?;
    anyhow::ensure!(!path.is_empty(), "--bin `{arg}`: the path is empty");
    Ok((arch, PathBuf::from(path)))
}

fn resolve_bins(args: &[String]) -> anyhow::Result<Vec<(Arch, PathBuf)>> {
    if args.is_empty() {
        let host = Arch::host().context("unknown host arch; pass --bin amd64=PATH or --bin arm64=PATH")?;
        let exe = std::env::current_exe().context("cannot locate the running executable; pass --bin")?;
        return Ok(vec![(host, exe)]);
    }
    args.iter().map(|a| parse_bin_arg(a)).collect()
}

pub(crate) fn run_package(args: PackageArgs) -> anyhow::Result<ExitCode> {
    let bins = resolve_bins(&args.bins)?;
    let built = match difypkg::build_package_with_readme(&args.source, &bins, args.readme.as_deref()) {
        Ok(built) => built,
        Err(invalid) => {
            print_problems("package", invalid.problems());
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
        difypkg::write_atomically(&path, &built.bytes).with_context(|| format!("cannot write {}", path.display()))?;
        println!("package: {} ({} bytes)", path.display(), built.bytes.len());
    }
    println!("identifier: {}", built.identifier);
    println!("uncompressed: {} bytes in {} files", built.plan.report.total_size, built.plan.report.files.len());
    for (arch, size) in &built.plan.binaries {
        println!("binary {arch}: {} ({size} bytes)", arch.binary_entry());
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn run_keygen(args: KeygenArgs) -> anyhow::Result<ExitCode> {
    let (private, public) = difypkg::write_key_pair(&args.out_dir, &args.name, args.bits)?;
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
fn default_signed_path(pkg: &Path) -> PathBuf {
    let name = pkg.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let base = name.strip_suffix(".difypkg").unwrap_or(&name);
    pkg.with_file_name(format!("{base}.signed.difypkg"))
}

pub(crate) fn run_sign(args: SignArgs) -> anyhow::Result<ExitCode> {
    let key = difypkg::load_private_key(&args.key)?;
    let bytes = std::fs::read(&args.pkg).with_context(|| format!("cannot read {}", args.pkg.display()))?;
    if let Err(invalid) = difypkg::validate_package_bytes(bytes.clone()) {
        for p in invalid.problems() {
            eprintln!("warning: {p}");
        }
        eprintln!("warning: the package does not follow the stateful_tool layout; signing it anyway");
    }
    let time = args.time.unwrap_or_else(|| chrono::Utc::now().timestamp());
    let category = difypkg::Category::from(args.category);
    let (zip, signed) = difypkg::sign_package(bytes, &key, category, time)?;
    let out = args.out.unwrap_or_else(|| default_signed_path(&args.pkg));
    difypkg::write_atomically(&out, &zip).with_context(|| format!("cannot write {}", out.display()))?;
    println!("signed: {} ({} bytes, category: {}, time: {time})", out.display(), zip.len(), category.as_str());
    // Self-check with the matching public key before reporting success.
    let outcome = verify_bytes(zip, &[key.public_key()]);
    if let Err(failure) = outcome.result {
        anyhow::bail!("internal error: {} does not verify: {}", out.display(), Chain(&failure));
    }
    if let Some(id) = outcome.identifier {
        println!("identifier: {id}");
    }
    println!("entries signed: {}", signed.entries.len());
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn run_verify(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    if args.keys.is_empty() && !args.official {
        anyhow::bail!("verify: give at least one --key PUBLIC.pem, or --official");
    }
    let mut trusted = Vec::new();
    let mut names = Vec::new();
    if args.official {
        trusted.push(difypkg::official_public_key());
        names.push("official marketplace key".to_string());
    }
    // Like the daemon, one unusable key file fails the whole verification.
    for path in &args.keys {
        match difypkg::load_public_key(path) {
            Ok(key) => {
                trusted.push(key);
                names.push(path.display().to_string());
            }
            Err(e) => {
                println!("not verified: {}", Chain(&e));
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
    let outcome = verify_bytes(bytes, &trusted);
    match &outcome.checksum {
        Ok(sum) => println!("checksum: {sum}"),
        Err(e) => println!("checksum: error: {}", Chain(e)),
    }
    if let Some(id) = &outcome.identifier {
        println!("identifier: {id}");
    }
    match outcome.result {
        Ok(v) => {
            let category = match &v.category {
                CategoryInfo::Declared(c) => c.as_str().to_string(),
                CategoryInfo::Missing => {
                    "langgenius (no .verification.dify.json; the daemon reports langgenius)".into()
                }
                CategoryInfo::Invalid(e) => format!("invalid ({})", Chain(e)),
            };
            println!("verified (key: {}, category: {category}, time: {})", names[v.key_index], v.time);
            Ok(ExitCode::SUCCESS)
        }
        Err(failure) => {
            println!("not verified: {}", Chain(&failure));
            Ok(ExitCode::FAILURE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bin_args() {
        assert_eq!(parse_bin_arg("arm64=/x/y").unwrap(), (Arch::Arm64, PathBuf::from("/x/y")));
        let refused = |arg: &str| parse_bin_arg(arg).unwrap_err().to_string();
        assert_eq!(refused("x86=/y"), "--bin `x86=/y`: unknown arch `x86` (use amd64 or arm64)");
        assert_eq!(refused("amd64"), "--bin `amd64`: expected ARCH=PATH, e.g. amd64=target/release/stateful-tool");
        assert_eq!(refused("amd64="), "--bin `amd64=`: the path is empty");
    }

    #[test]
    fn the_signed_file_sits_beside_the_package() {
        assert_eq!(default_signed_path(Path::new("dist/x-1.0.0.difypkg")), Path::new("dist/x-1.0.0.signed.difypkg"));
        assert_eq!(default_signed_path(Path::new("pkg.zip")), Path::new("pkg.zip.signed.difypkg"));
    }
}
