//! The hand-shake between berth and the container process around the
//! hooks of the stages before the command starts.

/// The hand-shake between berth and the container process around the
/// hooks of the stages before the command starts: the container process
/// says `ready PID` once its root is in place; berth runs createRuntime
/// and createContainer hooks, then sends the variables they set and `go`.
pub struct Sync {
    to_parent: (std::os::fd::OwnedFd, std::os::fd::OwnedFd),
    to_child: (std::os::fd::OwnedFd, std::os::fd::OwnedFd),
}

fn pipe() -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(std::io::Error::from)
}

/// Everything until the other side closes its end: each side writes its
/// one message and closes, so end of file is the end of the message (or
/// the other side's death).
fn read_to_end(fd: &std::os::fd::OwnedFd) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match rustix::io::read(fd, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Sync {
    /// Two pipes, before the fork.
    pub fn new() -> std::io::Result<Sync> {
        Ok(Sync {
            to_parent: pipe()?,
            to_child: pipe()?,
        })
    }

    /// In the container process: says it is ready, waits for berth, and
    /// returns the variables the hooks set; `None` if berth stopped the
    /// start (a hook failed).
    pub fn child_ready(self, pid: i32) -> Option<Vec<(String, String)>> {
        let Sync {
            to_parent: (_r, w),
            to_child: (r, _w),
        } = self;
        drop(_w);
        let _ = rustix::io::write(&w, format!("ready {pid}\n").as_bytes());
        drop(w);
        let text = read_to_end(&r);
        let mut env = Vec::new();
        for line in text.lines() {
            if line == "go" {
                return Some(env);
            }
            if let Some((k, v)) = line.strip_prefix("env ").and_then(|kv| kv.split_once('=')) {
                env.push((k.to_string(), v.to_string()));
            }
        }
        None
    }

    /// In berth, right after the fork: keeps berth's ends only (so a
    /// container process that dies early reads as end of file).
    pub fn parent_side(self) -> ParentEnd {
        let Sync {
            to_parent: (from_child, w),
            to_child: (r, to_child),
        } = self;
        drop(w);
        drop(r);
        ParentEnd {
            from_child,
            to_child,
        }
    }
}

/// berth's ends of a [`Sync`].
pub struct ParentEnd {
    from_child: std::os::fd::OwnedFd,
    to_child: std::os::fd::OwnedFd,
}

impl ParentEnd {
    /// Waits for the container process; its pid, or `None` if it ended
    /// before it was ready.
    pub fn wait(&self) -> Option<i32> {
        let text = read_to_end(&self.from_child);
        text.trim().strip_prefix("ready ")?.parse().ok()
    }

    /// Lets the container process go on with these variables.
    pub fn go(self, env: &[(String, String)]) {
        let mut msg = String::new();
        for (k, v) in env {
            // One variable per line: a value with a newline cannot pass.
            if !v.contains('\n') && !k.contains(['\n', '=']) {
                msg.push_str(&format!("env {k}={v}\n"));
            }
        }
        msg.push_str("go\n");
        let _ = rustix::io::write(&self.to_child, msg.as_bytes());
    }
}
