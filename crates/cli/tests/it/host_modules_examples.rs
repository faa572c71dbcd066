//! The site modules shipped in examples/modules (issue 21), exercised on a
//! fake node: each file parses, and with its host paths (not its
//! environment values) moved under a
//! fake tree (character devices made with mknod, library files, config
//! directories) a run with every module gets the devices, libraries,
//! binds and environment the module promises.

use std::path::Path;
use std::process::Command;

use crate::harness::*;
use crate::harness_proxy::free_port;
use crate::need_env;

fn examples_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/modules")
}

/// The examples, with the first path of each quoted string moved under
/// `fake` (sources only: a `SRC:DST` keeps its destination). The ssh
/// module runs the node's real dropbear, in a test of its own.
fn moved_modules(fake: &Path, to: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for e in std::fs::read_dir(examples_dir()).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "toml") || p.file_stem().is_some_and(|s| s == "ssh") {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap();
        // Environment values ([env.set] lines, NAME = "...") stay.
        let moved: String = text
            .lines()
            .map(|l| {
                let env_line = l.split_once(" = ").is_some_and(|(k, _)| {
                    !k.is_empty() && k.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                });
                let l = if env_line {
                    l.to_string()
                } else {
                    l.replace("\"/", &format!("\"{}/", fake.display()))
                };
                l + "\n"
            })
            .collect();
        std::fs::write(to.join(e.file_name()), moved).unwrap();
        names.push(e.path().file_stem().unwrap().to_string_lossy().into_owned());
    }
    names.sort();
    names
}

fn char_device(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let st = Command::new("mknod")
        .arg(path)
        .args(["c", "1", "3"])
        .status()
        .unwrap();
    assert!(st.success(), "mknod {}", path.display());
}

