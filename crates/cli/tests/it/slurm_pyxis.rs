//! Pyxis's behaviours under berth's plugin, on the real test Slurm as the
//! unprivileged user: what Pyxis's own bats suite checks (docs/pyxis-suite.md
//! maps each of its tests), written for berth. A job script written for
//! Pyxis must run unchanged.

use std::path::Path;

use crate::harness::{Out, Sandbox};
use crate::slurm_spank::{image, sandbox, slurm};

/// `srun -N1 ARGS` with extra variables in srun's environment, from the
/// sandbox's directory.
pub(crate) fn srun(sb: &Sandbox, env: &[(&str, &str)], args: &[&str]) -> Out {
    let mut all = vec!["-N1"];
    all.extend_from_slice(args);
    let mut c = sb.command(Path::new("/usr/bin/srun"), &all);
    c.env("SLURM_CONF", sb.env.var("BERTH_IT_SLURM_CONF"));
    c.envs(env.iter().copied());
    c.current_dir(sb.dir.path());
    Out(c.output().unwrap())
}

pub(crate) fn last_line(out: &Out) -> String {
    out.stdout().lines().last().unwrap_or_default().to_string()
}

#[test]
#[cfg_attr(
    not(berth_it_slurm),
    ignore = "needs root, the test fixtures and berth's SPANK plugin: sudo bash tests/setup/setup.sh, then sudo bash tests/setup/slurm_plugin.sh target/debug"
)]
fn pyxis_environment_and_working_directory() {
    let sb = sandbox();
    let img = image(&sb, "debian-python");
    // The job's variables pass in (env.bats 1); the image's ENV wins over
    // them unless --container-env names them (env.bats 8); LANG is not
    // passed unless named (env.bats 4, 9); TERM is the caller's (env.bats 2).
    let vars = [
        ("FOO", "bar"),
        ("GREETING", "from the job"),
        ("LANG", "xx_XX.UTF-8"),
        ("TERM", "dumb"),
    ];
    let show = "echo \"$FOO|$GREETING|${LANG-unset}|$TERM\"";
    let out = srun(&sb, &vars, &[&img, "sh", "-c", show]).ok();
    assert_eq!(last_line(&out), "bar|hello from the image|unset|dumb");
    let out = srun(
        &sb,
        &vars,
        &[&img, "--container-env=GREETING,LANG", "sh", "-c", show],
    )
    .ok();
    assert_eq!(last_line(&out), "bar|from the job|xx_XX.UTF-8|dumb");
    // PYXIS_CONTAINER_ENV does the same where the command line is silent.
    let mut with_var = vars.to_vec();
    with_var.push(("PYXIS_CONTAINER_ENV", "GREETING"));
    let out = srun(&sb, &with_var, &[&img, "sh", "-c", show]).ok();
    assert_eq!(last_line(&out), "bar|from the job|unset|dumb");

    // The image's WORKDIR, not the job's directory (workdir.bats 4); a
    // relative --container-workdir is from / and `..` stops there
    // (workdir.bats 2); PYXIS_CONTAINER_WORKDIR and the command line's
    // precedence (env_vars.bats 5, 6).
    assert_eq!(last_line(&srun(&sb, &[], &[&img, "pwd"]).ok()), "/srv/app");
    let out = srun(&sb, &[], &[&img, "--container-workdir=../", "pwd"]).ok();
    assert_eq!(last_line(&out), "/");
    let wd = [("PYXIS_CONTAINER_WORKDIR", "/usr/local/bin")];
    assert_eq!(
        last_line(&srun(&sb, &wd, &[&img, "pwd"]).ok()),
        "/usr/local/bin"
    );
    let out = srun(&sb, &wd, &[&img, "--container-workdir=/tmp", "pwd"]).ok();
    assert_eq!(last_line(&out), "/tmp");
    // A directory that does not exist is an error, as in Pyxis (workdir.bats 3).
    let out = srun(&sb, &[], &[&img, "--container-workdir=/pyxis", "true"]);
    assert_ne!(out.code(), 0);
    assert!(
        out.stderr().contains("/pyxis") && out.stderr().contains("No such file or directory"),
        "{}",
        out.stderr()
    );

    // Under --container-remap-root root's home /root is the user's home
    // (mount_home.bats 1, 3; env.bats 3: HOME from the job).
    let probe =
        "echo $HOME $(id -u) $(awk '$5 == \"/root\" {print \"mounted\"}' /proc/self/mountinfo)";
    let out = srun(
        &sb,
        &[],
        &[&img, "--container-remap-root", "sh", "-c", probe],
    )
    .ok();
    assert_eq!(last_line(&out), "/root 0 mounted");
    let out = srun(
        &sb,
        &[],
        &[
            &img,
            "--container-remap-root",
            "--no-container-mount-home",
            "sh",
            "-c",
            probe,
        ],
    )
    .ok();
    assert_eq!(last_line(&out), "/root 0");
    // umount:/root leaves that bind out (mounts.bats 15).
    let out = srun(
        &sb,
        &[],
        &[
            &img,
            "--container-remap-root",
            "--container-mounts=umount:/root",
            "sh",
            "-c",
            probe,
        ],
    )
    .ok();
    assert_eq!(last_line(&out), "/root 0");
    let out = srun(
        &sb,
        &[],
        &[&img, "--container-mounts=umount:/nowhere", "true"],
    );
    assert_ne!(out.code(), 0);
    assert!(
        out.stderr().contains("mounts nothing there"),
        "{}",
        out.stderr()
    );

    // A short name is pulled from Docker Hub, here from its mirror (the
    // test registry): docker_image.bats's `ubuntu:24.04`; an image that is
    // nowhere fails the step once, before any task (docker_image.bats 18).
    let out = srun(
        &sb,
        &[],
        &[
            "--container-image=berth-test/debian-python",
            "cat",
            "/etc/debian_version",
        ],
    )
    .ok();
    assert!(last_line(&out).starts_with("12"), "{}", out.stdout());
    let out = srun(
        &sb,
        &[],
        &[
            "--ntasks=2",
            "--container-image=thisimagedoesntexist",
            "true",
        ],
    );
    assert_ne!(out.code(), 0);
    let err = out.stderr();
    assert_eq!(
        err.matches("failed to import docker image thisimagedoesntexist")
            .count(),
        1,
        "{err}"
    );
    assert!(!err.contains("task 0"), "{err}");

    // PYXIS_CONTAINER_IMAGE alone makes a container step (env_vars.bats 1).
    let reference = img.trim_start_matches("--container-image=");
    let out = srun(
        &sb,
        &[("PYXIS_CONTAINER_IMAGE", reference)],
        &[
            "sh",
            "-c",
            "echo $container; grep -c bookworm /etc/os-release",
        ],
    )
    .ok();
    assert!(out.stdout().starts_with("berth\n"), "{}", out.stdout());
}

