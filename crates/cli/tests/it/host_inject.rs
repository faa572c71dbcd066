//! Host resources: GPUs by discovery and through CDI, `--device`, site
//! modules, `--mpi` without a module, `berth modules`, `--dry-run`. The
//! driver is setup.sh's fake tree (`fake_gpu.sh`: a libcuda.so.1 stand-in,
//! a fake nvidia-smi, null-device nodes made with mknod, a CDI spec); the
//! image runs a probe that dlopens libcuda.so.1 and calls into it.

use std::fs;
use std::path::PathBuf;

use crate::harness::Sandbox;
use crate::need_env;

fn probe(sb: &Sandbox) -> String {
    let r = format!("{}/berth-test/gpu-probe:latest", sb.env.anon());
    sb.run(&["pull", "-q", "--tls-verify=false", &r]).ok();
    r
}

fn fake(sb: &Sandbox) -> PathBuf {
    PathBuf::from(sb.env.var("BERTH_IT_FAKEGPU"))
}

/// The site config: the fake tree's paths, with `cdi` as the spec directory.
fn site(sb: &Sandbox, cdi: &str) {
    let f = fake(sb);
    let text = format!(
        "[host]\ncdi_spec_dirs = [\"{f}/{cdi}\"]\nld_cache = \"{f}/ld.so.cache\"\ndev_dir = \"{f}/dev\"\nbin_dirs = [\"{f}/bin\"]\nnvidia_proc = \"{f}/proc\"\n",
        f = f.display()
    );
    fs::write(sb.dir.path().join("no-site-config.toml"), text).unwrap();
}

fn sh(sb: &Sandbox, image: &str, extra: &[&str], script: &str) -> crate::harness::Out {
    let mut args = vec!["run"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[image, "/bin/sh", "-c", script]);
    sb.run(&args)
}

/// Whether the output lists `word` (the `ls /dev` line).
fn lists(out: &str, word: &str) -> bool {
    out.split_whitespace().any(|w| w == word)
}

