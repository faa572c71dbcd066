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
#[derive(Debug, Args, Clone, Default)]
pub struct TlsArgs {
    /// Require HTTPS and verify certificates (false: allow plain HTTP and self-signed certificates).
    #[arg(long, value_name = "BOOL", default_value = "true", value_parser = parse_bool, num_args = 0..=1, default_missing_value = "true")]
    pub tls_verify: bool,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command in a new container from an image.
    Run(RunArgs),
    /// Open an interactive shell in a new container from an image.
    Shell(ShellArgs),
    /// Pull an image from a registry into the store; prints its id.
    Pull(PullArgs),
    /// Import an image from docker-archive:FILE, oci-archive:FILE, oci:DIR[:TAG], sif:FILE, squashfs:FILE, containers-storage:NAME (your podman images) or docker-daemon:NAME.
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
    /// List the site's modules and CDI devices (what --module, --gpus and --device can inject).
    Modules(ModulesArgs),
    /// List the environment definition files --environment finds by name (EDF_PATH or ~/.edf, then the site's directory), with the image each names.
    Environments(EnvironmentsArgs),
    /// Check what this node and you can do with berth (namespaces, FUSE, overlay, ids, store, plugin), each problem with what to do; exits 17 when something berth needs is missing.
    Doctor(DoctorArgs),
    /// Run a command in a live shared container (see run --shared).
    Exec(ExecArgs),
    /// List your live shared containers on this node (-a: and your named containers).
    Ps(PsArgs),
    /// Remove named containers (run --name) with their changes.
    Rm(RmArgs),
    /// Save a named container (run --name), or a running writable shared container by its key (berth ps), as a squashfs file or an image in the store, as run --save does; a running one is saved as its changes stand.
    Commit(CommitArgs),
    /// Build an image from a Dockerfile, rootless (RUN steps are root in a user namespace).
    Build(BuildArgs),
    /// Give a stored image another name.
    Tag(TagArgs),
    /// Write an image of the store to an oci-archive file (a built image with its layers, a pulled one with its own from the layer cache, any other as one layer of its tree).
    Save(SaveArgs),
    /// Push an image of the store to a registry (a built image with its layers, a pulled one with its own from the layer cache, any other as one layer of its tree).
    Push(PushArgs),
    /// Print the shell completion script for bash, zsh or fish (source it, or install it where the shell looks).
    Completion(CompletionArgs),
    /// Write the manual pages (berth.1 and one per command) into DIR.
    Man(ManArgs),
    /// Write the documentation's reference pages (commands.md, config.md) into DIR.
    #[command(hide = true)]
    Reference(ManArgs),
}

/// `berth completion`.
#[derive(Debug, Args)]
pub struct CompletionArgs {
    /// The shell.
    #[arg(value_parser = ["bash", "zsh", "fish"])]
    pub shell: String,
}

/// `berth man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// The directory to write the pages into (made if missing).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
}

/// `berth build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The build context directory.
    pub context: std::path::PathBuf,
    /// The Dockerfile (default: CONTEXT/Dockerfile).
    #[arg(short = 'f', long = "file")]
    pub file: Option<std::path::PathBuf>,
    /// Name the image (NAME[:TAG]; a name without registry lands under localhost/). Repeatable.
    #[arg(short = 't', long = "tag")]
    pub tags: Vec<String>,
    /// Set a build argument (K=V, or K to take the environment's value). Repeatable.
    #[arg(long = "build-arg", value_name = "K=V")]
    pub build_args: Vec<String>,
    /// Build up to this stage.
    #[arg(long)]
    pub target: Option<String>,
    /// Run every step, ignoring the build cache.
    #[arg(long)]
    pub no_cache: bool,
    /// RUN steps as root: auto (your /etc/subuid range where you have one, else a seccomp filter that fakes chown, setuid and device mknod; files are then root's), seccomp, subuid (an error without a range) or none.
    #[arg(long, value_name = "auto|seccomp|subuid|none", default_value = "auto",
          value_parser = ["auto", "seccomp", "subuid", "none"])]
    pub root_emulation: String,
    /// Platform of the base images (os/arch; only this host's can run steps).
    #[arg(long)]
    pub platform: Option<String>,
    /// Print only the image id.
    #[arg(long, short)]
    pub quiet: bool,
    /// TLS options for pulling base images.
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// `berth tag`.
#[derive(Debug, Args)]
pub struct TagArgs {
    /// The image (name or id).
    pub image: String,
    /// The new name (NAME[:TAG]).
    pub name: String,
}

/// `berth save`.
#[derive(Debug, Args)]
pub struct SaveArgs {
    /// The image (name or id).
    pub image: String,
    /// The oci-archive file to write.
    #[arg(short = 'o', long = "output")]
    pub output: std::path::PathBuf,
}

