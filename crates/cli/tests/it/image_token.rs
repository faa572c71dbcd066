//! `berth pull` and `berth login` against the bearer-token registry of
//! `tests/setup/setup.sh`: docker-registry on `BERTH_IT_REG_TOKEN` sends
//! clients to `token_server.py`, which hands user `berth` a JWT for the
//! requested scope, anonymous clients a token with no access, and answers
//! 401 to a wrong password.

use std::fs;

use crate::harness::{Env, Sandbox};
use crate::need_env;

/// The token registry; a fixture env that predates it fails the test
/// (re-run setup.sh).
fn token_registry(env: &'static Env) -> &'static str {
    env.var("BERTH_IT_REG_TOKEN")
}

fn creds(env: &Env) -> String {
    format!(
        "{}:{}",
        env.var("BERTH_IT_REG_USER"),
        env.var("BERTH_IT_REG_PASS")
    )
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn token_auth_pull_with_creds() {
    let env = need_env!();
    let reg = token_registry(env);
    let sb = Sandbox::new(env);
    let r = format!("{reg}/berth-test/layers");
    let id = sb
        .run(&[
            "pull",
            "-q",
            "--tls-verify=false",
            "--creds",
            &creds(env),
            &r,
        ])
        .ok()
        .stdout()
        .trim()
        .to_string();
    assert!(
        id.starts_with("sha256:") && id.len() == 71,
        "pull printed {id:?}"
    );
    // setup.sh pushed the same image, digests preserved, to both registries.
    let anon = sb.pull("layers").stdout().trim().to_string();
    assert_eq!(id, anon, "the token registry served a different image");
    let want = format!("{r}:latest");
    let names = sb.run(&["inspect", &id]).ok().json()["names"].clone();
    assert!(
        names
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str() == Some(want.as_str())),
        "{names}"
    );
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn token_auth_refuses_anonymous_and_wrong_password() {
    let env = need_env!();
    let reg = token_registry(env);
    let sb = Sandbox::new(env);
    let r = format!("{reg}/berth-test/layers");
    // Anonymous: the token server's token grants nothing, the registry
    // answers 401 insufficient_scope.
    sb.run(&["pull", "--tls-verify=false", &r])
        .fails(11, "authentication failed");
    // Wrong password: the token server itself answers 401.
    let wrong = format!("{}:wrong-password", env.var("BERTH_IT_REG_USER"));
    sb.run(&["pull", "--tls-verify=false", "--creds", &wrong, &r])
        .fails(11, "authentication failed");
    assert!(sb.store_entries("images").is_empty());
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn token_auth_login_pull_logout() {
    let env = need_env!();
    let reg = token_registry(env);
    let sb = Sandbox::new(env);
    let r = format!("{reg}/berth-test/layers");
    let auth_file = sb.dir.path().join("run/containers/auth.json");
    // Wrong password: refused at login, nothing stored.
    sb.login(reg, "wrong-password")
        .fails(11, "authentication failed");
    assert!(
        !fs::read_to_string(&auth_file)
            .unwrap_or_default()
            .contains(reg),
        "a failed login stored credentials"
    );
    sb.login(reg, env.var("BERTH_IT_REG_PASS")).ok();
    let auth = fs::read_to_string(&auth_file).unwrap();
    assert!(auth.contains(reg), "{auth}");
    let id = sb
        .run(&["pull", "-q", "--tls-verify=false", &r])
        .ok()
        .stdout();
    assert!(id.trim().starts_with("sha256:"), "pull printed {id:?}");
    sb.run(&["logout", reg]).ok();
    sb.run(&["rmi", &r]).ok();
    sb.run(&["pull", "--tls-verify=false", &r])
        .fails(11, "berth login");
}

/// Identity tokens (docker's `identitytoken` in the auth file, a credential
/// helper's user `<token>`): exchanged at the token server with OAuth2's
/// refresh-token grant (a POST, never a GET with Basic credentials); a
/// token the server does not know is refused with exit 11.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn identity_tokens_from_the_auth_file_and_a_helper() {
    let env = need_env!();
    let reg = token_registry(env);
    let mut sb = Sandbox::new(env);
    let r = format!("{reg}/berth-test/layers");
    let run = sb.dir.path().join("run");
    let auth_file = run.join("containers/auth.json");
    fs::create_dir_all(auth_file.parent().unwrap()).unwrap();
    let write = |text: String| {
        fs::write(&auth_file, text).unwrap();
        sb.chown_to_user(&run);
    };
    let entry =
        |token: &str| format!(r#"{{"auths":{{"{reg}":{{"auth":"","identitytoken":"{token}"}}}}}}"#);
    write(entry("berth-test-identity-token"));
    sb.run(&["pull", "-q", "--tls-verify=false", &r]).ok();
    sb.run(&["rmi", &r]).ok();
    write(entry("not-the-token"));
    sb.run(&["pull", "--tls-verify=false", &r])
        .fails(11, "invalid refresh token");
    // A credential helper that answers with an identity token.
    write("{}".to_string());
    sb.credential_helper(
        "tokens",
        "printf '{\"ServerURL\":\"%s\",\"Username\":\"<token>\",\"Secret\":\"berth-test-identity-token\"}\\n' \"$server\"\n",
    );
    sb.docker_config(&format!("{{\"credHelpers\":{{\"{reg}\":\"tokens\"}}}}"));
    sb.run(&["pull", "-q", "--tls-verify=false", &r]).ok();
}
