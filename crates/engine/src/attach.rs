//! A run that joins a running shared container as it is: which one
//! ([`attached`]), and whether the namespaces it asks for are the
//! container's ([`Unshare`]).

use berth_runtime::shared::{self, Reuse};

use crate::error::{Error, Result};
use crate::{Caller, RunRequest};

/// The Slurm step the caller runs in (`JOB.STEP`), if any.
pub(crate) fn slurm_step(caller: &Caller) -> Option<String> {
    Some(format!(
        "{}.{}",
        caller.var("SLURM_JOB_ID")?,
        caller.var("SLURM_STEP_ID")?
    ))
}

/// `--unshare`: the namespaces a run asks to have of its own.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Unshare {
    /// A network namespace of its own.
    pub(crate) net: bool,
    /// An IPC namespace of its own.
    pub(crate) ipc: bool,
    /// A UTS namespace of its own.
    pub(crate) uts: bool,
}

impl Unshare {
    /// The namespaces `--unshare` names (`net`, `ipc`, `uts`, comma-separated).
    pub(crate) fn parse(names: &[String]) -> Result<Self> {
        let mut u = Unshare::default();
        for name in names.iter().flat_map(|n| n.split(',')) {
            match name.trim() {
                "net" => u.net = true,
                "ipc" => u.ipc = true,
                "uts" => u.uts = true,
                other => {
                    return Err(Error::Usage(format!(
                        "--unshare {other:?}: unknown namespace (use net, ipc or uts)"
                    )))
                }
            }
        }
        Ok(u)
    }

    /// A run joining the running container `info` cannot get namespaces
    /// the container lacks.
    pub(crate) fn check_joinable(&self, info: &shared::SharedInfo) -> Result<()> {
        for (asked, name, what) in [
            (self.net, "net", "network"),
            (self.ipc, "ipc", "IPC"),
            (self.uts, "uts", "UTS"),
        ] {
            if asked && !info.namespaces.iter().any(|n| n == name) {
                return Err(Error::Usage(format!(
                    "shared container {} is not in a separate {what} namespace; it runs as it was made (--unshare applies to a new container)",
                    info.key
                )));
            }
        }
        Ok(())
    }
}

/// The live shared container a run joins as it is (`Reuse::Any`,
/// `Existing` or `Running`), if one runs; `Existing` and `Running` without
/// one are an error. A named container's (kept on the node) is joined
/// only while a task runs in it: otherwise it is started anew. `step`: the
/// run's Slurm step (`JOB.STEP`), if any.
pub(crate) fn attached(req: &RunRequest, step: Option<&str>) -> Result<Option<shared::SharedInfo>> {
    let Some(s) = &req.shared else {
        return Ok(None);
    };
    match s.reuse {
        // A named container that runs no task is started anew from its
        // changes; one another task of this Slurm step made is this run's
        // own (prepared as new, it is joined as made with its options).
        Reuse::Any | Reuse::Existing if req.kept_name().is_some() => {
            Ok(shared::lookup_in_use(&s.key)?.filter(|info| !info.made_by(step)))
        }
        Reuse::Any => Ok(shared::lookup(&s.key)?),
        Reuse::Running => match shared::lookup_in_use(&s.key)? {
            Some(info) => Ok(Some(info)),
            None => Err(shared::not_in_use(&s.key).into()),
        },
        Reuse::Existing => match shared::lookup(&s.key)? {
            Some(info) => Ok(Some(info)),
            None => Err(shared::not_running(&s.key).into()),
        },
        Reuse::Same | Reuse::New => Ok(None),
    }
}