fn file(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn example_modules_apply_on_a_fake_node() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    let fake = sb.dir.path().join("fake");
    char_device(&fake.join("dev/infiniband/uverbs0"));
    char_device(&fake.join("dev/infiniband/rdma_cm"));
    char_device(&fake.join("dev/cxi0"));
    let lib = fake.join("usr/lib/x86_64-linux-gnu");
    for l in [
        "libibverbs.so.1.14.0",
        "librdmacm.so.1.3.0",
        "libmlx5.so.1.24.0",
    ] {
        file(&lib.join(l), "elf\n");
    }
    file(&lib.join("libibverbs/libmlx5-rdmav34.so"), "elf\n");
    file(&fake.join("etc/libibverbs.d/mlx5.driver"), "driver mlx5\n");
    file(
        &fake.join("opt/cray/libfabric/1.22/lib64/libfabric.so.1.25.0"),
        "elf\n",
    );
    file(&fake.join("usr/lib64/libcxi.so.1.5.2"), "elf\n");
    file(&fake.join("etc/libfabric.d/cxi.conf"), "\n");
    file(
        &fake.join("opt/aws-ofi-nccl/lib/libnccl-net-ofi.so"),
        "elf\n",
    );
    for cmd in [
        "srun", "sbatch", "salloc", "squeue", "scancel", "scontrol", "sinfo", "sacct",
    ] {
        file(&fake.join("usr/bin").join(cmd), "elf\n");
    }
    file(&lib.join("slurm-wlm/libslurmfull.so"), "elf\n");
    file(&lib.join("libmunge.so.2.0.0"), "elf\n");
    file(&fake.join("etc/slurm/slurm.conf"), "ClusterName=fake\n");
    std::fs::create_dir_all(fake.join("run/munge")).unwrap();
    std::fs::create_dir_all(fake.join("tmp/nvidia-mps")).unwrap();
    std::fs::create_dir_all(fake.join("var/log/nvidia-mps")).unwrap();
    sb.chown_to_user(&fake.join("tmp"));
    let modules = sb.dir.path().join("modules");
    std::fs::create_dir_all(&modules).unwrap();
    let names = moved_modules(&fake, &modules);
    assert_eq!(
        names,
        [
            "aws-ofi-nccl",
            "cuda-mps",
            "cxi",
            "infiniband",
            "slurm-client"
        ]
    );
    sb.site_config(&format!(
        "[host]\nmodules_dir = \"{}\"\n",
        modules.display()
    ));
    let listed = sb.run(&["modules"]).ok().stdout();
    for n in &names {
        assert!(listed.contains(n.as_str()), "{n} in {listed}");
    }
    let mut args = vec!["run".to_string()];
    for n in &names {
        args.extend(["--module".to_string(), n.clone()]);
    }
    args.extend([d.clone(), "sh".into(), "-c".into()]);
    args.push(
        "ls /dev/infiniband | tr '\\n' ' '; echo; test -c /dev/cxi0 && echo cxi0; \
         echo $FI_PROVIDER $CUDA_MPS_PIPE_DIRECTORY; cat /etc/libibverbs.d/mlx5.driver; \
         ls /usr/lib/x86_64-linux-gnu/libibverbs; \
         ls /.berth/lib | sort | tr '\\n' ' '; echo; touch /tmp/nvidia-mps/pipe && echo mps-rw; \
         ls /usr/bin/srun /usr/bin/sacct /usr/lib/x86_64-linux-gnu/slurm-wlm /etc/slurm /run/munge | tr '\\n' ' '"
            .into(),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = sb.run(&args).ok().stdout();
    assert_eq!(
        out,
        "rdma_cm uverbs0 \ncxi0\ncxi /tmp/nvidia-mps\ndriver mlx5\nlibmlx5-rdmav34.so\n\
         libcxi.so.1.5.2 libfabric.so.1.25.0 libibverbs.so.1.14.0 libmlx5.so.1.24.0 \
         libmunge.so.2.0.0 libnccl-net-ofi.so librdmacm.so.1.3.0 \nmps-rw\n\
         /usr/bin/sacct /usr/bin/srun  /etc/slurm: slurm.conf  /run/munge:  \
         /usr/lib/x86_64-linux-gnu/slurm-wlm: libslurmfull.so "
    );
}

fn port_open(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// Waits up to 10 s until `port` is `open` (or closed), failing with
/// `what` (the module's server notices its container's end within about
/// two seconds).
fn wait_port(port: u16, open: bool, what: &str) {
    let t = std::time::Instant::now();
    while port_open(port) != open {
        assert!(t.elapsed().as_secs() < 10, "{what}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn wait_port_closed(port: u16) {
    wait_port(port, false, "the server outlived its container");
}

/// The shipped ssh module (CSCS's and Sarus's `--ssh`) with the node's
/// real dropbear: the container's server takes the user's keys (made on
/// first use and authorized), a login from outside (as from another node)
/// and `ssh` in the container land in the container with its environment,
/// OpenSSH's options that launchers pass are taken, a second container on
/// the same port runs with a warning, and the server ends with the
/// container's command.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn ssh_module_serves_the_container() {
    let env = need_env!();
    for tool in [
        "/usr/sbin/dropbear",
        "/usr/bin/dbclient",
        "/usr/bin/dropbearkey",
    ] {
        assert!(
            Path::new(tool).exists(),
            "{tool} missing: the ssh module needs dropbear-bin (sudo bash tests/setup/setup.sh)"
        );
    }
    let sb = Sandbox::new(env);
    let d = sb.debian();
    // berth's scripts where the test user reads them.
    let share = sb.dir.path().join("share-ssh");
    std::fs::create_dir_all(&share).unwrap();
    for e in std::fs::read_dir(examples_dir().join("ssh"))
        .unwrap()
        .flatten()
    {
        std::fs::copy(e.path(), share.join(e.file_name())).unwrap();
    }
    let text = std::fs::read_to_string(examples_dir().join("ssh.toml"))
        .unwrap()
        .replace("/usr/share/berth/ssh", &share.display().to_string());
    sb.module("ssh", &text);
    let port = free_port();
    let port_env = format!("BERTH_SSH_PORT={port}");
    let base = |script: &str| -> Vec<String> {
        [
            "run",
            "--module",
            "ssh",
            "-e",
            &port_env,
            "-e",
            "MARK=from-the-container",
            &d,
            "sh",
            "-c",
            script,
        ]
        .map(String::from)
        .to_vec()
    };

    // In the container: ssh back into it (a launcher's options included;
    // the remote command's own options pass unchanged).
    let args = base(
        "ssh -x -o StrictHostKeyChecking=no -oPort=1 -F /dev/null -p \"$BERTH_SSH_PORT\" -- localhost \
         'test -x /.berth/ssh/start && echo in-container; echo $MARK; id -un' && \
         ssh localhost ls -a /.berth/ssh/bin",
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = sb.run(&args).ok();
    let user = env
        .test_user()
        .2
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert_eq!(
        out.stdout(),
        format!("in-container\nfrom-the-container\n{user}\n.\n..\nssh\n")
    );
    assert!(
        out.stderr().contains("made your container SSH keys"),
        "{}",
        out.stderr()
    );
    let keys = sb.home().join(".ssh/berth");
    let public = std::fs::read_to_string(keys.join("id_dropbear.pub")).unwrap();
    let authorized = std::fs::read_to_string(sb.home().join(".ssh/authorized_keys")).unwrap();
    assert!(
        authorized.lines().any(|l| l.starts_with(public.trim())),
        "{authorized}"
    );
    // The user's own known_hosts is not touched; the container one has
    // the user's host key for the destination.
    assert!(!sb.home().join(".ssh/known_hosts").exists());
    let host_key = std::fs::read_to_string(keys.join("host_key.pub")).unwrap();
    let known = std::fs::read_to_string(keys.join("client/.ssh/known_hosts")).unwrap();
    assert_eq!(known, format!("localhost {host_key}"));
    wait_port_closed(port);

    // From outside, as from another node, while the container runs; a
    // second container on the same port runs without a server.
    let args = base("echo ready; exec sleep 60");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut first = sb
        .berth(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let _ready = wait_ready(&mut first);
    let args = base("echo second");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let second = sb.run(&args).ok();
    assert_eq!(second.stdout(), "second\n");
    assert!(second.stderr().contains("is taken"), "{}", second.stderr());
    let key = keys.join("id_dropbear");
    let out = sb
        .command(
            Path::new("/usr/bin/dbclient"),
            &[
                "-y",
                "-p",
                &port.to_string(),
                "-i",
                key.to_str().unwrap(),
                "127.0.0.1",
                "test -x /.berth/ssh/start && echo in-container; echo $MARK",
            ],
        )
        .output()
        .unwrap();
    let out = Out(out);
    assert_eq!(
        out.stdout(),
        "in-container\nfrom-the-container\n",
        "{}",
        out.stderr()
    );
    // The server ends with the command (killed here: berth passes it on).
    let stop = |child: &mut std::process::Child| {
        rustix::process::kill_process(
            rustix::process::Pid::from_child(child),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        child.wait().unwrap();
    };
    stop(&mut first);
    wait_port_closed(port);

    // Someone else's server on the port (the attack the pinned host key
    // stops): the container runs without its own, and its ssh refuses the
    // other key instead of handing it the session.
    let squat = sb.dir.path().join("squatter_key");
    let made = sb
        .command(
            Path::new("/usr/bin/dropbearkey"),
            &["-t", "ed25519", "-f", squat.to_str().unwrap()],
        )
        .output()
        .unwrap();
    assert!(made.status.success());
    let other_port = free_port();
    let mut squatter = sb
        .command(
            Path::new("/usr/sbin/dropbear"),
            &[
                "-F",
                "-E",
                "-s",
                "-p",
                &other_port.to_string(),
                "-r",
                squat.to_str().unwrap(),
                "-P",
                sb.dir.path().join("squatter.pid").to_str().unwrap(),
            ],
        )
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_port(other_port, true, "the squatter did not listen");
    let taken = format!("BERTH_SSH_PORT={other_port}");
    let out = sb
        .run(&[
            "run",
            "--module",
            "ssh",
            "-e",
            &taken,
            &d,
            "sh",
            "-c",
            "ssh localhost echo reached; echo rc=$?",
        ])
        .ok();
    let _ = squatter.kill();
    let _ = squatter.wait();
    assert!(!out.stdout().contains("reached"), "{}", out.stdout());
    assert!(out.stderr().contains("is taken"), "{}", out.stderr());
    assert!(out.stderr().contains("mismatch"), "{}", out.stderr());

    // A shared container (the plugin's one per node): the server outlives
    // the process that built the container and serves while a task runs.
    let mut args = base("echo ready; exec sleep 60");
    args.splice(
        1..1,
        ["--shared", "k-ssh", "--linger", "1"].map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut task = sb
        .berth(&args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let _ready = wait_ready(&mut task);
    std::thread::sleep(std::time::Duration::from_secs(4));
    let joined = sb
        .run(&["exec", "k-ssh", "ssh", "localhost", "echo $MARK"])
        .ok();
    assert_eq!(joined.stdout(), "from-the-container\n");
    stop(&mut task);
    wait_port_closed(port);
}