const SHOW: &str = "cuda-probe; nvidia-smi | head -1; ls /dev | grep nvidia | tr '\\n' ' '; echo; echo \"lib=$LD_LIBRARY_PATH visible=$NVIDIA_VISIBLE_DEVICES cdi=$FAKE_CDI_SPEC\"";

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn gpus_by_driver_discovery() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    site(&sb, "cdi-empty");
    let img = probe(&sb);

    let out = sh(&sb, &img, &["--gpus", "all"], SHOW).ok().stdout();
    assert!(
        out.contains("cuInit=0 cuDeviceGetCount=0 devices=2 libcuda=/.berth/lib/libcuda.so.1"),
        "{out}"
    );
    assert!(out.contains("Fake GPU"), "nvidia-smi not injected: {out}");
    assert!(
        out.contains("nvidia-caps nvidia-uvm nvidia0 nvidia1 nvidiactl"),
        "{out}"
    );
    // The driver is found through the loader cache, as NVIDIA's toolkit
    // gives it: LD_LIBRARY_PATH stays as it was (pyxis env 8, 29).
    assert!(out.contains("lib= visible=all cdi="), "{out}");

    // The image's ldconfig lists the driver's libraries (pyxis env 7), a
    // program run with LD_LIBRARY_PATH cleared loads them, and the
    // image's own entries stay.
    let out = sh(
        &sb,
        &img,
        &["--gpus", "all"],
        "ldconfig -p | grep -c 'libcuda.so.1 (libc6,x86-64) => /.berth/lib/libcuda.so.1'; \
         ldconfig -p | grep -c 'libc.so.6 '; env -u LD_LIBRARY_PATH cuda-probe",
    )
    .ok()
    .stdout();
    assert!(
        out.starts_with("1\n1\n")
            && out
                .contains("cuInit=0 cuDeviceGetCount=0 devices=2 libcuda=/.berth/lib/libcuda.so.1"),
        "{out}"
    );

    // A writable container: the cache lies in a layer above the image,
    // where the image's ldconfig (apt's, dnf's) can replace it, and the
    // cache that ldconfig writes keeps the driver (its directory is named
    // in /etc/ld.so.conf.d). LD_LIBRARY_PATH stays as it was.
    const LISTED: &str =
        "ldconfig -p | grep -c 'libcuda.so.1 (libc6,x86-64) => /.berth/lib/libcuda.so.1'";
    let out = sh(
        &sb,
        &img,
        &["--gpus", "all", "--writable", "--fakeroot"],
        &format!("{LISTED}; ldconfig && echo rebuilt \"$LD_LIBRARY_PATH\"; {LISTED}; cuda-probe"),
    )
    .ok()
    .stdout();
    assert!(
        out.starts_with("1\nrebuilt \n1\n") && out.contains("devices=2"),
        "{out}"
    );
    let out = sh(
        &sb,
        &img,
        &["--gpus", "all", "--writable"],
        &format!("{LISTED}; echo \"[$LD_LIBRARY_PATH]\"; cuda-probe"),
    )
    .ok()
    .stdout();
    assert!(
        out.starts_with("1\n[]\n") && out.contains("devices=2"),
        "{out}"
    );

    // One GPU, by index and by UUID: the container sees only that one.
    let out = sh(&sb, &img, &["--gpus", "1"], SHOW).ok().stdout();
    assert!(out.contains("devices=1") && lists(&out, "nvidia1"), "{out}");
    assert!(!lists(&out, "nvidia0"), "{out}");
    assert!(!out.contains("nvidia0"), "{out}");
    let out = sh(&sb, &img, &["--gpus", "GPU-fake-0000"], SHOW)
        .ok()
        .stdout();
    assert!(out.contains("devices=1") && lists(&out, "nvidia0"), "{out}");

    // Without --gpus the container has no driver, and nothing of the GPU
    // runs before it stayed behind (no device mount points, no /.berth).
    let out = sh(
        &sb,
        &img,
        &[],
        "ls /dev; ls -d /.berth 2>&1; ldconfig -p | grep -c libcuda",
    )
    .stdout();
    assert!(out.ends_with("\n0\n"), "{out}");
    assert!(!out.contains("nvidia"), "{out}");
    assert!(out.contains("No such file"), "{out}");
    let out = sh(&sb, &img, &[], "cuda-probe");
    assert_eq!(out.code(), 2, "{}", out.stderr());
    assert!(
        out.stderr().contains("dlopen libcuda.so.1"),
        "{}",
        out.stderr()
    );

    sh(&sb, &img, &["--gpus", "5"], "true").fails(125, "GPU 5 is not on this node");
    sh(&sb, &img, &["--gpus", "first"], "true").fails(125, "neither an index");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn gpus_and_devices_through_cdi() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    site(&sb, "cdi");
    let img = probe(&sb);
    let out = sh(&sb, &img, &["--gpus", "all"], SHOW).ok().stdout();
    // The spec mounts the library at the image's own library path.
    assert!(
        out.contains("devices=2 libcuda=") && out.contains("x86_64-linux-gnu/libcuda.so.1"),
        "{out}"
    );
    assert!(
        out.contains("cdi=yes") && out.contains("visible=void"),
        "{out}"
    );
    assert!(out.contains("Fake GPU"), "{out}");
    // `none`: the spec's common edits (the driver), no GPU.
    let out = sh(&sb, &img, &["--gpus", "none"], SHOW).stdout();
    assert!(out.contains("cdi=yes") && lists(&out, "nvidiactl"), "{out}");
    assert!(!lists(&out, "nvidia0") && !lists(&out, "nvidia1"), "{out}");
    let out = sh(&sb, &img, &["--device", "nvidia.com/gpu=1"], SHOW)
        .ok()
        .stdout();
    assert!(out.contains("devices=1") && lists(&out, "nvidia1"), "{out}");
    assert!(!lists(&out, "nvidia0"), "{out}");
    sh(&sb, &img, &["--device", "nvidia.com/gpu=7"], "true").fails(
        125,
        "defined: nvidia.com/gpu=0, nvidia.com/gpu=1, nvidia.com/gpu=all",
    );
    sh(&sb, &img, &["--device", "nvidia/gpu"], "true").fails(125, "vendor.com/class=NAME");

    // A host device node by path, at another name.
    let node = format!("{}/dev/nvidia-uvm:/dev/fabric0", fake(&sb).display());
    let out = sh(
        &sb,
        &img,
        &["--device", &node],
        "echo ok > /dev/fabric0 && ls -l /dev/fabric0",
    )
    .ok()
    .stdout();
    assert!(out.starts_with('c'), "not a character device inside: {out}");
    sh(&sb, &img, &["--device", "/etc/passwd"], "true")
        .fails(125, "not a character or block device");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn site_modules_and_mpi_without_one() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    site(&sb, "cdi-empty");
    let f = fake(&sb);
    let mods = sb.dir.path().join("modules.d");
    fs::create_dir_all(&mods).unwrap();
    fs::write(
        mods.join("fabric.toml"),
        format!(
            "description = \"test interconnect\"\ndevices = [\"{f}/dev/nvidia-uvm:/dev/cxi0\"]\nlibraries = [\"{f}/lib/libnvidia-ml.so.1\"]\nbinds = [\"{f}/bin:/opt/fabric/bin\"]\n[env.set]\nFI_PROVIDER = \"cxi\"\n[env.prepend]\nPATH = \"/opt/fabric/bin\"\n",
            f = f.display()
        ),
    )
    .unwrap();
    fs::write(
        mods.join("always.toml"),
        "description = \"every run\"\nwhen = \"always\"\n[env.set]\nSITE_ALWAYS = \"1\"\n",
    )
    .unwrap();
    sb.chown_to_user(&mods);
    let out = sb.run(&["modules"]).ok().stdout();
    assert!(
        out.contains("fabric") && out.contains("test interconnect"),
        "{out}"
    );
    assert!(out.contains("always") && out.contains("every run"), "{out}");
    let j = sb.run(&["modules", "--format", "json"]).ok().json();
    assert_eq!(j["modules"].as_array().unwrap().len(), 2);

    let img = probe(&sb);
    let script = "ls -l /dev/cxi0; ls /.berth/lib; echo \"$FI_PROVIDER $SITE_ALWAYS\"; command -v nvidia-smi";
    let out = sh(&sb, &img, &["--module", "fabric"], script).ok().stdout();
    assert!(out.starts_with('c'), "{out}");
    assert!(out.contains("libnvidia-ml.so.1"), "{out}");
    assert!(out.contains("cxi 1"), "{out}");
    assert!(out.contains("/opt/fabric/bin/nvidia-smi"), "{out}");
    // Without --module only the always module applies.
    let out = sh(&sb, &img, &[], "echo \"[$FI_PROVIDER] $SITE_ALWAYS\"")
        .ok()
        .stdout();
    assert_eq!(out.trim(), "[] 1");

    sh(&sb, &img, &["--module", "nope"], "true").fails(125, "no module \"nope\"");
    sh(&sb, &img, &["--mpi"], "true").fails(125, "no MPI module is defined");

    // A broken module file: berth modules says which and why (exit 3).
    fs::write(mods.join("broken.toml"), "when = \"sometimes\"\n").unwrap();
    sb.run(&["modules"]).fails(3, "broken.toml");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn dry_run_shows_the_plan_and_starts_nothing() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    site(&sb, "cdi-empty");
    let img = probe(&sb);
    let j = sb
        .run(&["run", "--dry-run", "--gpus", "0", &img, "cuda-probe"])
        .ok()
        .json();
    assert_eq!(j["argv"][0], "cuda-probe");
    assert_eq!(j["injected"]["applied"][0], "gpu:nvidia");
    let binds = j["binds"].as_array().unwrap();
    let device = |t: &str| {
        binds
            .iter()
            .any(|b| b["target"] == t && b["device"] == true)
    };
    assert!(device("/dev/nvidia0") && device("/dev/nvidiactl"), "{j}");
    assert!(!device("/dev/nvidia1"), "{j}");
    assert!(
        binds
            .iter()
            .any(|b| b["target"] == "/.berth/lib/libcuda.so.1"),
        "{j}"
    );
    assert!(
        binds
            .iter()
            .any(|b| b["target"] == "/etc/ld.so.cache" && b["readonly"] == true),
        "{j}"
    );
    assert!(
        !j["env"].as_array().unwrap().iter().any(|e| e
            .as_str()
            .is_some_and(|e| e.starts_with("LD_LIBRARY_PATH="))),
        "{j}"
    );
    // Nothing ran: no keeper was started for the image.
    let keepers = sb.dir.path().join("run/berth/keepers");
    let n = fs::read_dir(&keepers).map(|d| d.count()).unwrap_or(0);
    assert_eq!(n, 0, "a keeper was started for a dry run");
}

