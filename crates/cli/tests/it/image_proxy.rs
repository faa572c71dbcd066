//! Pulls through an HTTP proxy (issue 19): a real tinyproxy on loopback.
//! HTTP_PROXY routes the registry's requests through it (its log shows
//! them), NO_PROXY sends them direct, and a proxy that is down gives a
//! network error (exit 12) that names the proxy and the variable.

use std::process::{Child, Command, Stdio};

use crate::harness::*;
use crate::harness_proxy::free_port;
use crate::need_env;

/// tinyproxy on a free loopback port, allowed to reach the registry's
/// port; its log file.
struct Tinyproxy {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
}

impl Tinyproxy {
    fn start(dir: &std::path::Path, registry_port: &str) -> Self {
        let port = free_port();
        let log = dir.join("tinyproxy.log");
        let conf = dir.join("tinyproxy.conf");
        std::fs::write(
            &conf,
            format!(
                "Port {port}\nListen 127.0.0.1\nTimeout 30\nLogFile \"{}\"\nLogLevel Info\n\
                 MaxClients 20\nAllow 127.0.0.1\nConnectPort {registry_port}\n",
                log.display()
            ),
        )
        .unwrap();
        let child = Command::new("tinyproxy")
            .args(["-d", "-c"])
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tinyproxy is missing: sudo bash tests/setup/setup.sh installs it");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "tinyproxy did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Tinyproxy { child, port, log }
    }

    /// The requests it forwarded (lines of its log).
    fn requests(&self) -> usize {
        let log = std::fs::read(&self.log).unwrap_or_default();
        String::from_utf8_lossy(&log)
            .lines()
            .filter(|l| l.contains("Request (file descriptor"))
            .count()
    }
}

impl Drop for Tinyproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn pulls_go_through_http_proxy_unless_no_proxy_says_otherwise() {
    let env = need_env!();
    let reg = env.anon();
    let reg_port = reg.rsplit(':').next().unwrap();
    let image = format!("{reg}/berth-test/debian-python:latest");
    let dir = tempfile::tempdir().unwrap();
    let proxy = Tinyproxy::start(dir.path(), reg_port);
    let url = format!("http://127.0.0.1:{}", proxy.port);

    let mut sb = Sandbox::new(env);
    sb.extra_env.push(("HTTP_PROXY".into(), url.clone()));
    sb.run(&["pull", "-q", "--tls-verify=false", &image]).ok();
    let through = proxy.requests();
    assert!(
        through >= 2,
        "the manifest and the blob went through: {through}"
    );

    // NO_PROXY: direct, nothing more in the proxy's log.
    let mut direct = Sandbox::new(env);
    direct.extra_env.push(("HTTP_PROXY".into(), url));
    direct
        .extra_env
        .push(("NO_PROXY".into(), "localhost,127.0.0.1".into()));
    direct
        .run(&["pull", "-q", "--tls-verify=false", &image])
        .ok();
    assert_eq!(proxy.requests(), through);

    // A proxy that is down: the error names it and the variable.
    let mut down = Sandbox::new(env);
    down.extra_env.push((
        "http_proxy".into(),
        format!("http://127.0.0.1:{}", free_port()),
    ));
    let err = down
        .run(&["pull", "--tls-verify=false", &image])
        .fails(12, "the request went through the proxy http://127.0.0.1:")
        .stderr();
    assert!(
        err.contains("(http_proxy)") && err.contains("NO_PROXY"),
        "{err}"
    );
}
