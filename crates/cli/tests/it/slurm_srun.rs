//! berth under a real Slurm (tests/setup/slurm_cluster.sh: munged,
//! slurmctld and three slurmd "nodes" on this machine), one container per
//! task: `srun -N3 berth run`, MPI through `srun --mpi=pmi2` with the
//! image's MPICH and with the host's injected (`--mpi`), and a failure
//! reaching srun's output.

use std::path::Path;

use crate::harness::{Out, Sandbox};
use crate::need_env;

fn srun(sb: &Sandbox, args: &[&str]) -> Out {
    let berth = sb.env.berth.to_string_lossy().into_owned();
    let mut all: Vec<&str> = Vec::new();
    let mut rest = args.iter();
    // srun's own options, then berth and its arguments.
    for a in rest.by_ref() {
        if *a == "--" {
            break;
        }
        all.push(a);
    }
    all.push(&berth);
    all.extend(rest);
    let mut c = sb.command(Path::new("/usr/bin/srun"), &all);
    c.env("SLURM_CONF", sb.env.var("BERTH_IT_SLURM_CONF"));
    Out(c.output().unwrap())
}

fn pull(sb: &Sandbox, name: &str) -> String {
    let r = format!("{}/berth-test/{name}:latest", sb.env.anon());
    sb.run(&["pull", "-q", "--tls-verify=false", &r]).ok();
    r
}

fn sorted_lines(out: &str) -> Vec<String> {
    let mut l: Vec<String> = out.lines().map(str::to_string).collect();
    l.sort();
    l
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn srun_runs_one_container_per_task_on_each_node() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let img = pull(&sb, "debian-python");
    let out = srun(
        &sb,
        &[
            "-N3",
            "-l",
            "--",
            "run",
            &img,
            "sh",
            "-c",
            "echo $SLURM_PROCID $SLURMD_NODENAME $container",
        ],
    )
    .ok()
    .stdout();
    assert_eq!(
        sorted_lines(&out),
        ["0: 0 n1 berth", "1: 1 n2 berth", "2: 2 n3 berth"],
        "{out}"
    );
    // berth's own failure is srun's failure, with berth's message.
    let out = srun(&sb, &["-N1", "--", "run", "no-such-image", "true"]);
    assert_ne!(out.code(), 0);
    assert!(
        out.stderr().contains("is not in the store"),
        "{}",
        out.stderr()
    );
    assert!(out.stderr().contains("exit code 125"), "{}", out.stderr());
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn mpi_through_srun_pmi2_with_the_images_and_the_hosts_mpich() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    sb.host_mpich_module();
    let img = pull(&sb, "mpich");
    for (extra, lib) in [
        (None, "x86_64-linux-gnu/libmpich.so.12 "),
        (Some("--mpi"), "libmpi /.berth/lib/libmpich.so.12 "),
    ] {
        let mut args = vec!["--mpi=pmi2", "-N3", "-n6", "--", "run"];
        args.extend(extra);
        args.extend([img.as_str(), "mpi-probe"]);
        let out = srun(&sb, &args).ok().stdout();
        let ranks: Vec<&str> = out.lines().filter(|l| l.starts_with("rank ")).collect();
        assert_eq!(ranks.len(), 6, "{out}");
        for r in &ranks {
            assert!(
                r.contains(" of 6 sum 21 ") && r.contains(lib),
                "{extra:?}: {out}"
            );
            if extra.is_none() {
                assert!(!r.contains("/.berth/"), "{out}");
            }
        }
    }
}

/// The review's job-cgroup note: a keeper lives in the cgroup of the job
/// that started it, and Slurm kills that cgroup when the job ends. Job 2
/// of the same user on the node used to join job 1's keeper and lost its
/// image (ENOTCONN) with it. Now each job has keepers of its own. This
/// cluster tracks processes with proctrack/linuxproc (no cgroups on these
/// machines), so the test ends job 1 and then kills its keeper's session
/// itself, as the cgroup would; job 2 still reads its image.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_later_job_keeps_its_image_when_an_earlier_jobs_keeper_goes() {
    use std::io::BufRead;
    let env = need_env!();
    let sb = Sandbox::new(env);
    let img = pull(&sb, "debian-python");
    let berth = sb.env.berth.to_string_lossy().into_owned();
    let job = |script: &str| {
        let mut c = sb.command(
            Path::new("/usr/bin/srun"),
            &["-N1", "-w", "n1", &berth, "run", &img, "sh", "-c", script],
        );
        c.env("SLURM_CONF", sb.env.var("BERTH_IT_SLURM_CONF"))
            .stdout(std::process::Stdio::piped());
        let mut child = c.spawn().unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().and_then(|l| l.ok()).unwrap_or_default();
        (child, lines, first)
    };
    let (mut one, _, id1) = job("echo $SLURM_JOB_ID; sleep 60");
    let (mut two, mut rest, id2) =
        job("echo $SLURM_JOB_ID; sleep 6; cat /etc/debian_version && echo IMAGE-STILL-THERE");
    assert!(!id1.is_empty() && id1 != id2, "job ids {id1:?} {id2:?}");
    let keepers = sb.dir.path().join("run/berth/keepers");
    let names: Vec<String> = std::fs::read_dir(&keepers)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    let of = |id: &str| {
        names
            .iter()
            // (`-job{id}-step_0` where steps have cgroups of their own.)
            .find(|n| n.ends_with(&format!("-job{id}")) || n.contains(&format!("-job{id}-")))
            .cloned()
    };
    let (k1, k2) = (of(&id1), of(&id2));
    // Job 1's keeper (before the fix: the one keeper both jobs used).
    let first = k1.clone().or_else(|| names.first().cloned()).unwrap();
    // Job 1 ends; its keeper's session goes as its cgroup would.
    let _ = std::process::Command::new("scancel")
        .arg(&id1)
        .env("SLURM_CONF", sb.env.var("BERTH_IT_SLURM_CONF"))
        .status();
    let pid1 = std::fs::read_to_string(keepers.join(first).join("pid")).unwrap();
    let _ = std::process::Command::new("pkill")
        .args(["-KILL", "-s", pid1.trim()])
        .status();
    let _ = one.kill();
    let _ = one.wait();
    let tail: Vec<String> = rest.by_ref().map_while(|l| l.ok()).collect();
    let st = two.wait().unwrap();
    assert!(
        tail.iter().any(|l| l == "IMAGE-STILL-THERE"),
        "job 2 lost its image: {tail:?}"
    );
    assert!(st.success(), "{tail:?}");
    assert!(k1.is_some() && k2.is_some() && k1 != k2, "{names:?}");
}