#[test]
#[cfg_attr(
    not(berth_it_slurm),
    ignore = "needs root, the test fixtures and berth's SPANK plugin: sudo bash tests/setup/setup.sh, then sudo bash tests/setup/slurm_plugin.sh target/debug"
)]
fn pyxis_mounts_and_invalid_arguments() {
    let sb = sandbox();
    let img = image(&sb, "debian-python");
    std::fs::write(
        sb.dir.path().join("input.txt"),
        "from the job's directory\n",
    )
    .unwrap();
    sb.chown_to_user(sb.dir.path());
    // Relative sources are the job's directory (mounts.bats 2, 4, 5), a
    // lone path is bound where it is (10), tmpfs with its options (11,
    // 12), +-joined flags with a propagation (8).
    let script = "cat /in/input.txt /mnt-file; \
        grep -q ' /test-mnt ' /proc/self/mountinfo && echo cwd-bound; \
        awk '$5 == \"/mytmpfs\" {print $9, $NF}' /proc/self/mountinfo; \
        touch /ro/x 2>&1 | grep -o 'Read-only file system'; \
        awk '$5 == \"/ro\" {print $7}' /proc/self/mountinfo";
    let out = srun(
        &sb,
        &[],
        &[
            &img,
            "--container-mounts=./:/in,./input.txt:/mnt-file:ro,./:/test-mnt,tmpfs:/mytmpfs:size=1M+huge=never,/tmp:/ro:unbindable+ro",
            "sh",
            "-c",
            script,
        ],
    )
    .ok();
    let text = out.stdout();
    assert!(
        text.contains("from the job's directory\nfrom the job's directory\ncwd-bound\n"),
        "{text}"
    );
    assert!(
        text.contains("tmpfs rw,") && text.contains("size=1024k"),
        "{text}"
    );
    assert!(text.contains("Read-only file system\nunbindable"), "{text}");

    // srun --mpi=pmix: the PMIx server's directory is mounted in the
    // container (mpi.bats 1), and the server's module choices are there in
    // their PMIX_MCA_* forms (mpi.bats 2).
    // One line per task: two tasks' lines interleave in srun's output.
    let probe = "d=${PMIX_SERVER_TMPDIR%/}; r=; [ -n \"$d\" ] && grep -q \" $d \" /proc/self/mountinfo && r=pmix-dir-mounted; \
        [ \"$PMIX_MCA_psec\" = \"$PMIX_SECURITY_MODE\" ] && [ \"$PMIX_MCA_gds\" = \"$PMIX_GDS_MODULE\" ] && [ \"$PMIX_MCA_ptl\" = \"$PMIX_PTL_MODULE\" ] && [ -n \"$PMIX_MCA_gds\" ] && r=\"$r mca-set\"; echo \"$r\"";
    let out = srun(&sb, &[], &["--mpi=pmix", "-n2", &img, "sh", "-c", probe]).ok();
    assert_eq!(
        out.stdout(),
        "pmix-dir-mounted mca-set\npmix-dir-mounted mca-set\n"
    );

    // Every bad argument fails the step before a task starts, with one
    // line saying why (invalid_args.bats, mounts.bats 9, 13, 14).
    for (args, says) in [
        (
            vec!["--container-readonly", "--container-writable"],
            "both --container-writable and --container-readonly",
        ),
        (vec!["--container-env=FOO,"], "empty item"),
        (
            vec!["--container-mounts=/home:../home"],
            "Cross-device link",
        ),
        (vec!["--container-mounts=devpts:/d:ro"], "use a path"),
        (vec!["--container-mounts=/tmp:mnt:ro"], "must start with /"),
        (vec!["--container-name=n:attach"], "unknown flag"),
    ] {
        let mut a = args.clone();
        a.extend([img.as_str(), "true"]);
        let out = srun(&sb, &[], &a);
        assert_ne!(out.code(), 0, "{args:?}");
        assert!(out.stderr().contains(says), "{args:?}: {}", out.stderr());
        assert!(
            !out.stderr().contains("task 0"),
            "{args:?}: {}",
            out.stderr()
        );
    }
    // PYXIS_CONTAINER_MOUNTS, and the command line's precedence
    // (env_vars.bats 3, 4).
    let probe = "grep -o ' /mnt-[a-z]* ' /proc/self/mountinfo | sort -u";
    let env = [("PYXIS_CONTAINER_MOUNTS", "/tmp:/mnt-env")];
    let out = srun(&sb, &env, &[&img, "sh", "-c", probe]).ok();
    assert_eq!(out.stdout(), " /mnt-env \n");
    let out = srun(
        &sb,
        &env,
        &[&img, "--container-mounts=/tmp:/mnt-cli", "sh", "-c", probe],
    )
    .ok();
    assert_eq!(out.stdout(), " /mnt-cli \n");
}

