//! berth under Slurm's `proctrack/cgroup`, as most sites run it: each step
//! in a cgroup of its own, killed whole when the step ends. The test
//! cluster tracks with `proctrack/linuxproc`, so these tests run in
//! tests/run.sh's second cluster pass (restarted with
//! `BERTH_SLURM_PROCTRACK=cgroup`, then `cargo test -- --ignored
//! slurm_cgroup::`).

use std::path::Path;

use crate::harness::Out;
use crate::slurm_spank::{image, job_of, left_after_epilog, sandbox};

#[test]
#[ignore = "runs in tests/run.sh's second cluster pass (proctrack/cgroup, container_scope=global)"]
fn side_by_side_steps_keep_their_image_when_the_first_ends() {
    let sb = sandbox();
    let img = image(&sb, "debian-python");
    // A task farm: steps of one job that run the same image side by side.
    // The first ends while the second still reads its image; Slurm kills
    // whatever the first step's cgroup holds (before the fix: the job's
    // one keeper, whose FUSE server the second step read through, which
    // then saw "Transport endpoint is not connected").
    let steps = format!(
        "echo job=$SLURM_JOB_ID; \
         srun -N1 --overlap sh -c 'grep -E \":freezer:|^0::\" /proc/self/cgroup'; \
         srun -N1 --overlap {img} sh -c 'sleep 2; echo first-done' & \
         sleep 1; \
         srun -N1 --overlap {img} sh -c 'sleep 3; cat /etc/debian_version > /dev/null && echo second-reads'; \
         echo \"second=$?\"; wait; \
         echo keepers=$(ls $XDG_RUNTIME_DIR/berth/keepers | grep -c -- -job$SLURM_JOB_ID-step_)"
    );
    let mut c = sb.command(Path::new("/usr/bin/salloc"), &["-N1", "sh", "-c", &steps]);
    c.env("SLURM_CONF", sb.env.var("BERTH_IT_SLURM_CONF"));
    c.current_dir(sb.dir.path());
    let out = Out(c.output().unwrap());
    let (text, err) = (out.stdout(), out.stderr());
    // The cluster does track steps by cgroup (else the test shows nothing).
    let tracked = text
        .lines()
        .any(|l| l.contains("/job_") && l.contains("/step_"));
    assert!(tracked, "not a cgroup-tracked cluster: {text}\n{err}");
    // Each step had a keeper of its own.
    for want in ["first-done\n", "second-reads\nsecond=0\n", "keepers=2\n"] {
        assert!(text.contains(want), "{want:?} in:\n{text}\n{err}");
    }
    // The job's epilog removes its keepers' directories (one per step).
    let job = job_of(&text);
    let left = left_after_epilog(&sb, &["keepers"], &|n| {
        n.contains(&format!("-job{job}-step_"))
    });
    assert!(!job.is_empty() && left.is_empty(), "{job}: {left:?}");
}
