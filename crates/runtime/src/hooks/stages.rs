//! A container's hooks at their stages: createRuntime and createContainer
//! in berth once the container's root is in place (with the container
//! process's pid and a bundle whose root is /proc/PID/root), poststart
//! once it runs, poststop after it ended, startContainer inside it.

use std::path::{Path, PathBuf};

use super::{run, state_json, Hook, ParentEnd};

/// What the hooks of one container see.
#[derive(Debug, Clone, Copy)]
pub struct ContainerHooks<'a> {
    /// The hooks, each at its stage.
    pub hooks: &'a [Hook],
    /// The container's id in the OCI state.
    pub id: &'a str,
    /// Annotations (the OCI state's).
    pub annotations: &'a [(String, String)],
    /// The command line, for the bundle.
    pub argv: &'a [String],
    /// The environment, for the bundle.
    pub env: &'a [(String, String)],
    /// The working directory, for the bundle.
    pub workdir: &'a str,
}

impl ContainerHooks<'_> {
    /// Whether any hook runs at `stage`.
    pub fn any_at(&self, stage: &str) -> bool {
        self.hooks.iter().any(|h| h.stage == stage)
    }

    /// Runs the hooks of `stage` in order with the OCI state on stdin and
    /// `base` under their environment; the variables they set, or the first
    /// failure. `fatal: false` (poststart, poststop) turns failures into
    /// warnings.
    pub fn run_stage(
        &self,
        stage: &str,
        (status, pid, bundle): (&str, i32, &Path),
        fatal: bool,
        base: &[(String, String)],
    ) -> Result<Vec<(String, String)>, String> {
        let state = state_json(self.id, status, pid, bundle, self.annotations);
        let mut env = Vec::new();
        for h in self.hooks.iter().filter(|h| h.stage == stage) {
            match run(h, &state, base) {
                Ok(e) => env.extend(e),
                Err(msg) if fatal => return Err(msg),
                Err(msg) => eprintln!("berth: warning: {msg}"),
            }
        }
        Ok(env)
    }

    /// In berth, once the container process is ready: createRuntime and
    /// createContainer hooks (in berth's namespaces, with the container's
    /// pid and a bundle under `bundles` whose root is /proc/PID/root), then
    /// `go`, then poststart. Returns the bundle and the pid for poststop;
    /// `Ok(None)` when the container process ended before it was ready.
    pub fn before_start(
        &self,
        bundles: &Path,
        sync: ParentEnd,
    ) -> Result<Option<(PathBuf, i32)>, String> {
        let Some(pid) = sync.wait() else {
            return Ok(None);
        };
        let bundle = bundles.join(format!("{}-{pid}", self.id));
        write_bundle(
            &bundle,
            pid,
            self.argv,
            self.env,
            self.workdir,
            self.annotations,
        )
        .map_err(|e| format!("cannot write the hooks' bundle {}: {e}", bundle.display()))?;
        let result = (|| {
            let mut env = self.run_stage("createRuntime", ("created", pid, &bundle), true, &[])?;
            env.extend(self.run_stage("createContainer", ("created", pid, &bundle), true, &[])?);
            Ok(env)
        })();
        match result {
            Ok(env) => {
                sync.go(&env);
                let _ = self.run_stage("poststart", ("running", pid, &bundle), false, &[]);
                Ok(Some((bundle, pid)))
            }
            Err(msg) => {
                let _ = std::fs::remove_dir_all(&bundle);
                Err(msg)
            }
        }
    }

    /// After the container ended: poststop hooks, then the bundle goes.
    pub fn after_stop(&self, bundle: &Path, pid: i32) {
        let _ = self.run_stage("poststop", ("stopped", pid, bundle), false, &[]);
        let _ = std::fs::remove_dir_all(bundle);
    }

    /// Inside the container, just before the command: startContainer
    /// hooks (their paths are the image's), with the command's environment
    /// `env` under their own (they run as the command's user, so it shows
    /// them nothing new; a hook that starts a service for the container,
    /// such as the ssh module's server, passes it on); the variables they
    /// set.
    pub fn start_container(
        &self,
        pid: i32,
        env: &[(String, String)],
    ) -> Result<Vec<(String, String)>, String> {
        self.run_stage(
            "startContainer",
            ("created", pid, Path::new("/")),
            true,
            env,
        )
    }
}

/// A minimal OCI bundle for hooks that read `config.json` (the root is
/// the container process's, through /proc).
fn write_bundle(
    dir: &std::path::Path,
    pid: i32,
    argv: &[String],
    env: &[(String, String)],
    cwd: &str,
    annotations: &[(String, String)],
) -> std::io::Result<()> {
    // A symlink planted at the bundle's (per-run) name is not followed.
    if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
        std::fs::remove_file(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    let ann: serde_json::Map<String, serde_json::Value> = annotations
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    let config = serde_json::json!({
        "ociVersion": "1.0.2",
        "root": { "path": format!("/proc/{pid}/root") },
        "process": {
            "args": argv,
            "env": env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
            "cwd": cwd,
        },
        "annotations": ann,
    });
    // In the runtime directory: written fresh, never through a symlink.
    crate::state::write(&dir.join("config.json"), config.to_string().as_bytes())
}
