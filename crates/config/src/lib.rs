//! berth's configuration.
//!
//! Configuration is read in two stages (ripgrep's low and high arguments): a pure parse of
//! the TOML files into [`ConfigFile`], then a resolution against the process
//! environment into [`Config`]. The site file (`/etc/berth/berth.toml`) is read
//! first, the user's (`$XDG_CONFIG_HOME/berth/berth.toml`) second; a scalar set
//! in the user file wins, lists are concatenated (site entries first).

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

pub mod exit;
pub mod expand;
mod image_serving;
pub mod layer_cache;
mod merge;
pub mod names;
pub mod registries;
pub mod root;
mod squashfs;

pub use image_serving::{ImageMount, RootOverlay, SquashfsServer};
pub use squashfs::SquashfsSettings;

use serde::{Deserialize, Serialize};

/// The site-wide configuration file.
pub const SYSTEM_CONFIG: &str = "/etc/berth/berth.toml";

/// Errors while reading configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A config file exists but could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A setting uses a variable that is not set (or a malformed `$`).
    #[error("config file {path}: `{key}` = {message}")]
    Variable {
        /// The file.
        path: PathBuf,
        /// The setting.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// A config file is not valid TOML or has unknown keys.
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, which names the line and key.
        message: String,
    },
    /// No store location could be derived (no HOME, no XDG_DATA_HOME).
    #[error("no store location: set --store, BERTH_STORE, `store` in berth.toml, or HOME")]
    NoStore,
}

/// Run-time settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuntimeSettings {
    /// Site binds for every container: `SRC[:DST][:ro|rw]`; sources missing
    /// on a node are skipped.
    #[serde(default)]
    pub binds: Vec<String>,
    /// Seconds an image mount stays alive after its last container ends.
    #[serde(default = "default_keeper_idle")]
    pub keeper_idle_seconds: u64,
    /// The server of rootless image mounts: berth's own (the default) or
    /// `squashfuse_ll` (the fallback). Real root mounts with the kernel.
    #[serde(default)]
    pub squashfs_server: SquashfsServer,
    /// How rootless runs get the image's tree: FUSE where it works, else
    /// unpacked with a warning (`auto`, the default), `fuse` only, or
    /// `unpack` (into `$TMPDIR` or /var/tmp, removed when the keeper
    /// leaves). Real root mounts with the kernel.
    #[serde(default)]
    pub image_mount: ImageMount,
    /// What stacks the container's layer on the image: kernel overlayfs
    /// where the kernel allows it, else binds-only roots for read-only
    /// runs and fuse-overlayfs for writable ones (`auto`, the default),
    /// `kernel` only, `fuse` (fuse-overlayfs for every rootless root), or
    /// `none` (binds-only roots always).
    #[serde(default)]
    pub overlay: RootOverlay,
}

fn default_keeper_idle() -> u64 {
    30
}

impl Default for RuntimeSettings {
    fn default() -> Self {
        Self {
            binds: Vec::new(),
            keeper_idle_seconds: default_keeper_idle(),
            squashfs_server: SquashfsServer::default(),
            image_mount: ImageMount::default(),
            overlay: RootOverlay::default(),
        }
    }
}

/// How berth talks to registries (`[network]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkSettings {
    /// Attempts per request for transient failures (5xx, resets, timeouts).
    pub attempts: u32,
    /// First back-off delay in milliseconds; doubles each retry.
    pub backoff_ms: u64,
    /// Seconds to wait for a connection.
    pub connect_timeout_seconds: u64,
    /// Seconds without a byte from the registry before a transfer counts
    /// as stalled (and is retried, resuming where it stopped).
    pub read_timeout_seconds: u64,
    /// Layers a pull downloads at once.
    pub max_connections: usize,
}

impl Default for NetworkSettings {
    fn default() -> Self {
        Self {
            attempts: 5,
            backoff_ms: 250,
            connect_timeout_seconds: 20,
            read_timeout_seconds: 60,
            max_connections: 8,
        }
    }
}

