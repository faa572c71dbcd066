//! Starting a prepared launch: a container of its own, or a place in a
//! shared one (joined, or handed over to the caller to join).

use berth_config::Config;
use berth_runtime::container;
use berth_runtime::shared::{self, in_place::HandOver};

use crate::{node_cache, prepare, save, Caller, Error, Held, Launch, Result, RunRequest};

/// Starts `launch`; the command's exit code. The node's lock of the
/// image's record is let go once the keeper is there (for a shared
/// container: once its keeper is leased, or this task decided to join
/// it), before the command runs.
pub fn run(launch: Launch) -> Result<i32> {
    let Launch {
        spec,
        shared,
        held,
        save,
        per_task_env,
        passed,
        ..
    } = launch;
    let Held {
        image_file,
        node_lock,
        overlay: _overlay_lock,
    } = held;
    match shared {
        None => {
            let leased = container::lease(&spec, image_file.as_ref())?;
            drop(node_lock);
            let code = leased.run()?;
            if let Some(job) = &save {
                let line = save::save(job, &spec.berth_exe)?;
                eprintln!("berth: {line}");
            }
            Ok(code)
        }
        Some(placement) if placement.hand_over && spec.process.entrypoint_first.is_some() => {
            Ok(shared::in_place::print_hand_over(&HandOver::PerTask(
                "the entrypoint runs first in each task".into(),
            ))?)
        }
        Some(placement) if placement.hand_over && per_task_env => {
            Ok(shared::in_place::print_hand_over(&HandOver::PerTask(
                "the command's environment is worked out per task (a rank or a GPU selection)"
                    .into(),
            ))?)
        }
        Some(placement) => {
            let mut node_lock = node_lock;
            let mut let_go = || drop(node_lock.take());
            let placed = shared::place(&spec, &placement, image_file.as_ref(), &mut let_go)?;
            if placement.hand_over {
                return Ok(placed.hand_over(&passed)?);
            }
            Ok(placed.join()?)
        }
    }
}

/// [`prepare`], `show` (a front end's look at the launch: its warnings),
/// and [`run`]; a node-local record whose image file has gone (removed
/// from the store, or the store moved) is dropped and the store asked
/// again, once.
pub fn start(
    config: &Config,
    req: &RunRequest,
    caller: &Caller,
    show: impl Fn(&Launch),
) -> Result<i32> {
    let prepared = |trust_cache| {
        let launch = prepare(config, req, caller, trust_cache)?;
        show(&launch);
        Ok::<_, Error>(launch)
    };
    // A named container kept on the node that a task joined or left while
    // the run was prepared: prepared again (as it stands now).
    let (mut replans, mut trust_cache) = (0, true);
    loop {
        match run(prepared(trust_cache)?) {
            Err(Error::Runtime(berth_runtime::Error::Replan(_))) if replans < REPLANS => {
                replans += 1;
            }
            Err(Error::Runtime(berth_runtime::Error::ImageMissing(_)))
                if trust_cache && node_cache::forget(&req.image) =>
            {
                trust_cache = false;
            }
            result => return result,
        }
    }
}

/// How many times a run is prepared again when its named container
/// changed meanwhile ([`berth_runtime::Error::Replan`]).
const REPLANS: u32 = 10;
