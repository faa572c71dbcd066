//! berth under Slurm's `proctrack/cgroup`, as most sites run it: each step
//! in a cgroup of its own, killed whole when the step ends. The test
//! cluster tracks with `proctrack/linuxproc`, so these tests run in
//! tests/run.sh's second cluster pass (restarted with
//! `BERTH_SLURM_PROCTRACK=cgroup`, then `cargo test -- --ignored
//! slurm_cgroup::`).

use crate::slurm_spank::{image, job_of, left_after_epilog, sandbox, slurm};

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
    let out = slurm(&sb, "/usr/bin/salloc", &["-N1", "sh", "-c", &steps]);
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

#[test]
#[ignore = "runs in tests/run.sh's second cluster pass (proctrack/cgroup, container_scope=global)"]
fn a_step_that_joined_another_keeps_its_container_when_that_one_ends() {
    let sb = sandbox();
    let img = image(&sb, "debian-python");
    // Step B joins the container step A runs (Pyxis's attach, here by the
    // name JOB.STEP, which is the job's in either container_scope), and
    // reads from it after A has ended: what A's cgroup held for it (the
    // container's anchor, the keeper and its squashfs server) went to B's
    // cgroup when A's last task ended (before: "Transport endpoint is not
    // connected").
    let started = sb.dir.path().join("first-started");
    let started = started.display();
    let steps = format!(
        "s=$(srun -N1 sh -c 'echo $SLURM_STEP_ID'); \
         srun -N1 --overlap {img} sh -c 'touch {started}; sleep 3; echo first-done' & \
         for i in $(seq 100); do test -e {started} && break; sleep 0.2; done; \
         srun -N1 --overlap --container-name=$SLURM_JOB_ID.$((s + 1)) \
           sh -c 'sleep 4; cat /etc/debian_version > /dev/null && echo joined-reads'; \
         echo \"joined=$?\"; wait"
    );
    let out = slurm(&sb, "/usr/bin/salloc", &["-N1", "sh", "-c", &steps]);
    let (text, err) = (out.stdout(), out.stderr());
    for want in ["first-done\n", "joined-reads\njoined=0\n"] {
        assert!(text.contains(want), "{want:?} in:\n{text}\n{err}");
    }
}
