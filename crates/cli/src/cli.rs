//! The command line, as clap structures (parse only: no system calls).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// berth: run OCI/Docker images on HPC systems, rootless, from one squashfs file per image.
#[derive(Debug, Parser)]
#[command(name = "berth", version, about, max_term_width = 100)]
pub struct Cli {
    /// Options for every command.
    #[command(flatten)]
    pub global: Global,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Options shared by every command.
#[derive(Debug, Args)]
pub struct Global {
    /// Image store directory (else BERTH_STORE, else `store` in berth.toml, else $XDG_DATA_HOME/berth).
    #[arg(long, global = true, value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// Log filter: error, warn, info, debug, trace (tracing syntax).
    #[arg(long, global = true, value_name = "LEVEL", env = "BERTH_LOG")]
    pub log_level: Option<String>,
}

/// `true`/`false` flag values in podman's style (`--tls-verify=false`).
fn parse_bool(s: &str) -> Result<bool, String> {
    match s {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        other => Err(format!("expected true or false, got {other:?}")),
    }
}

/// Registry connection options.
#[derive(Debug, Args)]
pub struct TlsArgs {
    /// Require HTTPS and verify certificates (false: allow plain HTTP and self-signed certificates).
    #[arg(long, value_name = "BOOL", default_value = "true", value_parser = parse_bool, num_args = 0..=1, default_missing_value = "true")]
    pub tls_verify: bool,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Pull an image from a registry into the store; prints its id.
    Pull(PullArgs),
    /// Import an image from docker-archive:FILE, oci-archive:FILE or oci:DIR[:TAG].
    Import(ImportArgs),
    /// List images in the store.
    Images(ImagesArgs),
    /// Show an image's record as JSON.
    Inspect(InspectArgs),
    /// Remove image names, and images no name points to.
    Rmi(RmiArgs),
    /// Remove unnamed images and leftovers of interrupted pulls.
    Prune,
    /// Verify every image file against its recorded digest.
    Check,
    /// Store credentials for a registry.
    Login(LoginArgs),
    /// Remove stored credentials for a registry.
    Logout(LogoutArgs),
}

impl Command {
    /// Whether the command was asked to be quiet (warnings hidden too).
    pub fn is_quiet(&self) -> bool {
        match self {
            Command::Pull(a) => a.quiet,
            Command::Import(a) => a.quiet,
            _ => false,
        }
    }
}

/// `berth pull`.
#[derive(Debug, Args)]
pub struct PullArgs {
    /// Image reference: [REGISTRY[:PORT]/]NAME[:TAG][@sha256:DIGEST].
    pub reference: String,
    /// Platform os/arch[/variant] (default: this host's).
    #[arg(long)]
    pub platform: Option<String>,
    /// Print only the image id.
    #[arg(long, short)]
    pub quiet: bool,
    /// TLS options.
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Credentials USER:PASSWORD for this pull (else from auth files).
    #[arg(long, value_name = "USER:PASSWORD")]
    pub creds: Option<String>,
}

/// `berth import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// docker-archive:FILE[:NAME], oci-archive:FILE[:TAG] or oci:DIR[:TAG].
    pub source: String,
    /// Name to give the image (a name without registry lands under localhost/).
    pub name: String,
    /// Platform os/arch[/variant] when the source holds several.
    #[arg(long)]
    pub platform: Option<String>,
    /// Print only the image id.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `berth images`.
#[derive(Debug, Args)]
pub struct ImagesArgs {
    /// Output format: table or json.
    #[arg(long, default_value = "table", value_parser = ["table", "json"])]
    pub format: String,
    /// Show only image ids.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `berth inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// Image name or id.
    pub image: String,
}

/// `berth rmi`.
#[derive(Debug, Args)]
pub struct RmiArgs {
    /// Image names or ids.
    #[arg(required = true)]
    pub images: Vec<String>,
}

/// `berth login`.
#[derive(Debug, Args)]
pub struct LoginArgs {
    /// Registry host[:port].
    pub registry: String,
    /// User name (asked for on a terminal if missing).
    #[arg(long, short)]
    pub username: Option<String>,
    /// Read the password from standard input.
    #[arg(long)]
    pub password_stdin: bool,
    /// TLS options.
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// `berth logout`.
#[derive(Debug, Args)]
pub struct LogoutArgs {
    /// Registry host[:port].
    pub registry: String,
}
