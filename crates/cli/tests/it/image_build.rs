//! `berth build`, `push`, `save`, `tag`: a rootless two-stage build with
//! apt-get, `--chown` and the config instructions; the image runs with
//! berth, is pushed to the test registry and comes back identical through
//! skopeo, podman and `berth import`; a second build is all cache hits; a
//! failing step names its line and leaves nothing behind.

use std::fs;

use crate::harness::Sandbox;
use crate::need_env;

const DOCKERFILE: &str = r#"ARG BASE
FROM $BASE AS build
ENV GREETING="hello from" WHO=berth
RUN apt-get update -qq && apt-get install -y -qq hello >/dev/null && hello -g "apt works"
RUN useradd -u 1234 -m app
RUN rm -rf /usr/share/doc /etc/apt && mkdir /etc/apt && touch /etc/apt/only-this
COPY --chown=app:app app/ /srv/app/
WORKDIR /srv/app
RUN echo "$GREETING $WHO" > greeting.txt && stat -c '%u:%g %n' main.py > owners.txt

FROM build
LABEL org.example.kind=test
EXPOSE 8080
ENTRYPOINT ["/bin/sh", "-c"]
CMD ["cat greeting.txt owners.txt; hello; ls; ls /etc/apt; test -e /usr/share/doc || echo no-doc"]
"#;

