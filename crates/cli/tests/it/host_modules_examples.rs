//! The site modules shipped in examples/modules (issue 21), exercised on a
//! fake node: each file parses, and with its host paths (not its
//! environment values) moved under a
//! fake tree (character devices made with mknod, library files, config
//! directories) a run with every module gets the devices, libraries,
//! binds and environment the module promises.

use std::path::Path;
use std::process::Command;

use crate::harness::*;
use crate::need_env;

/// The examples, with the first path of each quoted string moved under
/// `fake` (sources only: a `SRC:DST` keeps its destination).
fn moved_modules(fake: &Path, to: &Path) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/modules");
    let mut names = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
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
