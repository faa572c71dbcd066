//! Pyxis's named containers under berth's plugin, on the real test Slurm
//! as the unprivileged user (name.bats, exec.bats; docs/pyxis-suite.md B1
//! and B3).

use crate::slurm_spank::{image, job_of, left_after_epilog, sandbox, slurm};

#[test]
#[cfg_attr(
    not(berth_it_slurm),
    ignore = "needs root, the test fixtures and berth's SPANK plugin: sudo bash tests/setup/setup.sh, then sudo bash tests/setup/slurm_plugin.sh target/debug"
)]
fn pyxis_named_containers_keep_their_changes_across_steps() {
    let sb = sandbox();
    let img = image(&sb, "debian-python");
    // As Pyxis's named containers (name.bats 2, exec.bats 2 and 6): a
    // writable step's changes stay for the job's later steps on the node,
    // which start the container anew, by name alone or with the image,
    // with their own options (mounts, remap-root); read-only unless the
    // step is writable; a step's tasks share one. A step that comes while
    // one runs joins it as it is
    // (its mounts ignored, with a line saying so). `:exec` needs it
    // running; `:create` a name not used yet, made once for the step's
    // tasks on the node (`berth ps` between steps
    // leaves the changes); a name alone one that
    // exists (invalid_args.bats 5). A step's unnamed container is joined
    // by the name JOB.STEP while it runs (exec.bats 3). The job's end
    // removes the changes.
    let berth = sb.env.berth.to_string_lossy();
    let steps = format!(
        "echo job=$SLURM_JOB_ID; \
         srun -N1 --container-name=dev --container-writable {img} sh -c 'echo kept > /marker'; \
         echo \"one=$?\"; {berth} ps -a > /dev/null; \
         srun -N1 --container-name=dev sh -c 'cat /marker; touch /marker 2>/dev/null || echo read-only'; \
         echo \"two=$?\"; \
         srun -N1 -n3 -O --container-name=dev cat /marker | uniq -c | awk '{{print \"tasks=\" $1 \" \" $2}}'; \
         srun -N1 --container-name=dev --container-mounts=/tmp:/mnt-late --container-remap-root {img} \
           sh -c 'cat /marker; test -d /mnt-late && echo mnt-late; id -u'; echo \"three=$?\"; \
         srun -N1 --container-name=dev:exec true; echo \"exec=$?\"; \
         srun -N1 --container-name=dev:create {img} true; echo \"create=$?\"; \
         srun -N1 --container-name=nothere true; echo \"nothere=$?\"; \
         srun -N1 -n3 -O --container-name=made:create --container-writable {img} \
           sh -c 'echo $SLURM_PROCID >> /tasks; sleep 2'; echo \"made=$?\"; \
         srun -N1 --container-name=made sh -c 'wc -l < /tasks'; \
         srun -N1 --overlap --container-name=dev sleep 6 & sleep 3; \
         srun -N1 --overlap --container-name=dev:exec --container-mounts=/tmp:/mnt-joined \
           sh -c 'cat /marker; test -d /mnt-joined || echo no-mnt-joined'; echo \"joined=$?\"; wait; \
         s=$(srun -N1 sh -c 'echo $SLURM_STEP_ID'); \
         srun -N1 --overlap {img} sleep 6 & sleep 3; \
         srun -N1 --overlap --container-name=$SLURM_JOB_ID.$((s + 1)) sh -c 'echo in-$container'; \
         echo \"unnamed=$?\"; wait"
    );
    let out = slurm(&sb, "/usr/bin/salloc", &["-N1", "sh", "-c", &steps]);
    let (text, err) = (out.stdout(), out.stderr());
    for want in [
        "one=0\n",
        "kept\nread-only\ntwo=0\ntasks=3 kept\n",
        "kept\nmnt-late\n0\nthree=0\n",
        "made=0\n3\n",
        "kept\nno-mnt-joined\njoined=0\n",
        "in-berth\nunnamed=0\n",
    ] {
        assert!(text.contains(want), "{want:?} in:\n{text}\n{err}");
    }
    for refused in ["exec=0", "create=0", "nothere=0"] {
        assert!(!text.contains(refused), "{refused}: {text}\n{err}");
    }
    assert!(err.contains("ignoring --container-mounts"), "{err}");
    assert!(err.contains("exists already on this node"), "{err}");
    assert!(err.contains("no image was given to create it"), "{err}");
    assert!(err.contains("no task runs in a shared container"), "{err}");
    // The job's end removes its named containers' changes on the node.
    let job = job_of(&text);
    let left = left_after_epilog(&sb, &["containers", "named"], &|n| {
        n.starts_with(&format!("slurm-{job}-dev"))
    });
    assert!(!job.is_empty() && left.is_empty(), "{job}: {left:?}");
}
