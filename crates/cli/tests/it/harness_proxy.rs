//! The FAULT-INJECTING proxy (tests/setup/faultproxy.py, a fake named
//! so) in front of the real test registry, for the tests that need a
//! registry to fail, stall or answer slowly.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::harness::Sandbox;

/// A free TCP port of this machine (taken and let go: a race with other
/// programs is possible but unlikely in the test fixture).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A running fault proxy; killed when dropped.
pub struct Proxy {
    child: Child,
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    /// Its log: one line per injected fault.
    pub log: PathBuf,
}

impl Proxy {
    /// A proxy injecting `fault` into the first `count` blob GETs (0: all).
    pub fn start(sb: &Sandbox, fault: &str, count: u32) -> Proxy {
        Self::start_stalling(sb, fault, count, 30.0)
    }

    /// [`Proxy::start`] with `--stall SECONDS` (the `stall` and `slow`
    /// faults' wait).
    pub fn start_stalling(sb: &Sandbox, fault: &str, count: u32, stall: f64) -> Proxy {
        let dir = sb.dir.path().join(format!(
            "proxy-{fault}-{count}-{}",
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&dir).unwrap();
        let port_file = dir.join("port");
        let log = dir.join("faults.log");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/setup/faultproxy.py");
        let child = Command::new("python3")
            .arg(script)
            .args([
                "--upstream",
                sb.env.anon(),
                "--fault",
                fault,
                "--count",
                &count.to_string(),
            ])
            .args(["--stall", &stall.to_string()])
            .arg("--port-file")
            .arg(&port_file)
            .arg("--log")
            .arg(&log)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let port = loop {
            if let Ok(p) = fs::read_to_string(&port_file) {
                break p.trim().parse().unwrap();
            }
            assert!(Instant::now() < deadline, "the fault proxy did not start");
            std::thread::sleep(Duration::from_millis(20));
        };
        Proxy { child, port, log }
    }

    /// `berth-test/NAME:latest` through the proxy.
    pub fn image(&self, name: &str) -> String {
        format!("127.0.0.1:{}/berth-test/{name}:latest", self.port)
    }

    /// How many faults it injected.
    pub fn fired(&self) -> usize {
        self.lines().len()
    }

    /// Its log's lines.
    pub fn lines(&self) -> Vec<String> {
        fs::read_to_string(&self.log)
            .map(|t| t.lines().map(str::to_string).collect())
            .unwrap_or_default()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A store of its own, `STORES/NAME` in the sandbox, owned by the test
/// user (pulls through a proxy compare stores that start empty).
pub fn store(sb: &Sandbox, name: &str) -> String {
    let s = sb.dir.path().join("stores").join(name);
    fs::create_dir_all(&s).unwrap();
    sb.chown_to_user(&sb.dir.path().join("stores"));
    s.to_string_lossy().into_owned()
}