/// `berth push`.
#[derive(Debug, Args)]
pub struct PushArgs {
    /// The image (name or id).
    pub image: String,
    /// Where to push ([REGISTRY/]NAME[:TAG]; default: the image's name).
    pub destination: Option<String>,
    /// TLS options.
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Credentials USER:PASSWORD for this push (else from auth files).
    #[arg(long, value_name = "USER:PASSWORD")]
    pub creds: Option<String>,
}

impl Command {
    /// Whether the command was asked to be quiet (warnings hidden too).
    pub fn is_quiet(&self) -> bool {
        match self {
            Command::Pull(a) => a.quiet,
            Command::Import(a) => a.quiet,
            Command::Build(a) => a.quiet,
            _ => false,
        }
    }
}

/// Options shared by `run` and `shell`.
#[derive(Debug, Args, Clone, Default)]
pub struct ContainerArgs {
    /// Set an environment variable (NAME=VALUE, or NAME to take the host's value).
    #[arg(short = 'e', long = "env", value_name = "NAME[=VALUE]")]
    pub env: Vec<String>,
    /// Read environment variables from a file (NAME=VALUE lines).
    #[arg(long = "env-file", value_name = "FILE")]
    pub env_file: Vec<std::path::PathBuf>,
    /// Pass the whole host environment (except PATH, LD_LIBRARY_PATH, HOME and similar).
    #[arg(long)]
    pub env_host: bool,
    /// Bind a host path: SRC:DST[:OPTIONS] (SRC alone binds it at the same path); OPTIONS joined by , or +: ro, rw, noexec, a propagation (rprivate, unbindable...), sqsh (SRC is a squashfs or SIF file whose tree is mounted read-only at DST, shared by the node's containers).
    #[arg(short = 'v', long = "volume", value_name = "SRC[:DST[:OPTIONS]]")]
    pub volumes: Vec<String>,
    /// Mount a fresh tmpfs: DST[:OPTIONS], OPTIONS as tmpfs's own (size=1G, mode=1777, huge=within_size) and ro, noexec.
    #[arg(long = "tmpfs", value_name = "DST[:OPTIONS]")]
    pub tmpfs: Vec<String>,
    /// Leave out the bind berth would make at DST (the home directory, /tmp, the current directory, a site's, a -v).
    #[arg(long = "umount", value_name = "DST")]
    pub umount: Vec<String>,
    /// Working directory inside the container.
    #[arg(short = 'w', long = "workdir", value_name = "DIR")]
    pub workdir: Option<String>,
    /// Make the image writable (changes go to memory and vanish with the container).
    #[arg(long)]
    pub writable: bool,
    /// Keep the container's changes in DIR (made if missing; its upper/ and work/ are overlayfs's) for later runs: the root is writable and one run at a time may use DIR. DIR:ro stacks DIR's changes read-only above the image, for any number of runs.
    #[arg(long, value_name = "DIR[:ro]")]
    pub overlay: Option<String>,
    /// When the command ends, save the container's root (the image with its changes; the root is writable) as a squashfs file (TARGET a path, starting with / or ., or ending in .sqsh, .squashfs or .sqfs: written beside it, then renamed over it) or as an image in the store named TARGET, with the image's settings.
    #[arg(long, value_name = "FILE.sqsh|NAME")]
    pub save: Option<String>,
    /// Be root inside the container (mapped to you outside).
    #[arg(long)]
    pub fakeroot: bool,
    /// With --fakeroot: fake the calls that change owners and identities (chown, setuid, mknod of devices) so that apt-get, dpkg and pip install packages: auto (where you have no /etc/subuid range, the default), seccomp (always), subuid (never; an error without a range) or none.
    #[arg(long, value_name = "auto|seccomp|subuid|none")]
    pub root_emulation: Option<String>,
    /// Do not bind your home directory.
    #[arg(long)]
    pub no_home: bool,
    /// Give the container its own PID namespace, with a reaping init.
    #[arg(long)]
    pub pid: bool,
    /// Namespaces of its own: net (an empty network, as --net=none), ipc (System V IPC and a private /dev/shm), uts (the hostname can be set inside, as root); comma-separated.
    #[arg(long = "unshare", value_name = "net,ipc,uts", value_delimiter = ',')]
    pub unshare: Vec<String>,
    /// Network: host (default) or none.
    #[arg(long, default_value = "host", value_parser = ["host", "none"])]
    pub net: String,
    /// Print each start-up phase in microseconds (also BERTH_TIMING=1).
    #[arg(long)]
    pub timing: bool,
    /// GPUs: all, indices (0,1) or UUIDs, or none (the driver without a GPU); through the node's CDI spec when there is one, else driver discovery.
    #[arg(long, value_name = "all|LIST|none")]
    pub gpus: Option<String>,
    /// A CDI device (vendor.com/class=NAME) or a host device node (/dev/PATH[:/dev/TARGET]).
    #[arg(long = "device", value_name = "NAME")]
    pub devices: Vec<String>,
    /// Apply a site module (see `berth modules`); repeat or separate with commas.
    #[arg(long = "module", value_name = "NAME", value_delimiter = ',')]
    pub modules: Vec<String>,
    /// Replace the image's MPI with the host's (the site's MPI module).
    #[arg(long)]
    pub mpi: bool,
    /// An annotation KEY=VALUE (OCI hooks' `when` conditions see it).
    #[arg(long = "annotation", value_name = "KEY=VALUE")]
    pub annotations: Vec<String>,
    /// Security options: seccomp=unconfined turns off the default seccomp
    /// filter (which denies the terminal-injection ioctls TIOCSTI and TIOCLINUX,
    /// kernel keyrings, userfaultfd, kexec, modules and the like);
    /// seccomp=FILE replaces it with a Docker or OCI seccomp profile (the
    /// terminal guard stays).
    #[arg(long = "security-opt", value_name = "seccomp=default|unconfined|FILE")]
    pub security_opt: Vec<String>,
    /// TLS options, for pulling an unknown image.
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// `berth run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Container options.
    #[command(flatten)]
    pub container: ContainerArgs,
    /// With --name: keep nothing of the container (without --name containers always go).
    #[arg(long)]
    pub rm: bool,
    /// Keep standard input (it always is: the caller's own descriptors are used).
    #[arg(short = 'i', long)]
    pub interactive: bool,
    /// The caller's terminal is the container's (no pseudo-terminal is copied through).
    #[arg(short = 't', long)]
    pub tty: bool,
    /// Override the image's ENTRYPOINT (an empty string clears it).
    #[arg(long, value_name = "PROGRAM", allow_hyphen_values = true)]
    pub entrypoint: Option<String>,
    /// Run the image's entrypoint (or --entrypoint) first, on its own, with its output hidden, then the command without it, in the environment the entrypoint left (Pyxis's --container-entrypoint): the entrypoint must end with exec "$@", and the image needs /bin/sh and cat.
    #[arg(long)]
    pub entrypoint_first: bool,
    /// Show the output of an entrypoint run first (--entrypoint-first, or an environment file's): Pyxis's --container-entrypoint-log. Without one, it has no effect.
    #[arg(long)]
    pub entrypoint_log: bool,
    /// Keep the container's changes under NAME in your store (the root is writable): a later run with --name NAME and the same image goes on from them; berth ps -a lists named containers, berth commit saves one as an image, berth rm removes one. Also the container's id in the OCI state hooks see.
    #[arg(long)]
    pub name: Option<String>,
    /// Join the node's shared container KEY, creating it if there is none: all tasks with one KEY share one container (namespaces, mounts, page cache); it goes away with its last task.
    #[arg(long, value_name = "KEY")]
    pub shared: Option<String>,
    /// With --shared: make or find the container, print how a task joins it in place (one JSON line) and hold it until standard input closes; the command is not run (the Slurm plugin's tasks then join it without berth).
    #[arg(long, hide = true, requires = "shared")]
    pub hand_over: bool,
    /// With --shared: keep the container this long after its last task left, for tasks still to come.
    #[arg(long, value_name = "SECONDS", default_value_t = 0, requires = "shared")]
    pub linger: u64,
    /// With --shared: which running container under KEY to join: same (one made from the same image with the same options, else it is refused), any (whatever runs, as it is), existing (whatever runs; never create one, and give no IMAGE), running (one a task runs in now; never create one, and give no IMAGE), new (refused if one runs, unless another task of this Slurm step made it with the same options). With --name and --shared, the named container's changes are kept on this node under the shared container's key: one that runs no task is started anew from them. With --name: same (IMAGE must be the container's), any (an existing container keeps its own image), existing (it must exist; give no IMAGE), new (it must not exist, unless another task of this Slurm step made it).
    #[arg(
        long,
        value_name = "same|any|existing|running|new",
        default_value = "same"
    )]
    pub reuse: String,
    /// With --name: stack the named container's changes read-only (the Slurm plugin's several tasks of a node).
    #[arg(long, hide = true, requires = "name")]
    pub name_readonly: bool,
    /// Pass the whole host environment below the image's ENV (the image's values win; PATH, LD_LIBRARY_PATH, LD_PRELOAD, HOME, LANG, LANGUAGE and LC_ALL are not passed; -e NAME takes the host's value over the image's): the Slurm plugin's policy, as Pyxis's.
    #[arg(long)]
    pub env_below_image: bool,
    /// Without -w: start in the image's WORKDIR, else / (not the current directory): the Slurm plugin's default, as Pyxis's.
    #[arg(long)]
    pub workdir_image: bool,
    /// An absolute command missing from the image is looked up by its name in the image's PATH (the Slurm plugin sets it: srun resolves commands on the submit host).
    #[arg(long, hide = true)]
    pub argv0_fallback: bool,
    /// A missing -w directory is an error instead of created (the Slurm plugin's --container-workdir, as Pyxis).
    #[arg(long, hide = true)]
    pub workdir_must_exist: bool,
    /// Run as an environment definition file says (CSCS's EDF, TOML: image, mounts, workdir, writable, entrypoint, [env], [annotations], devices, base_environment): a path, or NAME for NAME.toml in EDF_PATH (else ~/.edf), then the site's directory (see berth environments). Every word after the options is then the command; options given here add to or override the file's.
    #[arg(long, value_name = "NAME|PATH")]
    pub environment: Option<String>,
    /// With --environment: run this image instead of the file's.
    #[arg(long = "image", value_name = "IMAGE", requires = "environment")]
    pub environment_image: Option<String>,
    /// Print what the run would do (command, environment, binds, injected host resources) as JSON, and start nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Image name, id or registry reference, or an image file run in place:
    /// a SIF file or a squashfs file (./app.sif, /scratch/image.sqsh).
    /// Not given with --reuse existing or running.
    pub image: Option<String>,
    /// Command and arguments (default: the image's ENTRYPOINT and CMD).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// `berth exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Set an environment variable (NAME=VALUE, or NAME to take the host's value); the rest is the container's.
    #[arg(short = 'e', long = "env", value_name = "NAME[=VALUE]")]
    pub env: Vec<String>,
    /// Working directory inside (default: the container's).
    #[arg(short = 'w', long = "workdir", value_name = "DIR")]
    pub workdir: Option<String>,
    /// Accepted for podman compatibility (standard input is always the caller's).
    #[arg(short = 'i', long)]
    pub interactive: bool,
    /// Accepted for podman compatibility (the caller's terminal is used).
    #[arg(short = 't', long)]
    pub tty: bool,
    /// The shared container's key (berth ps).
    pub name: String,
    /// Command and arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    pub command: Vec<String>,
}