/// One parsed config file, as written. Every key is optional.
#[derive(Debug, Default, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// The user's (writable) image store. `--store` and `BERTH_STORE` go
    /// first; unset everywhere: `$XDG_DATA_HOME/berth`, else
    /// `~/.local/share/berth`.
    pub store: Option<PathBuf>,
    /// Read-only stores searched after the user's, e.g. a site store on the
    /// parallel filesystem maintained by the admins.
    #[serde(default)]
    pub shared_stores: Vec<PathBuf>,
    /// Registries (`host` or `host:port`) that may be reached over plain HTTP
    /// and without certificate verification.
    #[serde(default)]
    pub insecure_registries: Vec<String>,
    /// Mirrors to pull from, by the registry they mirror
    /// (`registry_mirrors = { "docker.io" = ["mirror.site:5000"] }`): tried
    /// in order before the registry itself, for the same repository path.
    #[serde(default)]
    pub registry_mirrors: std::collections::BTreeMap<String, Vec<String>>,
    /// Squashfs settings for new images.
    pub squashfs: Option<SquashfsSettings>,
    /// Run-time settings.
    pub runtime: Option<RuntimeSettings>,
    /// Registry connection settings.
    pub network: Option<NetworkSettings>,
    /// The layer cache (`[layer_cache]`).
    pub layer_cache: Option<layer_cache::LayerCacheSettings>,
    /// Where host resources are found (`[host]`: CDI spec directories,
    /// loader cache, device and program directories, module directory);
    /// read by berth-inject, which names its keys.
    #[serde(default)]
    #[schemars(skip)]
    pub host: toml::Table,
    /// Site modules defined inline (`[modules.NAME]`), as written.
    #[serde(default, rename = "modules")]
    #[schemars(skip)]
    modules_table: toml::Table,
    /// Inline modules with the file that defines them.
    #[serde(skip)]
    pub modules: Vec<(PathBuf, toml::Table)>,
    /// The keys this file sets in each table, for [`ConfigFile::merge`].
    #[serde(skip)]
    given: std::collections::BTreeMap<String, Vec<String>>,
}