#[test]
#[cfg_attr(
    not(berth_it_slurm),
    ignore = "needs root, the test fixtures and berth's SPANK plugin: sudo bash tests/setup/setup.sh, then sudo bash tests/setup/slurm_plugin.sh target/debug"
)]
fn pyxis_unshare_gives_the_nodes_tasks_their_own_namespaces() {
    let sb = sandbox();
    let img = image(&sb, "debian-python");
    let host = |ns: &str| std::fs::read_link(format!("/proc/self/ns/{ns}")).unwrap();
    let host_ns = format!(
        "{}\n{}\n{}",
        host("net").display(),
        host("ipc").display(),
        host("uts").display()
    );
    // Four tasks share one set, none the host's (unshare*.bats "creates",
    // "multiple tasks").
    let show =
        "readlink /proc/self/ns/net /proc/self/ns/ipc /proc/self/ns/uts | tr '\\n' ' '; echo";
    let out = srun(
        &sb,
        &[],
        &[
            "-n4",
            "-O",
            &img,
            "--container-unshare=net,ipc,uts",
            "sh",
            "-c",
            show,
        ],
    )
    .ok();
    let all = out.stdout();
    let lines: std::collections::BTreeSet<&str> = all.lines().collect();
    assert_eq!(lines.len(), 1, "{}", out.stdout());
    let mine = lines.iter().next().unwrap().split(' ').collect::<Vec<_>>();
    for (inside, outside) in mine.iter().zip(host_ns.lines()) {
        assert_ne!(*inside, outside, "{}", out.stdout());
    }
    // Without it, the host's (the "no --container-unshare" tests).
    let out = srun(&sb, &[], &[&img, "sh", "-c", show]).ok();
    assert_eq!(out.stdout().trim(), host_ns.replace('\n', " "));
    // The network: loopback only; the IPC namespace: its own /dev/shm and
    // /dev/mqueue; the UTS namespace: root inside sets the hostname, the
    // node's stays.
    let probe =
        "bash -c 'echo > /dev/tcp/127.0.0.1/65535' 2>&1 | grep -o -m1 'Connection refused'; \
        bash -c 'echo > /dev/tcp/8.8.8.8/53' 2>&1 | grep -o -m1 'Network is unreachable'; \
        stat -c %d /dev/shm; stat -c %d /dev/mqueue; hostname container-test && hostname";
    let out = srun(
        &sb,
        &[("PYXIS_CONTAINER_UNSHARE", "net,ipc,uts")],
        &[&img, "--container-remap-root", "sh", "-c", probe],
    )
    .ok();
    use std::os::unix::fs::MetadataExt;
    let dev_of = |p: &str| std::fs::metadata(p).ok().map(|m| m.dev().to_string());
    let text = out.stdout();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some("Connection refused"),
        "{text}{}",
        out.stderr()
    );
    assert_eq!(
        lines.get(1).copied(),
        Some("Network is unreachable"),
        "{text}"
    );
    for (i, host) in [(2, "/dev/shm"), (3, "/dev/mqueue")] {
        assert_ne!(lines.get(i).map(|d| d.to_string()), dev_of(host), "{text}");
    }
    assert_eq!(lines.get(4).copied(), Some("container-test"), "{text}");
    assert_ne!(
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .unwrap()
            .trim(),
        "container-test"
    );
    // The same in a container of one task (no anchor holds them).
    let out = srun(
        &sb,
        &[],
        &[
            &img,
            "--container-mode=per-task",
            "--container-unshare=net,uts,ipc",
            "--container-remap-root",
            "sh",
            "-c",
            probe,
        ],
    )
    .ok();
    assert!(
        out.stdout()
            .starts_with("Connection refused\nNetwork is unreachable\n")
            && out.stdout().ends_with("\ncontainer-test\n"),
        "{}",
        out.stdout()
    );
    // Unknown names fail the step (unshare.bats 1, 2); a running named
    // container keeps its namespaces for the steps that join it, and one
    // without them cannot be given them (the "joins existing" and "on
    // existing container without" tests, with the container kept running
    // by a step in the background, as there).
    let out = srun(&sb, &[], &[&img, "--container-unshare=net,foo", "true"]);
    assert_ne!(out.code(), 0);
    assert!(
        out.stderr().contains("unknown namespace"),
        "{}",
        out.stderr()
    );
    let steps = format!(
        "srun -N1 --overlap --container-name=u --container-unshare=net {img} sleep 5 & sleep 3; \
         srun -N1 --overlap --container-name=u readlink /proc/self/ns/net; \
         srun -N1 --overlap --container-name=plain {img} sleep 5 & sleep 3; \
         srun -N1 --overlap --container-name=plain --container-unshare=net true; echo \"plain=$?\"; wait"
    );
    let out = slurm(&sb, "/usr/bin/salloc", &["-N1", "sh", "-c", &steps]);
    let text = out.stdout();
    assert!(text.starts_with("net:["), "{text}{}", out.stderr());
    assert!(
        !text.starts_with(&format!("{}\n", host("net").display())),
        "{text}"
    );
    assert!(!text.contains("plain=0"), "{text}");
    assert!(
        out.stderr().contains("not in a separate network namespace"),
        "{}",
        out.stderr()
    );
}