/// GPUs without --gpus, as enroot's NVIDIA hook gives them (Pyxis's
/// env.bats 5-7): NVIDIA_VISIBLE_DEVICES of the caller, else of the image
/// (every CUDA image sets `all`); `void` gives none, `none` the driver
/// without a GPU; under Slurm the index
/// is among the step's GPUs. NVIDIA_DRIVER_CAPABILITIES (the caller's,
/// else the image's; unset: `utility`) says which parts of the driver
/// come with them. On a node without a GPU the same image runs without
/// one.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn gpus_from_nvidia_visible_devices() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    site(&sb, "cdi-empty");
    let probe_ref = probe(&sb);
    // An image that asks for every GPU, as nvidia/cuda images do.
    let ctx = sb.dir.path().join("cuda-like");
    fs::create_dir_all(&ctx).unwrap();
    fs::write(
        ctx.join("Dockerfile"),
        format!(
            "FROM {probe_ref}\nENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility\n"
        ),
    )
    .unwrap();
    sb.chown_to_user(&ctx);
    sb.build("cuda-like", &ctx).ok();
    let with = |vars: &[(&str, &str)], image: &str| {
        let mut c = sb.berth(&["run", image, "/bin/sh", "-c", SHOW]);
        c.envs(vars.iter().copied());
        crate::harness::Out(c.output().unwrap())
    };
    let out = with(&[], "cuda-like").ok().stdout();
    assert!(
        out.contains("devices=2") && out.contains("visible=all"),
        "{out}"
    );
    let out = with(&[("NVIDIA_VISIBLE_DEVICES", "void")], "cuda-like").stdout();
    assert!(!out.contains("nvidia"), "{out}");
    // `none`: the driver without a GPU, as NVIDIA's toolkit gives it (its
    // tools and the control device, no /dev/nvidiaN), under Slurm too.
    for vars in [
        &[("NVIDIA_VISIBLE_DEVICES", "none")][..],
        &[("NVIDIA_VISIBLE_DEVICES", "none"), ("SLURM_STEP_GPUS", "1")],
    ] {
        let out = with(vars, "cuda-like").stdout();
        assert!(
            lists(&out, "nvidiactl") && !lists(&out, "nvidia0") && !lists(&out, "nvidia1"),
            "{out}"
        );
        assert!(out.contains("visible=none"), "{out}");
    }
    let out = with(
        &[
            ("NVIDIA_VISIBLE_DEVICES", "1"),
            ("NVIDIA_DRIVER_CAPABILITIES", "compute"),
        ],
        &probe_ref,
    )
    .ok()
    .stdout();
    assert!(out.contains("devices=1") && lists(&out, "nvidia1"), "{out}");
    // Without NVIDIA_DRIVER_CAPABILITIES: nvidia-smi and NVML, no CUDA
    // driver. The device nodes come all the same.
    let show_parts = "nvidia-smi | head -1; ls /.berth/lib; ls /dev | grep -c nvidia0; cuda-probe";
    let mut c = sb.berth(&["run", &probe_ref, "/bin/sh", "-c", show_parts]);
    c.env("NVIDIA_VISIBLE_DEVICES", "0");
    let out = crate::harness::Out(c.output().unwrap());
    assert_eq!(out.code(), 2, "{}", out.stderr());
    assert_eq!(
        out.stdout(),
        "GPU 0: Fake GPU (UUID: GPU-fake-0000)\nlibnvidia-ml.so.1\n1\n",
        "{}",
        out.stderr()
    );
    assert!(
        out.stderr().contains("dlopen libcuda.so.1"),
        "{}",
        out.stderr()
    );
    // The task's value wins over the image's; a word that is no
    // capability is refused, and says which are.
    let out = with(&[("NVIDIA_DRIVER_CAPABILITIES", "utility")], "cuda-like").ok();
    assert!(out.stdout().contains("Fake GPU"), "{}", out.stdout());
    assert!(
        out.stderr().contains("dlopen libcuda.so.1"),
        "{}",
        out.stderr()
    );
    with(&[("NVIDIA_DRIVER_CAPABILITIES", "compute,gpu")], "cuda-like").fails(
        125,
        "NVIDIA_DRIVER_CAPABILITIES=compute,gpu: \"gpu\" is not a driver capability (known: all, compute, utility",
    );
    // Slurm gave the step GPU 1: "all" and index 0 mean that one.
    let out = with(&[("SLURM_STEP_GPUS", "1")], "cuda-like").ok().stdout();
    assert!(out.contains("devices=1") && lists(&out, "nvidia1"), "{out}");
    assert!(!lists(&out, "nvidia0"), "{out}");
    // A node without a GPU: the CUDA image runs, without a driver.
    fs::write(sb.dir.path().join("no-site-config.toml"), "").unwrap();
    let out = crate::harness::Out(
        sb.berth(&["run", "cuda-like", "cuda-probe"])
            .output()
            .unwrap(),
    );
    assert_eq!(out.code(), 2, "{}", out.stderr());
    assert!(
        out.stderr().contains("dlopen libcuda.so.1"),
        "{}",
        out.stderr()
    );
}