impl ConfigFile {
    /// Parses one file's text; `path` names the file in errors and as the
    /// source of its inline modules.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        Self::parse_with(text, path, &|k| {
            std::env::var(k).ok().filter(|v| !v.is_empty())
        })
    }

    /// [`ConfigFile::parse`] with `env` for the variables of path settings
    /// (`store`, `shared_stores`, `[runtime] binds`, `[host]`).
    pub fn parse_with(
        text: &str,
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let mut f: ConfigFile = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim().replace('\n', " "),
        })?;
        f.expand(path, env)?;
        f.given = merge::given_keys(text);
        if let Some(sq) = &f.squashfs {
            // A level alone is checked against the compressor the merged
            // settings will have (a site's xz and a user's level 0).
            let compressor_given = f
                .given
                .get("squashfs")
                .is_some_and(|keys| keys.iter().any(|k| k == "compressor"));
            let mut own = sq.clone();
            if !compressor_given {
                own.level = None;
            }
            own.check().map_err(|message| ConfigError::Parse {
                path: path.to_path_buf(),
                message: format!("[squashfs]: {message}"),
            })?;
        }
        if !f.modules_table.is_empty() {
            let table = std::mem::take(&mut f.modules_table);
            f.modules.push((path.to_path_buf(), table));
        }
        Ok(f)
    }

    /// Expands `$VAR` in the path settings.
    fn expand(
        &mut self,
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        let fail = |key: &str| {
            let path = path.to_path_buf();
            let key = key.to_string();
            move |message| ConfigError::Variable { path, key, message }
        };
        let as_path = |p: &PathBuf, key: &str| -> Result<PathBuf, ConfigError> {
            let text = p.to_string_lossy();
            expand::expand(&text, env)
                .map(PathBuf::from)
                .map_err(fail(key))
        };
        if let Some(store) = &self.store {
            self.store = Some(as_path(store, "store")?);
        }
        for s in &mut self.shared_stores {
            *s = as_path(s, "shared_stores")?;
        }
        if let Some(rt) = &mut self.runtime {
            for b in &mut rt.binds {
                *b = expand::expand(b, env).map_err(fail("runtime.binds"))?;
            }
        }
        for (key, value) in self.host.iter_mut() {
            expand::expand_value(value, env).map_err(fail(&format!("host.{key}")))?;
        }
        Ok(())
    }

    /// Reads and parses a file; a missing file is an empty config.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text, path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(source) => Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// Layers `over` on top of `self`: scalars from `over` win, lists append.
    pub fn merge(mut self, over: ConfigFile) -> Self {
        if over.store.is_some() {
            self.store = over.store;
        }
        self.shared_stores.extend(over.shared_stores);
        self.insecure_registries.extend(over.insecure_registries);
        // A later file's list for a registry replaces the earlier one.
        self.registry_mirrors.extend(over.registry_mirrors);
        // Tables key by key: what the later file sets wins, lists add up.
        let keys = |t: &str| over.given.get(t);
        self.squashfs = merge::table(self.squashfs.take(), over.squashfs, keys("squashfs"), &[]);
        self.network = merge::table(self.network.take(), over.network, keys("network"), &[]);
        self.layer_cache = merge::table(
            self.layer_cache.take(),
            over.layer_cache,
            keys("layer_cache"),
            &[],
        );
        self.runtime = merge::table(
            self.runtime.take(),
            over.runtime,
            keys("runtime"),
            &["binds"],
        );
        for (table, set) in over.given {
            self.given.entry(table).or_default().extend(set);
        }
        self.host.extend(over.host);
        self.modules.extend(over.modules);
        self
    }
}

/// The environment variables configuration resolution looks at, captured once
/// so resolution stays a pure function (and testable).
#[derive(Debug, Default, Clone)]
pub struct Env {
    /// `HOME`.
    pub home: Option<PathBuf>,
    /// `XDG_CONFIG_HOME`.
    pub xdg_config_home: Option<PathBuf>,
    /// `XDG_DATA_HOME`.
    pub xdg_data_home: Option<PathBuf>,
    /// `XDG_RUNTIME_DIR`.
    pub xdg_runtime_dir: Option<PathBuf>,
    /// `BERTH_STORE`.
    pub berth_store: Option<PathBuf>,
    /// `BERTH_SYSTEM_CONFIG`: replaces `/etc/berth/berth.toml` (tests, sites
    /// that keep config elsewhere).
    pub system_config: Option<PathBuf>,
}