/// A PyTorch image gets torch.distributed's rendezvous from Slurm, as
/// enroot's 50-slurm-pytorch.sh hook gives it (pytorch.bats 1, 2): any
/// image whose ENV has PYTORCH_VERSION.
#[test]
#[cfg_attr(
    not(berth_it_slurm),
    ignore = "needs root, the test fixtures and berth's SPANK plugin: sudo bash tests/setup/setup.sh, then sudo bash tests/setup/slurm_plugin.sh target/debug"
)]
fn pyxis_pytorch_images_get_the_rendezvous_variables() {
    let sb = sandbox();
    let ctx = sb.dir.path().join("pytorch-like");
    std::fs::create_dir_all(&ctx).unwrap();
    std::fs::write(
        ctx.join("Dockerfile"),
        format!(
            "FROM {}/berth-test/debian-python:latest\nENV PYTORCH_VERSION=2.3.0a0\n",
            sb.env.anon()
        ),
    )
    .unwrap();
    sb.chown_to_user(&ctx);
    sb.run(&["build", "-t", "pytorch-like", &ctx.to_string_lossy()])
        .ok();
    let show = "echo $RANK:$SLURM_PROCID $LOCAL_RANK:$SLURM_LOCALID $WORLD_SIZE $MASTER_ADDR \
                $MASTER_PORT $SLURMD_NODENAME";
    let out = srun(
        &sb,
        &[],
        &[
            "-N2",
            "-n4",
            "-O",
            "--container-image=pytorch-like",
            "sh",
            "-c",
            show,
        ],
    )
    .ok();
    let mut lines: Vec<String> = out.stdout().lines().map(str::to_string).collect();
    lines.sort();
    assert_eq!(lines.len(), 4, "{}", out.stdout());
    // The master is rank 0's node (the step's first; which nodes the step
    // gets depends on what other tests hold).
    let first_node = lines[0].split(' ').nth(5).unwrap_or_default().to_string();
    for (i, l) in lines.iter().enumerate() {
        let f: Vec<&str> = l.split(' ').collect();
        assert_eq!(f[0], format!("{i}:{i}"), "{l}");
        let (local, slurm_local) = f[1].split_once(':').unwrap();
        assert_eq!(local, slurm_local, "{l}");
        assert_eq!(f[2], "4", "{l}");
        assert_eq!(f[3], first_node, "{l}");
        assert!(
            f[4].parse::<u32>()
                .is_ok_and(|p| (61000..65536).contains(&p)),
            "{l}"
        );
    }
    // Not a PyTorch image: none of them.
    let out = srun(
        &sb,
        &[],
        &[
            &image(&sb, "debian-python"),
            "sh",
            "-c",
            "echo ${RANK-unset}",
        ],
    )
    .ok();
    assert_eq!(last_line(&out), "unset");
}