fn context(sb: &Sandbox, dockerfile: &str) -> String {
    let ctx = sb.dir.path().join("ctx");
    fs::create_dir_all(ctx.join("app")).unwrap();
    fs::write(ctx.join("Dockerfile"), dockerfile).unwrap();
    fs::write(ctx.join("app/main.py"), "print('hi')\n").unwrap();
    fs::write(ctx.join("app/secret.key"), "no\n").unwrap();
    fs::write(ctx.join(".dockerignore"), "app/*.key\n").unwrap();
    sb.chown_to_user(&ctx);
    ctx.to_string_lossy().to_string()
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn build_run_cache_push_and_pull_back() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let base = format!("BASE={}/berth-test/debian-python:latest", env.anon());
    let ctx = context(&sb, DOCKERFILE);
    let build = |extra: &[&str]| {
        let mut a = vec![
            "build",
            "--tls-verify=false",
            "--build-arg",
            &base,
            "-t",
            "demo:1",
        ];
        a.extend_from_slice(extra);
        a.push(&ctx);
        sb.run(&a).ok()
    };
    let first = build(&[]);
    assert!(first.stderr().contains("apt works"), "{}", first.stderr());
    let id = first.stdout().trim().to_string();
    assert!(id.starts_with("sha256:"), "{id}");
    // It runs at once, with Docker's semantics and the owners of the build.
    let out = sb.run(&["run", "demo:1"]).ok().stdout();
    assert!(
        out.starts_with("hello from berth\n1234:1234 main.py\nHello, world!\n"),
        "{out}"
    );
    assert!(!out.contains("secret.key"), ".dockerignore: {out}");
    // Whiteouts and an opaque directory: what a step removed stays removed.
    assert!(out.ends_with("only-this\nno-doc\n"), "{out}");
    // A second build takes every step from the cache: the same image.
    let again = build(&[]);
    assert!(
        again
            .stderr()
            .contains("all 6 steps are in the build cache"),
        "{}",
        again.stderr()
    );
    assert_eq!(again.stdout().trim(), id);

    // Push; a second push sends nothing. The base's own layer (from the
    // layer cache) is the image's first.
    let dest = format!("{}/berth-test/built-{}:1", env.anon(), std::process::id());
    let pushed = sb
        .run(&["push", "--tls-verify=false", "demo:1", &dest])
        .ok();
    assert!(
        pushed.stderr().contains("7 blobs sent"),
        "{}",
        pushed.stderr()
    );
    let first_layer = |r: &str| -> String {
        let out = std::process::Command::new("skopeo")
            .args(["inspect", "--raw", "--tls-verify=false"])
            .arg(format!("docker://{r}"))
            .output()
            .unwrap();
        let m: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        m["layers"][0]["digest"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let base_ref = base.trim_start_matches("BASE=");
    assert_eq!(first_layer(&dest), first_layer(base_ref));
    let again = sb
        .run(&["push", "--tls-verify=false", "demo:1", &dest])
        .ok();
    assert!(
        again.stderr().contains("0 blobs sent"),
        "{}",
        again.stderr()
    );
    // A registry that wants a login: refused without one, taken with one.
    let auth_dest = format!(
        "{}/berth-test/built-{}:1",
        env.auth_reg(),
        std::process::id()
    );
    sb.run(&["push", "--tls-verify=false", "demo:1", &auth_dest])
        .fails(11, "authentication");
    let creds = format!(
        "{}:{}",
        env.var("BERTH_IT_REG_USER"),
        env.var("BERTH_IT_REG_PASS")
    );
    sb.run(&[
        "push",
        "--tls-verify=false",
        "--creds",
        &creds,
        "demo:1",
        &auth_dest,
    ])
    .ok();
    // skopeo copies it back out of the registry, config and labels intact.
    let layout = sb.dir.path().join("skopeo-copy");
    let copy = std::process::Command::new("skopeo")
        .args([
            "copy",
            "-q",
            "--src-tls-verify=false",
            &format!("docker://{dest}"),
        ])
        .arg(format!("oci:{}:demo", layout.display()))
        .output()
        .unwrap();
    assert!(
        copy.status.success(),
        "{}",
        String::from_utf8_lossy(&copy.stderr)
    );
    let inspect = std::process::Command::new("skopeo")
        .args(["inspect", &format!("oci:{}:demo", layout.display())])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&inspect.stdout);
    assert!(
        inspect.status.success() && text.contains("org.example.kind"),
        "{text}"
    );
    // podman pulls and runs it with the same result.
    if let Some(p) = sb.podman(&["run", "--rm", "--tls-verify=false", &dest]) {
        assert_eq!(p.ok().stdout(), out, "podman and berth differ");
    }
    // berth pulls it back: the same config, so the same image id.
    let other = Sandbox::new(env);
    let back = other.run(&["pull", "-q", "--tls-verify=false", &dest]).ok();
    assert_eq!(back.stdout().trim(), id);

    // save writes an oci-archive that imports as the same image.
    let archive = sb.dir.path().join("demo.tar");
    sb.run(&["save", "demo:1", "-o", &archive.to_string_lossy()])
        .ok();
    let third = Sandbox::new(env);
    let imported = third
        .run(&[
            "import",
            "-q",
            &format!("oci-archive:{}", archive.display()),
            "demo",
        ])
        .ok();
    assert_eq!(imported.stdout().trim(), id);
    // tag names it again.
    sb.run(&["tag", "demo:1", "other:2"]).ok();
    assert_eq!(
        sb.run(&["inspect", "other:2"]).ok().json()["id"],
        id.as_str()
    );
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_failing_step_names_its_line_and_leaves_nothing() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let base = format!("{}/berth-test/layers:latest", env.anon());
    let ctx = context(
        &sb,
        &format!("FROM {base}\nRUN echo one > /tmp/one\nRUN exit 7\n"),
    );
    let out = sb.run(&["build", "--tls-verify=false", "-t", "broken", &ctx]);
    assert_eq!(out.code(), 18, "{}", out.stderr());
    assert!(
        out.stderr().contains("line 3") && out.stderr().contains("exit code 7"),
        "{}",
        out.stderr()
    );
    // The base is stored; nothing else, and no leftovers.
    assert_eq!(sb.run(&["images", "-q"]).ok().stdout().lines().count(), 1);
    assert!(sb.run(&["inspect", "broken"]).code() != 0);
    assert_eq!(sb.store_entries("tmp"), Vec::<String>::new());
    // A Dockerfile error names its line, before anything runs.
    let ctx2 = sb.dir.path().join("ctx2");
    fs::create_dir_all(&ctx2).unwrap();
    fs::write(
        ctx2.join("Dockerfile"),
        format!("FROM {base}\nONBUILD RUN true\n"),
    )
    .unwrap();
    sb.chown_to_user(&ctx2);
    let out = sb.run(&["build", &ctx2.to_string_lossy()]);
    assert_eq!(out.code(), 18, "{}", out.stderr());
    assert!(
        out.stderr().contains("line 2") && out.stderr().contains("ONBUILD"),
        "{}",
        out.stderr()
    );
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn scratch_copy_from_a_stage_add_user_and_the_config_instructions() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let tools = format!("{}/berth-test/layers:latest", env.anon());
    let dockerfile = format!(
        r#"FROM {tools} AS tools
USER root
RUN ["/bin/sh", "-c", "echo exec-form > /tmp/exec.txt"]

FROM scratch
COPY --from=tools /bin/ /bin/
COPY --from=tools /tmp/exec.txt /exec.txt
ADD files.tar.gz /unpacked/
COPY --chown=4321:4321 wdir/ /w/
USER 4321:4321
WORKDIR /w
SHELL ["/bin/sh", "-c"]
RUN id -u > uid.txt && cat /unpacked/hello.txt /exec.txt > copied.txt
VOLUME /data
EXPOSE 80
STOPSIGNAL SIGINT
HEALTHCHECK --interval=5s CMD ["/bin/true"]
ENTRYPOINT ["/bin/cat"]
CMD ["/w/uid.txt", "/w/copied.txt"]
"#
    );
    let ctx = context(&sb, &dockerfile);
    let ctx_path = std::path::Path::new(&ctx);
    fs::create_dir_all(ctx_path.join("wdir")).unwrap();
    fs::write(ctx_path.join("wdir/.keep"), "").unwrap();
    fs::create_dir_all(sb.dir.path().join("tarball")).unwrap();
    fs::write(sb.dir.path().join("tarball/hello.txt"), "hello\n").unwrap();
    let st = std::process::Command::new("tar")
        .arg("czf")
        .arg(ctx_path.join("files.tar.gz"))
        .arg("-C")
        .arg(sb.dir.path().join("tarball"))
        .arg("hello.txt")
        .status()
        .unwrap();
    assert!(st.success());
    sb.chown_to_user(ctx_path);
    sb.run(&["build", "--tls-verify=false", "-t", "fromscratch", &ctx])
        .ok();
    // The image has only what the steps put there, with the owners the
    // build gave: the RUN ran as 4321, in /w.
    let out = sb.run(&["run", "fromscratch"]).ok().stdout();
    assert_eq!(out, "4321\nhello\nexec-form\n");
    let config = sb.run(&["inspect", "fromscratch"]).ok().stdout();
    for wanted in ["SIGINT", "80/tcp", "/data", "Healthcheck", "4321:4321"] {
        assert!(config.contains(wanted), "{wanted} missing: {config}");
    }
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn pulled_images_keep_their_layers_and_saved_ones_go_as_one() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    let reg = env.anon();
    // A container saved as a store image, with a file it wrote.
    sb.run(&[
        "run",
        "--writable",
        "--save",
        "saved/pushed:1",
        &d,
        "sh",
        "-c",
        "echo kept > /saved.txt",
    ])
    .ok();
    let raw = |r: &str| -> serde_json::Value {
        let out = std::process::Command::new("skopeo")
            .args(["inspect", "--raw", "--tls-verify=false", r])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let digests = |m: &serde_json::Value| -> Vec<String> {
        m["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["digest"].as_str().unwrap().to_string())
            .collect()
    };
    // The pulled image goes with its own config and layers: the registry
    // sees the digests every other tool sees, and lends them from the
    // image's own repository (no blob is uploaded).
    let pushed_pulled = format!("{reg}/berth-test/pushed-pulled-{}:1", std::process::id());
    let dest = pushed_pulled.clone();
    let out = sb.run(&["push", "--tls-verify=false", &d, &dest]).ok();
    assert!(
        !out.stderr().contains("one layer of its tree") && out.stderr().contains(" 0 blobs sent"),
        "{}",
        out.stderr()
    );
    let (source, pushed) = (
        raw(&format!("docker://{d}")),
        raw(&format!("docker://{dest}")),
    );
    assert_eq!(digests(&pushed), digests(&source));
    assert_eq!(pushed["config"]["digest"], source["config"]["digest"]);
    // berth save writes the same layers into an oci-archive.
    let archive = sb.dir.path().join("pulled.tar");
    sb.run(&["save", &d, "-o", archive.to_str().unwrap()]).ok();
    let saved = raw(&format!("oci-archive:{}", archive.display()));
    assert_eq!(digests(&saved), digests(&source));
    // The saved container goes as one layer of its tree.
    let dest = format!("{reg}/berth-test/pushed-saved:1");
    let out = sb
        .run(&["push", "--tls-verify=false", "saved/pushed:1", &dest])
        .ok();
    assert!(out.stdout().starts_with("sha256:"), "{}", out.stdout());
    assert!(
        out.stderr().contains("one layer of its tree"),
        "{}",
        out.stderr()
    );
    assert_eq!(digests(&raw(&format!("docker://{dest}"))).len(), 1);
    // So does a pulled image whose layers the store did not keep.
    let bare = Sandbox::new(env);
    let layers = format!("{reg}/berth-test/layers:latest");
    bare.run(&["pull", "--tls-verify=false", "--no-layer-cache", &layers])
        .ok();
    let out = bare
        .run(&[
            "push",
            "--tls-verify=false",
            &layers,
            &format!("{reg}/berth-test/pushed-bare:1"),
        ])
        .ok();
    assert!(
        out.stderr().contains("one layer of its tree"),
        "{}",
        out.stderr()
    );
    // A fresh store pulls them back: the image's config and the saved file.
    let other = Sandbox::new(env);
    let pulled = pushed_pulled;
    let out = other
        .run(&[
            "run",
            "--tls-verify=false",
            &pulled,
            "sh",
            "-c",
            "echo $GREETING; pwd",
        ])
        .ok()
        .stdout();
    assert_eq!(out, "hello from the image\n/srv/app\n");
    let saved = format!("{reg}/berth-test/pushed-saved:1");
    let out = other
        .run(&["run", "--tls-verify=false", &saved, "cat", "/saved.txt"])
        .ok()
        .stdout();
    assert_eq!(out, "kept\n");
}