fn non_empty(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

impl Env {
    /// Captures the current process environment.
    pub fn from_process() -> Self {
        Self {
            home: non_empty("HOME"),
            xdg_config_home: non_empty("XDG_CONFIG_HOME"),
            xdg_data_home: non_empty("XDG_DATA_HOME"),
            xdg_runtime_dir: non_empty("XDG_RUNTIME_DIR"),
            berth_store: non_empty("BERTH_STORE"),
            system_config: non_empty("BERTH_SYSTEM_CONFIG"),
        }
    }

    /// The site config file path.
    pub fn system_config_path(&self) -> PathBuf {
        self.system_config
            .clone()
            .unwrap_or_else(|| PathBuf::from(SYSTEM_CONFIG))
    }

    /// The user's config file path, if a config directory is known.
    pub fn user_config_path(&self) -> Option<PathBuf> {
        let base = self
            .xdg_config_home
            .clone()
            .or_else(|| self.home.as_ref().map(|h| h.join(".config")))?;
        Some(base.join("berth").join("berth.toml"))
    }

    /// The default store: `$XDG_DATA_HOME/berth`, else `~/.local/share/berth`.
    pub fn default_store(&self) -> Option<PathBuf> {
        let base = self
            .xdg_data_home
            .clone()
            .or_else(|| self.home.as_ref().map(|h| h.join(".local/share")))?;
        Some(base.join("berth"))
    }
}

/// The resolved configuration a command runs with.
#[derive(Debug, Clone)]
pub struct Config {
    /// The writable store.
    pub store: PathBuf,
    /// Read-only stores searched after `store`.
    pub shared_stores: Vec<PathBuf>,
    /// Registries allowed over plain HTTP / without TLS verification.
    pub insecure_registries: Vec<String>,
    /// Mirrors to pull from first, by the registry they mirror.
    pub registry_mirrors: std::collections::BTreeMap<String, Vec<String>>,
    /// Squashfs settings for new images.
    pub squashfs: SquashfsSettings,
    /// Run-time settings.
    pub runtime: RuntimeSettings,
    /// Registry connection settings.
    pub network: NetworkSettings,
    /// The layer cache.
    pub layer_cache: layer_cache::LayerCacheSettings,
    /// `[host]` keys, merged (a later file's key wins).
    pub host: toml::Table,
    /// Inline modules, with the file of each table.
    pub modules: Vec<(PathBuf, toml::Table)>,
    /// The system config file's path (its directory holds `modules.d`).
    pub system_config: PathBuf,
    /// Where the config came from, for `berth info` and error messages.
    pub files: Vec<PathBuf>,
}

impl Config {
    /// Resolves the configuration: `--store` (`cli_store`) first, then
    /// `BERTH_STORE`, then the config files, then the XDG default.
    pub fn resolve(cli_store: Option<&Path>, env: &Env) -> Result<Self, ConfigError> {
        let system_path = env.system_config_path();
        let mut files = Vec::new();
        let mut merged = ConfigFile::load(&system_path)?;
        if system_path.exists() {
            files.push(system_path);
        }
        if let Some(user_path) = env.user_config_path() {
            let user = ConfigFile::load(&user_path)?;
            if user_path.exists() {
                files.push(user_path);
            }
            merged = merged.merge(user);
        }
        Self::from_parts(cli_store, env, merged, files)
    }

    /// The pure part of [`Config::resolve`].
    pub fn from_parts(
        cli_store: Option<&Path>,
        env: &Env,
        file: ConfigFile,
        files: Vec<PathBuf>,
    ) -> Result<Self, ConfigError> {
        let store = cli_store
            .map(Path::to_path_buf)
            .or_else(|| env.berth_store.clone())
            .or(file.store)
            .or_else(|| env.default_store())
            .ok_or(ConfigError::NoStore)?;
        let shared_stores = file
            .shared_stores
            .into_iter()
            .filter(|s| *s != store)
            .collect();
        Ok(Self {
            store,
            shared_stores,
            insecure_registries: file.insecure_registries,
            registry_mirrors: file.registry_mirrors,
            squashfs: file.squashfs.unwrap_or_default(),
            runtime: file.runtime.unwrap_or_default(),
            network: file.network.unwrap_or_default(),
            layer_cache: file.layer_cache.unwrap_or_default(),
            host: file.host,
            modules: file.modules,
            system_config: env.system_config_path(),
            files,
        })
    }

    /// The mirrors of `registry` (`docker.io`, `host:port`), in order.
    pub fn mirrors_of(&self, registry: &str) -> &[String] {
        self.registry_mirrors
            .get(registry)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// Whether `registry` (`host[:port]`) is listed as insecure.
    pub fn is_insecure(&self, registry: &str) -> bool {
        self.insecure_registries.iter().any(|r| r == registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Env {
        Env {
            home: Some("/home/u".into()),
            ..Env::default()
        }
    }

    #[test]
    fn store_precedence() {
        let file = ConfigFile {
            store: Some("/from/file".into()),
            ..Default::default()
        };
        let mut e = env();
        let c = Config::from_parts(None, &e, ConfigFile::default(), vec![]).unwrap();
        assert_eq!(c.store, PathBuf::from("/home/u/.local/share/berth"));
        e.xdg_data_home = Some("/xdg".into());
        let c = Config::from_parts(None, &e, ConfigFile::default(), vec![]).unwrap();
        assert_eq!(c.store, PathBuf::from("/xdg/berth"));
        let c = Config::from_parts(None, &e, file.clone(), vec![]).unwrap();
        assert_eq!(c.store, PathBuf::from("/from/file"));
        e.berth_store = Some("/env".into());
        let c = Config::from_parts(None, &e, file.clone(), vec![]).unwrap();
        assert_eq!(c.store, PathBuf::from("/env"));
        let c = Config::from_parts(Some(Path::new("/cli")), &e, file, vec![]).unwrap();
        assert_eq!(c.store, PathBuf::from("/cli"));
    }

    #[test]
    fn no_home_no_store() {
        let e = Env::default();
        assert!(matches!(
            Config::from_parts(None, &e, ConfigFile::default(), vec![]),
            Err(ConfigError::NoStore)
        ));
    }

    #[test]
    fn merge_user_over_site() {
        let site = ConfigFile::parse(
            "store = \"/site\"\nshared_stores = [\"/lustre/berth\"]\ninsecure_registries = [\"reg:5000\"]\nregistry_mirrors = { \"docker.io\" = [\"hub.site:5000\"], \"ghcr.io\" = [\"a:1\"] }\n",
            Path::new("site"),
        )
        .unwrap();
        let user = ConfigFile::parse(
            "store = \"/mine\"\ninsecure_registries = [\"localhost:5000\"]\nregistry_mirrors = { \"ghcr.io\" = [\"b:2\"] }\n[squashfs]\ncompressor = \"lz4\"\n",
            Path::new("user"),
        )
        .unwrap();
        let c = Config::from_parts(None, &env(), site.merge(user), vec![]).unwrap();
        assert_eq!(c.store, PathBuf::from("/mine"));
        assert_eq!(c.shared_stores, vec![PathBuf::from("/lustre/berth")]);
        assert!(c.is_insecure("reg:5000") && c.is_insecure("localhost:5000"));
        assert_eq!(c.mirrors_of("docker.io"), ["hub.site:5000"]);
        assert_eq!(c.mirrors_of("ghcr.io"), ["b:2"]);
        assert!(c.mirrors_of("quay.io").is_empty());
        assert_eq!(c.squashfs.compressor, "lz4");
        assert_eq!(c.squashfs.block_size, 128 * 1024);
    }

    #[test]
    fn host_keys_merge_and_inline_modules_keep_their_file() {
        let site = ConfigFile::parse(
            "[host]\nld_cache = \"/etc/ld.so.cache\"\ndev_dir = \"/dev\"\n[modules.cxi]\nwhen = \"always\"\n",
            Path::new("/etc/berth/berth.toml"),
        )
        .unwrap();
        let user =
            ConfigFile::parse("[host]\ndev_dir = \"/fake/dev\"\n", Path::new("user")).unwrap();
        let c = Config::from_parts(None, &env(), site.merge(user), vec![]).unwrap();
        assert_eq!(c.host["dev_dir"].as_str(), Some("/fake/dev"));
        assert_eq!(c.host["ld_cache"].as_str(), Some("/etc/ld.so.cache"));
        assert_eq!(c.modules.len(), 1);
        assert_eq!(c.modules[0].0, PathBuf::from("/etc/berth/berth.toml"));
        assert!(c.modules[0].1.contains_key("cxi"));
    }

    #[test]
    fn unknown_key_is_named() {
        let err = ConfigFile::parse("stroe = \"/x\"\n", Path::new("/etc/berth/berth.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/etc/berth/berth.toml"), "{err}");
        assert!(err.contains("stroe"), "{err}");
    }

    #[test]
    fn missing_file_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let f = ConfigFile::load(&dir.path().join("nope.toml")).unwrap();
        assert!(f.store.is_none());
    }
}
