//! Crash consistency: `berth pull` and `berth import` killed with SIGKILL
//! at random moments (seeded; the seed is printed), then the store is
//! checked: only complete images, every image file matching its recorded
//! digest (`berth check`), no leftovers after `berth prune`, and the next
//! pull and import work. `BERTH_RELIABILITY_KILLS` sets the number of kills
//! (20 here; the reliability run uses 100), `BERTH_RELIABILITY_SEED` repeats
//! a run.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::Sandbox;
use crate::need_env;

/// xorshift64*: enough randomness for kill moments, and repeatable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

pub fn scale(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn complete_images_only(sb: &Sandbox, when: &str) {
    for e in sb.store_entries("images") {
        let dir = sb.store().join("images").join(&e);
        assert!(
            dir.join("meta.json").is_file() && dir.join("image.sqfs").is_file(),
            "partial image {e} {when}"
        );
    }
    // The layer cache holds whole blobs only: each file's content has its name.
    for e in sb.store_entries("layers/sha256") {
        use sha2::Digest;
        let bytes = std::fs::read(sb.store().join("layers/sha256").join(&e)).unwrap();
        let hex: String = sha2::Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(hex, e, "a partial blob in the layer cache {when}");
    }
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn kills_at_random_moments_leave_a_consistent_store() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let kills = scale("BERTH_RELIABILITY_KILLS", 20);
    let seed = scale(
        "BERTH_RELIABILITY_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    ) | 1;
    eprintln!("crash loop: {kills} kills, BERTH_RELIABILITY_SEED={seed}");
    let mut rng = Rng(seed);
    let reference = format!("{}/berth-test/debian-python:latest", env.anon());
    // An archive of the same image, for imports (skopeo, as root).
    let archive = sb.dir.path().join("debian.docker-archive.tar");
    let st = Command::new("skopeo")
        .args([
            "--insecure-policy",
            "copy",
            "--quiet",
            "--src-tls-verify=false",
        ])
        .arg(format!("docker://{reference}"))
        .arg(format!("docker-archive:{}", archive.display()))
        .status()
        .unwrap();
    assert!(st.success());
    sb.chown_to_user(&archive);
    let source = format!("docker-archive:{}", archive.display());
    // How long each takes undisturbed, in the state the loop starts from
    // (the image removed, its blobs kept): the quicker of two runs, as
    // other tests load the machine at the same time. Kill moments fall in
    // [0, 1.2 x that].
    let mut full = [Duration::MAX; 2];
    for (i, args) in [
        vec!["pull", "-q", "--tls-verify=false", reference.as_str()],
        vec!["import", "-q", source.as_str(), "imported"],
    ]
    .iter()
    .enumerate()
    {
        for _ in 0..2 {
            let t = Instant::now();
            sb.run(args).ok();
            full[i] = full[i].min(t.elapsed());
            sb.run(&[
                "rmi",
                if i == 0 {
                    reference.as_str()
                } else {
                    "imported"
                },
            ])
            .ok();
        }
    }
    eprintln!("undisturbed: pull {:?}, import {:?}", full[0], full[1]);
    let mut killed_before_done = 0;
    for k in 0..kills {
        let import = k % 2 == 1;
        let args: Vec<&str> = if import {
            vec!["import", "-q", &source, "imported"]
        } else {
            vec!["pull", "-q", "--tls-verify=false", &reference]
        };
        let window = full[usize::from(import)].as_millis() as u64 * 12 / 10;
        let at = Duration::from_millis(rng.below(window));
        let mut child = sb.berth(&args).spawn().unwrap();
        std::thread::sleep(at);
        if child.try_wait().unwrap().is_none() {
            killed_before_done += 1;
        } else if k % 3 != 0 || k == 0 {
            // Done before the kill, from no image: the machine is quicker
            // now than when measured; aim the next kills of it earlier.
            let slot = &mut full[usize::from(import)];
            *slot = (*slot * 3 / 4).max(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        complete_images_only(&sb, &format!("after kill {k} at {at:?}"));
        // Every third kill leaves what the last one left for the next (a
        // pull resuming after a crash); the others start from no image,
        // so that kills hit whole conversions.
        if k % 3 != 2 {
            let _ = sb.run(&["rmi", &reference]);
            let _ = sb.run(&["rmi", "imported"]);
        }
    }
    eprintln!("{killed_before_done} of {kills} kills hit an unfinished command");
    sb.run(&["check"]).ok();
    sb.run(&["prune"]).ok();
    sb.assert_store_tmp_empty();
    sb.run(&["pull", "-q", "--tls-verify=false", &reference])
        .ok();
    sb.run(&["import", "-q", &source, "imported"]).ok();
    sb.run(&["check"]).ok();
    assert!(
        killed_before_done * 2 >= kills,
        "most kills should land mid-way"
    );
}

/// Two "nodes" on one shared store: each pull in its own mount namespace
/// (`unshare -m`, then the test user), both at once. One converts, the
/// other finds the image; both succeed with the same id.
#[test]
#[cfg_attr(
    not(berth_it_root),
    ignore = "needs root and the test fixtures: sudo bash tests/setup/setup.sh, then the tests as root"
)]
fn two_nodes_pulling_one_image_into_a_shared_store_convert_once() {
    let env = need_env!();
    // Root, for unshare -m.
    let (uid, gid, _) = env.test_user().clone();
    let sb = Sandbox::new(env);
    let reference = format!("{}/berth-test/debian-python:latest", env.anon());
    let berth = sb.env.berth.to_string_lossy().into_owned();
    let nodes: Vec<_> = (0..2)
        .map(|_| {
            let mut c = Command::new("unshare");
            c.args(["--mount", "--propagation", "private", "setpriv"])
                .arg(format!("--reuid={uid}"))
                .arg(format!("--regid={gid}"))
                .args([
                    "--clear-groups",
                    &berth,
                    "pull",
                    "--tls-verify=false",
                    &reference,
                ]);
            // The sandbox's environment (store, home, runtime directory).
            c.env_clear().envs(
                sb.berth(&[])
                    .get_envs()
                    .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned()))),
            );
            c.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut ids = std::collections::BTreeSet::new();
    let mut conversions = 0;
    for n in nodes {
        let o = n.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "{err}");
        ids.insert(String::from_utf8_lossy(&o.stdout).trim().to_string());
        conversions += usize::from(err.contains("Writing squashfs"));
    }
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(conversions, 1, "converted {conversions} times");
    sb.run(&["check"]).ok();
    sb.assert_store_tmp_empty();
}