/// CUDA forward compatibility, as NVIDIA's toolkit gives it: an image that
/// ships a driver of a later branch than the node's in
/// /usr/local/cuda/compat (NGC images do) loads that one; an image whose
/// copy is of the node's branch or older loads the node's.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn cuda_forward_compatibility() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    site(&sb, "cdi-empty");
    let probe_ref = probe(&sb);
    // The fake driver is 999.99; the images ship it again under another
    // version, with the soname link cuda-compat packages have.
    for (tag, version) in [("compat-newer", "1000.1"), ("compat-older", "998.1")] {
        let ctx = sb.dir.path().join(tag);
        let compat = ctx.join("compat");
        fs::create_dir_all(&compat).unwrap();
        let file = format!("libcuda.so.{version}");
        fs::copy(fake(&sb).join("lib/libcuda.so.999.99"), compat.join(&file)).unwrap();
        std::os::unix::fs::symlink(&file, compat.join("libcuda.so.1")).unwrap();
        fs::write(
            ctx.join("Dockerfile"),
            format!("FROM {probe_ref}\nCOPY compat /usr/local/cuda/compat\n"),
        )
        .unwrap();
        sb.chown_to_user(&ctx);
        sb.build(tag, &ctx).ok();
    }
    let from = |image: &str| {
        let out = sh(&sb, image, &["--gpus", "all"], "cuda-probe")
            .ok()
            .stdout();
        assert!(out.contains("devices=2"), "{out}");
        out.rsplit("libcuda=")
            .next()
            .unwrap_or("")
            .trim()
            .to_string()
    };
    assert_eq!(from("compat-newer"), "/usr/local/cuda/compat/libcuda.so.1");
    assert_eq!(from("compat-older"), "/.berth/lib/libcuda.so.1");
    // A writable root's cache names it too; where the driver goes on
    // LD_LIBRARY_PATH (here: the cache left out), the image's directory
    // goes before the node's.
    // It keeps it after the image's own ldconfig.
    let out = sh(
        &sb,
        "compat-newer",
        &["--gpus", "all", "--writable", "--fakeroot"],
        "cuda-probe; ldconfig; cuda-probe",
    )
    .ok()
    .stdout();
    assert!(
        out.matches("libcuda=/usr/local/cuda/compat/libcuda.so.1")
            .count()
            == 2,
        "{out}"
    );
    let out = sh(
        &sb,
        "compat-newer",
        &["--gpus", "all", "--umount", "/etc/ld.so.cache"],
        "echo \"$LD_LIBRARY_PATH\"; cuda-probe",
    )
    .ok()
    .stdout();
    assert!(
        out.starts_with("/usr/local/cuda/compat:/.berth/lib\n")
            && out.contains("libcuda=/usr/local/cuda/compat/libcuda.so.1"),
        "{out}"
    );
}

