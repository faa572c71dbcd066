//! `berth pull` against the test registries, checked against umoci's oracle.

use std::fs;

use crate::harness::{unsquash, Sandbox};
use crate::need_env;
use crate::tree::{assert_same, snapshot};

fn dropped_devices(env: &crate::harness::Env, image: &str) -> Vec<String> {
    fs::read_to_string(env.fixtures().join("dropped-devices.txt"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .filter(|(i, _)| *i == image)
        .map(|(_, p)| p.to_string())
        .collect()
}

/// Pulls `name` and compares its squashfs tree with the oracle rootfs;
/// returns the sandbox and where the tree was unpacked.
fn pull_and_compare(
    env: &'static crate::harness::Env,
    name: &str,
) -> (Sandbox, std::path::PathBuf) {
    let sb = Sandbox::new(env);
    let out = sb.pull(name);
    let id = out.stdout().trim().to_string();
    assert!(
        id.starts_with("sha256:") && id.len() == 71,
        "pull printed {id:?}"
    );
    let reference = format!("{}/berth-test/{name}", env.anon());
    let sqfs = sb.squashfs_of(&reference);
    let dest = sb.dir.path().join("unpacked");
    unsquash(&sqfs, &dest);
    let owners = env.user.is_some();
    let skip = dropped_devices(env, name);
    let skip: Vec<&str> = skip.iter().map(String::as_str).collect();
    let got = snapshot(&dest, owners, &[]);
    let want = snapshot(&env.fixtures().join("oracle").join(name), owners, &skip);
    assert_same(&got, &want, name);
    (sb, dest)
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn layers_image_equals_umoci_oracle() {
    let env = need_env!();
    let _ = pull_and_compare(env, "layers");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn hostfiles_image_equals_umoci_oracle() {
    let env = need_env!();
    let _ = pull_and_compare(env, "hostfiles");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn docker_schema2_image_equals_umoci_oracle() {
    let env = need_env!();
    let _ = pull_and_compare(env, "docker-v2s2");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn multiarch_index_picks_host_platform() {
    let env = need_env!();
    let _ = pull_and_compare(env, "multiarch");
}

fn platform_file(sb: &Sandbox, image: &str) -> String {
    let sqfs = sb.squashfs_of(image);
    let out = std::process::Command::new("rdsquashfs")
        .arg("-c")
        .arg("/platform")
        .arg(&sqfs)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn platform_flag_selects_from_index() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let r = format!("{}/berth-test/multiarch:latest", env.anon());
    for p in ["linux/arm64", "linux/arm/v7", "linux/amd64"] {
        let id = sb
            .run(&["pull", "-q", "--tls-verify=false", "--platform", p, &r])
            .ok()
            .stdout();
        assert_eq!(platform_file(&sb, id.trim()), p);
    }
    sb.run(&[
        "pull",
        "--tls-verify=false",
        "--platform",
        "linux/s390x",
        &r,
    ])
    .fails(
        10,
        "no image for platform linux/s390x (the index has: linux/amd64, linux/arm64",
    );
    sb.run(&["pull", "--tls-verify=false", "--platform", "linux", &r])
        .fails(2, "os/arch");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn pull_by_digest_and_quiet_output() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let r = format!("{}/berth-test/layers", env.anon());
    let out = sb.run(&["pull", "--quiet", "--tls-verify=false", &r]).ok();
    assert!(out.stderr().is_empty(), "--quiet printed: {}", out.stderr());
    let id = out.stdout().trim().to_string();
    let manifest = sb.run(&["inspect", &r]).ok().json()["manifest_digest"]
        .as_str()
        .unwrap()
        .to_string();
    let pinned = format!("{r}@{manifest}");
    let again = sb.run(&["pull", "-q", "--tls-verify=false", &pinned]).ok();
    assert_eq!(again.stdout().trim(), id);
    let names = sb.run(&["inspect", &id]).ok().json()["names"].clone();
    assert!(
        names
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str() == Some(&pinned)),
        "{names}"
    );
    let missing = format!("{r}@sha256:{}", "0".repeat(64));
    sb.run(&["pull", "--tls-verify=false", &missing])
        .fails(10, "not found");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn plain_http_needs_tls_verify_false_or_config() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let r = format!("{}/berth-test/layers", env.anon());
    let out = sb.run(&["pull", &r]);
    assert_eq!(out.code(), 12, "{}", out.stderr());
    assert!(
        out.stderr().contains("--tls-verify=false"),
        "{}",
        out.stderr()
    );
    // An insecure_registries entry in the user's config allows it.
    let cfg = sb.home().join(".config/berth");
    fs::create_dir_all(&cfg).unwrap();
    fs::write(
        cfg.join("berth.toml"),
        format!("insecure_registries = [\"{}\"]\n", env.anon()),
    )
    .unwrap();
    sb.chown_to_user(&sb.home());
    sb.run(&["pull", "-q", &r]).ok();
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_node_without_ca_certificates_pulls_over_plain_http_and_says_what_https_needs() {
    // No trust store (SSL_CERT_FILE and SSL_CERT_DIR name empty ones, as a
    // node without ca-certificates has): the plain-HTTP registry needs
    // none, and a registry over HTTPS is a clear error (exit 16), never
    // the HTTP client's panic (oci-client's try_from built a default
    // client too: vendor/oci-client/BERTH-PATCH.md).
    let env = need_env!();
    let sb = Sandbox::new(env);
    let empty = sb.dir.path().join("no-certs");
    fs::create_dir_all(&empty).unwrap();
    fs::write(empty.join("bundle.pem"), "").unwrap();
    let pull = |args: &[&str]| {
        let mut c = sb.berth(args);
        c.env("SSL_CERT_FILE", empty.join("bundle.pem"))
            .env("SSL_CERT_DIR", &empty);
        crate::harness::Out(c.output().unwrap())
    };
    let r = format!("{}/berth-test/layers", env.anon());
    pull(&["pull", "-q", "--tls-verify=false", &r]).ok();
    let out = pull(&["pull", "-q", &r]).fails(16, "install the system's CA certificates");
    assert!(!out.stderr().contains("panicked"), "{}", out.stderr());
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn errors_have_distinct_codes() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    sb.run(&[
        "pull",
        "--tls-verify=false",
        &format!("{}/berth-test/no-such-image", env.anon()),
    ])
    .fails(10, "not found in the registry");
    sb.run(&[
        "pull",
        "--tls-verify=false",
        &format!("{}/berth-test/layers:no-such-tag", env.anon()),
    ])
    .fails(10, "not found");
    sb.run(&["pull", "Not/A Valid:ref"])
        .fails(2, "invalid image reference");
    // Nothing listens on port 1: a network error after retries.
    sb.run(&["pull", "--tls-verify=false", "127.0.0.1:1/x/y"])
        .fails(12, "127.0.0.1:1");
    assert!(sb.store_entries("images").is_empty());
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn basic_auth_login_pull_logout() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let reg = env.auth_reg();
    let r = format!("{reg}/berth-test/layers");
    sb.run(&["pull", "--tls-verify=false", &r])
        .fails(11, "authentication failed");
    // Wrong password: refused at login, nothing stored.
    let out = sb.login(reg, "wrong");
    assert_eq!(out.code(), 11, "{}", out.stderr());
    sb.login(reg, env.var("BERTH_IT_REG_PASS")).ok();
    let auth = fs::read_to_string(sb.dir.path().join("run/containers/auth.json")).unwrap();
    assert!(auth.contains(reg));
    sb.run(&["pull", "-q", "--tls-verify=false", &r]).ok();
    sb.run(&["logout", reg]).ok();
    sb.run(&["rmi", &r]).ok();
    sb.run(&["pull", "--tls-verify=false", &r])
        .fails(11, "berth login");
    // Credentials from ~/.docker/config.json work too.
    use base64_lite::encode;
    let docker = sb.home().join(".docker");
    fs::create_dir_all(&docker).unwrap();
    let token = encode(&format!(
        "{}:{}",
        env.var("BERTH_IT_REG_USER"),
        env.var("BERTH_IT_REG_PASS")
    ));
    fs::write(
        docker.join("config.json"),
        format!("{{\"auths\":{{\"{reg}\":{{\"auth\":\"{token}\"}}}}}}"),
    )
    .unwrap();
    sb.chown_to_user(&sb.home());
    sb.run(&["pull", "-q", "--tls-verify=false", &r]).ok();
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn enroot_credentials_file_with_a_password_command() {
    use std::os::unix::fs::PermissionsExt;
    let env = need_env!();
    let mut sb = Sandbox::new(env);
    let reg = env.auth_reg();
    // A machine without the port matches, as curl's netrc does.
    let host = reg.rsplit_once(':').unwrap().0;
    let r = format!("{reg}/berth-test/layers");
    let dir = sb.home().join(".config/enroot");
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join(".credentials");
    fs::write(
        &file,
        format!(
            "# enroot's format\nmachine {host} login {}\n  password $(printf %s '{}')\n",
            env.var("BERTH_IT_REG_USER"),
            env.var("BERTH_IT_REG_PASS")
        ),
    )
    .unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
    sb.chown_to_user(&sb.home());
    sb.run(&["pull", "-q", "--tls-verify=false", &r]).ok();
    sb.run(&["rmi", &r]).ok();
    // A file others may write does not get its commands run.
    fs::set_permissions(&file, fs::Permissions::from_mode(0o666)).unwrap();
    sb.run(&["pull", "--tls-verify=false", &r])
        .fails(11, "not yours alone");
    // ENROOT_CONFIG_PATH names another directory: its wrong password.
    let other = sb.dir.path().join("enroot-conf");
    fs::create_dir_all(&other).unwrap();
    fs::write(
        other.join(".credentials"),
        format!(
            "machine {reg} login {} password wrong\n",
            env.var("BERTH_IT_REG_USER")
        ),
    )
    .unwrap();
    sb.chown_to_user(&other);
    sb.extra_env
        .push(("ENROOT_CONFIG_PATH".into(), other.display().to_string()));
    sb.run(&["pull", "--tls-verify=false", &r])
        .fails(11, "authentication failed");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn docker_credential_helpers_by_registry_and_for_all() {
    let env = need_env!();
    let mut sb = Sandbox::new(env);
    let reg = env.auth_reg();
    let r = format!("{reg}/berth-test/layers");
    // A helper script speaking the docker-credential-helpers protocol.
    sb.credential_helper(
        "berthtest",
        &format!(
            "if [ \"$server\" = \"{reg}\" ]; then\n\
             printf '{{\"ServerURL\":\"%s\",\"Username\":\"{}\",\"Secret\":\"{}\"}}\\n' \"$server\"\n\
             else echo 'credentials not found in native keychain'; exit 1; fi\n",
            env.var("BERTH_IT_REG_USER"),
            env.var("BERTH_IT_REG_PASS")
        ),
    );
    sb.docker_config(&format!("{{\"credHelpers\":{{\"{reg}\":\"berthtest\"}}}}"));
    sb.run(&["pull", "-q", "--tls-verify=false", &r]).ok();
    sb.run(&["rmi", &r]).ok();
    sb.docker_config("{\"credsStore\":\"berthtest\"}");
    sb.run(&["pull", "-q", "--tls-verify=false", &r]).ok();
    sb.run(&["rmi", &r]).ok();
    sb.docker_config("{\"credsStore\":\"missing\"}");
    sb.run(&["pull", "--tls-verify=false", &r]).fails(
        11,
        "cannot run the credential helper docker-credential-missing",
    );
}

/// A tiny base64 encoder, to keep test dependencies small.
mod base64_lite {
    pub fn encode(s: &str) -> String {
        const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let b = s.as_bytes();
        let mut out = String::new();
        for chunk in b.chunks(3) {
            let n = (chunk[0] as u32) << 16
                | (*chunk.get(1).unwrap_or(&0) as u32) << 8
                | *chunk.get(2).unwrap_or(&0) as u32;
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn concurrent_pulls_convert_once() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let r = format!("{}/berth-test/hostfiles", env.anon());
    let children: Vec<_> = (0..16)
        .map(|_| {
            sb.berth(&["pull", "--tls-verify=false", &r])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let mut ids = std::collections::BTreeSet::new();
    let mut conversions = 0;
    for o in &outs {
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        ids.insert(String::from_utf8_lossy(&o.stdout).trim().to_string());
        if err.contains("Writing squashfs") {
            conversions += 1;
        }
    }
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(
        conversions, 1,
        "the image was converted {conversions} times"
    );
    assert_eq!(sb.store_entries("images").len(), 1);
    sb.assert_store_tmp_empty();
}

/// The images of tests/setup/producer_images.sh (umoci insert with its root
/// entry "/" and unpadded end, tar with `.` and absolute names, a layer
/// writing below a merged-/usr base's symlinks without listing them,
/// buildah) pull and equal umoci's unpacking of the same image, root
/// directory included.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn images_of_other_producers_equal_umoci_oracle() {
    let env = need_env!();
    let list = fs::read_to_string(env.fixtures().join("producers.txt")).unwrap();
    let names: Vec<&str> = list.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(names.len() >= 5, "only {names:?} in producers.txt");
    for name in names {
        let (_sb, dest) = pull_and_compare(env, name);
        let mode = |p: &std::path::Path| {
            use std::os::unix::fs::MetadataExt;
            fs::metadata(p).unwrap().mode()
        };
        assert_eq!(
            mode(&dest),
            mode(&env.fixtures().join("oracle").join(name)),
            "{name}: the root directory's mode"
        );
    }
}

/// What landed below the base's symlinks is where the image's programs
/// look for it, through the symlinks and in /usr.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn writes_through_merged_usr_symlinks_are_seen_through_them() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    for (name, script, want) in [
        (
            "producer-merged-usr",
            "cat /lib/newfile /usr/lib/newfile /bin/newtool /usr/lib/base.txt",
            "written through /lib\nwritten through /lib\nnew tool\nfrom the base\n",
        ),
        (
            "producer-buildah",
            "hello && cat /lib/through-lib /lib/made-through-lib/file",
            "Hello, world!\nwritten through /lib\ndeep\n",
        ),
    ] {
        let img = format!("{}/berth-test/{name}", env.anon());
        sb.pull(name);
        let out = sb.run(&["run", &img, "sh", "-c", script]).ok();
        assert_eq!(out.stdout(), want, "{name}");
    }
}

/// `podman build` then `podman save` (docker-archive): imported, it equals
/// umoci's unpacking of the same image and runs.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn podman_saved_archive_imports_and_equals_umoci_oracle() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let archive = env.fixtures().join("producer-podman.docker-archive.tar");
    sb.run(&[
        "import",
        &format!("docker-archive:{}", archive.display()),
        "producer-podman",
    ])
    .ok();
    let dest = sb.dir.path().join("unpacked");
    unsquash(&sb.squashfs_of("producer-podman"), &dest);
    let owners = env.user.is_some();
    let got = snapshot(&dest, owners, &[]);
    let want = snapshot(&env.fixtures().join("oracle/producer-podman"), owners, &[]);
    assert_same(&got, &want, "producer-podman");
    let out = sb.run(&["run", "producer-podman"]).ok();
    assert_eq!(out.stdout(), "written through /lib\n");
}