#[test]
#[cfg_attr(
    not(berth_it_slurm),
    ignore = "needs root, the test fixtures and berth's SPANK plugin: sudo bash tests/setup/setup.sh, then sudo bash tests/setup/slurm_plugin.sh target/debug"
)]
fn container_save_writes_a_squashfs_file_the_next_step_runs() {
    let sb = sandbox();
    let img = image(&sb, "debian-python");
    // A relative PATH is the job's directory's; PYXIS_CONTAINER_SAVE too.
    srun(
        &sb,
        &[],
        &[
            &img,
            "--container-save=saved.sqsh",
            "--container-remap-root",
            "sh",
            "-c",
            "echo kept > /etc/note",
        ],
    )
    .ok();
    let saved = sb.dir.path().join("saved.sqsh");
    assert!(saved.is_file());
    let file = format!("--container-image={}", saved.display());
    assert_eq!(
        last_line(&srun(&sb, &[], &[&file, "cat", "/etc/note"]).ok()),
        "kept"
    );
    // Run from the file and saved to itself, as the user (squashfs_image.bats 3, 4).
    let to_itself = [
        "--container-save=./saved.sqsh",
        "sh",
        "-c",
        "echo more > /note2",
    ];
    let mut args = vec![file.as_str()];
    args.extend(to_itself);
    srun(&sb, &[], &args).ok();
    let out = srun(&sb, &[], &[&file, "cat", "/etc/note", "/note2"]).ok();
    assert_eq!(out.stdout().lines().collect::<Vec<_>>(), ["kept", "more"]);
    srun(
        &sb,
        &[("PYXIS_CONTAINER_SAVE", "again.sqsh")],
        &[&img, "true"],
    )
    .ok();
    assert!(sb.dir.path().join("again.sqsh").is_file());
    // Two tasks on a node would save two containers to one file.
    let out = srun(
        &sb,
        &[],
        &["-n2", &img, "--container-save=two.sqsh", "true"],
    );
    assert_ne!(out.code(), 0);
    assert!(
        out.stderr().contains("needs one task per node"),
        "{}",
        out.stderr()
    );
    assert!(!sb.dir.path().join("two.sqsh").exists());
}