/// `-e NVIDIA_DRIVER_CAPABILITIES` wins over the task's and the image's
/// value, as in Docker; and a run that joins a running container whose
/// root is writable (no loader cache of berth's there) still finds the
/// driver, on LD_LIBRARY_PATH.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn gpu_variables_from_e_and_joined_containers() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    site(&sb, "cdi-empty");
    let img = probe(&sb);
    let mut c = sb.berth(&[
        "run",
        "-e",
        "NVIDIA_DRIVER_CAPABILITIES=utility",
        "--gpus",
        "all",
        &img,
        "sh",
        "-c",
        "ls /.berth/lib",
    ]);
    c.env("NVIDIA_DRIVER_CAPABILITIES", "compute,utility");
    let out = crate::harness::Out(c.output().unwrap()).ok();
    assert_eq!(out.stdout(), "libnvidia-ml.so.1\n");

    // An image whose /etc/ld.so.conf does not read /etc/ld.so.conf.d: in
    // a writable root its own ldconfig would drop the driver from the
    // cache, so the driver goes on LD_LIBRARY_PATH.
    let ctx = sb.dir.path().join("no-conf-d");
    fs::create_dir_all(&ctx).unwrap();
    fs::write(ctx.join("ld.so.conf"), "/usr/local/lib\n").unwrap();
    fs::write(
        ctx.join("Dockerfile"),
        format!("FROM {img}\nCOPY ld.so.conf /etc/ld.so.conf\n"),
    )
    .unwrap();
    sb.chown_to_user(&ctx);
    sb.build("no-conf-d", &ctx).ok();
    let out = sh(
        &sb,
        "no-conf-d",
        &["--gpus", "all", "--writable"],
        "echo \"$LD_LIBRARY_PATH\"; cuda-probe",
    )
    .ok()
    .stdout();
    assert!(
        out.starts_with("/.berth/lib\n") && out.contains("devices=2"),
        "{out}"
    );

    let mut holder = sb
        .berth(&[
            "run",
            "--shared",
            "gk",
            "--writable",
            "--gpus",
            "all",
            &img,
            "sleep",
            "20",
        ])
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !sb.run(&["ps"]).stdout().contains("gk") {
        assert!(
            std::time::Instant::now() < deadline,
            "the shared container did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = sh(
        &sb,
        &img,
        &["--shared", "gk", "--reuse", "any", "--gpus", "all"],
        "cuda-probe",
    )
    .ok()
    .stdout();
    assert!(out.contains("devices=2"), "{out}");
    let _ = holder.kill();
    let _ = holder.wait();
}
