//! The MPI bind model: `mpiexec.hydra -n 4 berth run ...` with the image's
//! own MPICH (hybrid model) and with the host's MPICH injected (`--mpi`);
//! ABI refusals (an Open MPI image, an image newer than the host under
//! `abi = "full"`). The host MPI is Debian's MPICH; the images come from
//! tests/setup/mpi_images.sh.

use std::fs;
use std::path::Path;

use crate::harness::{Out, Sandbox};
use crate::need_env;

const HOST_LIBMPI: &str = "/usr/lib/x86_64-linux-gnu/libmpich.so.12";

fn pull(sb: &Sandbox, name: &str) -> String {
    let r = format!("{}/berth-test/{name}:latest", sb.env.anon());
    sb.run(&["pull", "-q", "--tls-verify=false", &r]).ok();
    r
}

/// The site's MPI module: the host's MPICH, under `abi`.
fn mpi_module(sb: &Sandbox, abi: &str) {
    let mods = sb.dir.path().join("modules.d");
    fs::create_dir_all(&mods).unwrap();
    fs::write(
        mods.join("mpich.toml"),
        format!(
            "description = \"host MPICH\"\nwhen = \"mpi\"\n[mpi]\nlibraries = [\"{HOST_LIBMPI}\"]\nabi = \"{abi}\"\n[env.set]\nBERTH_TEST_MPI = \"host\"\n"
        ),
    )
    .unwrap();
    sb.chown_to_user(&mods);
}

/// `mpiexec.hydra -n N berth run ARGS...` as the test user.
fn mpiexec(sb: &Sandbox, n: usize, args: &[&str]) -> Out {
    let berth = sb.env.berth.to_string_lossy().into_owned();
    let np = n.to_string();
    let mut all = vec!["-n", np.as_str(), berth.as_str(), "run"];
    all.extend_from_slice(args);
    Out(sb
        .command(Path::new("/usr/bin/mpiexec.hydra"), &all)
        .output()
        .unwrap())
}

fn ranks(out: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = out.lines().filter(|l| l.starts_with("rank ")).collect();
    lines.sort();
    lines
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn hybrid_model_uses_the_images_mpi() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let img = pull(&sb, "mpich");
    let out = mpiexec(&sb, 4, &[&img, "mpi-probe"]).ok().stdout();
    let r = ranks(&out);
    assert_eq!(r.len(), 4, "{out}");
    for (i, line) in r.iter().enumerate() {
        assert!(line.starts_with(&format!("rank {i} of 4 sum 10 ")), "{out}");
        // The image's own library, where its loader finds it (/lib is
        // /usr/lib in a merged-/usr image).
        assert!(
            line.contains("x86_64-linux-gnu/libmpich.so.12 ") && !line.contains("/.berth/"),
            "not the image's MPI: {out}"
        );
    }
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn mpi_flag_injects_the_hosts_mpi() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    mpi_module(&sb, "full");
    let img = pull(&sb, "mpich");
    let out = mpiexec(&sb, 4, &["--mpi", &img, "mpi-probe"]).ok().stdout();
    let r = ranks(&out);
    assert_eq!(r.len(), 4, "{out}");
    for line in &r {
        assert!(line.contains(" sum 10 "), "{out}");
        assert!(
            line.contains("libmpi /.berth/lib/libmpich.so.12 "),
            "not the host's MPI: {out}"
        );
    }
    // The plan shows the library, its closure and the check.
    let j = sb
        .run(&["run", "--dry-run", "--mpi", &img, "mpi-probe"])
        .ok()
        .json();
    let libs: Vec<&str> = j["injected"]["libraries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    for name in [
        "libmpich.so.12",
        "libmpi.so.12",
        "libhwloc.so.15",
        "libucp.so.0",
    ] {
        assert!(libs.contains(&name), "{name} not injected: {libs:?}");
    }
    assert!(!libs.iter().any(|l| l.starts_with("libc.so")), "{libs:?}");
    assert_eq!(j["injected"]["mpi"]["host_version"]["major"], 12);
    assert!(j["env"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e == "BERTH_TEST_MPI=host"));
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn incompatible_images_are_refused_naming_both() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    mpi_module(&sb, "full");
    let ompi = pull(&sb, "openmpi-stub");
    let out = sb
        .run(&["run", "--mpi", &ompi, "true"])
        .fails(125, "libmpi.so.40 40.30.2 (Open MPI ABI)");
    assert!(out.stderr().contains("(MPICH ABI)"), "{}", out.stderr());
    assert!(
        out.stderr().contains("different ABI majors"),
        "{}",
        out.stderr()
    );
    // Without --mpi the image runs with its own (hybrid model).
    sb.run(&["run", &ompi, "true"]).ok();

    let newer = pull(&sb, "mpich-newer");
    sb.run(&["run", "--mpi", &newer, "true"])
        .fails(125, "older than the image's 9");
    // abi = "major" accepts it.
    mpi_module(&sb, "major");
    sb.run(&["run", "--mpi", &newer, "true"]).ok();
    // An image without any MPI.
    let plain = pull(&sb, "debian-python");
    sb.run(&["run", "--mpi", &plain, "true"])
        .fails(125, "the image has no MPI library");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn the_launcher_does_not_wait_for_the_keeper() {
    // The first rank starts the image's keeper, which outlives the job
    // step by its idle time. It must not hold the launcher's PMI socket
    // (inherited by berth) open: mpiexec would wait for it to close.
    let env = need_env!();
    let mut sb = Sandbox::new(env);
    sb.extra_env
        .push(("BERTH_KEEPER_IDLE".to_string(), "20".to_string()));
    let img = pull(&sb, "mpich");
    let t = std::time::Instant::now();
    let out = mpiexec(&sb, 2, &[&img, "mpi-probe"]).ok().stdout();
    assert_eq!(ranks(&out).len(), 2, "{out}");
    assert!(
        t.elapsed() < std::time::Duration::from_secs(15),
        "mpiexec took {:?}: the keeper held its descriptors",
        t.elapsed()
    );
}