/// `berth ps`.
#[derive(Debug, Args)]
pub struct PsArgs {
    /// Output format: table or json.
    #[arg(long, default_value = "table", value_parser = ["table", "json"])]
    pub format: String,
    /// Show only the keys.
    #[arg(long, short)]
    pub quiet: bool,
    /// Also the named containers of your store (run --name), running or not.
    #[arg(long, short)]
    pub all: bool,
}

/// `berth rm`.
#[derive(Debug, Args)]
pub struct RmArgs {
    /// The containers' names.
    #[arg(required = true)]
    pub names: Vec<String>,
}

/// `berth commit`.
#[derive(Debug, Args)]
pub struct CommitArgs {
    /// The named container, or the key of a running shared container of this node.
    #[arg(value_name = "NAME|KEY")]
    pub name: String,
    /// A squashfs file (a path starting with / or ., or ending in .sqsh, .squashfs or .sqfs) or an image name in the store.
    #[arg(value_name = "FILE.sqsh|NAME")]
    pub target: String,
}

/// `berth shell`.
#[derive(Debug, Args)]
pub struct ShellArgs {
    /// Container options.
    #[command(flatten)]
    pub container: ContainerArgs,
    /// Image name, id or registry reference, or an image file run in place:
    /// a SIF file or a squashfs file (./app.sif, /scratch/image.sqsh).
    pub image: String,
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
    /// Keep no downloaded layers in the store's layer cache (only the
    /// squashfs image); layers already cached are still used.
    #[arg(long)]
    pub no_layer_cache: bool,
}

/// `berth import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// docker-archive:FILE[:NAME], oci-archive:FILE[:TAG], oci:DIR[:TAG],
    /// sif:FILE (an Apptainer/Singularity image), squashfs:FILE (a
    /// squashfs file such as enroot's .sqsh), containers-storage:NAME (an
    /// image of your podman storage) or docker-daemon:NAME.
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

/// `berth environments`.
#[derive(Debug, Args)]
pub struct EnvironmentsArgs {
    /// Print the file NAME|PATH names and the image it runs (its bases applied) as JSON, or fail saying why (the Slurm plugin asks this at submission).
    #[arg(long, value_name = "NAME|PATH")]
    pub resolve: Option<String>,
    /// Output format: table or json.
    #[arg(long, default_value = "table", value_parser = ["table", "json"])]
    pub format: String,
}

/// `berth doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Output format: table or json.
    #[arg(long, default_value = "table", value_parser = ["table", "json"])]
    pub format: String,
}

/// `berth modules`.
#[derive(Debug, Args)]
pub struct ModulesArgs {
    /// Output format: table or json.
    #[arg(long, default_value = "table", value_parser = ["table", "json"])]
    pub format: String,
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
