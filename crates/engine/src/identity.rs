//! Who the caller is inside the container: the id mode, home and user
//! name there, the variables berth sets for them, and the `/etc/passwd`
//! and `/etc/group` lines added to the image's.

use berth_runtime::container::Identity;
use berth_runtime::IdMode;

use crate::caller::Caller;
use crate::error::{Error, Result};

/// Real root, root with `--fakeroot`, or themself.
pub fn id_mode(caller: &Caller, fakeroot: bool) -> IdMode {
    if caller.is_root() {
        IdMode::HostRoot
    } else if fakeroot {
        IdMode::FakeRoot
    } else {
        IdMode::Identity
    }
}

/// The caller as the container sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inside {
    /// `HOME` inside.
    pub home: String,
    /// `USER` and `LOGNAME` inside.
    pub user: String,
}

/// Root's home and name for root modes, else the caller's.
pub fn inside(mode: IdMode, caller: &Caller) -> Inside {
    match mode {
        IdMode::FakeRoot | IdMode::HostRoot => Inside {
            home: "/root".to_string(),
            user: "root".to_string(),
        },
        IdMode::Identity => Inside {
            home: caller
                .home
                .as_ref()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_else(|| "/".to_string()),
            user: caller.user_name(),
        },
    }
}

/// What berth sets in every container (the image's `Env`, env files and
/// `-e` may override it).
pub fn fixed_env(inside: &Inside, hostname: &str) -> Vec<(String, String)> {
    vec![
        ("HOME".to_string(), inside.home.clone()),
        ("USER".to_string(), inside.user.clone()),
        ("LOGNAME".to_string(), inside.user.clone()),
        ("HOSTNAME".to_string(), hostname.to_string()),
        ("container".to_string(), "berth".to_string()),
    ]
}

/// The container's identity: in identity mode the caller's passwd and
/// group lines (refused if a field would add fields or lines to the
/// container's files: another user, another home).
pub fn identity(mode: IdMode, caller: &Caller, inside: &Inside) -> Result<Identity> {
    let (uid, gid) = (caller.uid, caller.gid);
    let (passwd_line, group_line) = match mode {
        IdMode::Identity => {
            let gecos = caller
                .user
                .as_ref()
                .map(|p| p.gecos.clone())
                .unwrap_or_default();
            let group = caller.group.clone().unwrap_or_else(|| format!("g{gid}"));
            let name = &inside.user;
            for (what, value) in [
                ("home directory ($HOME)", &inside.home),
                ("GECOS field", &gecos),
                ("user name", name),
                ("group name", &group),
            ] {
                if value.contains([':', '\n']) {
                    return Err(Error::Usage(format!(
                        "your {what} {value:?} holds ':' or a newline, which would corrupt the container's /etc/passwd; run with a HOME (and a user database entry) without them"
                    )));
                }
            }
            (
                Some(format!(
                    "{name}:x:{uid}:{gid}:{gecos}:{}:/bin/sh",
                    inside.home
                )),
                Some(format!("{group}:x:{gid}:")),
            )
        }
        _ => (None, None),
    };
    Ok(Identity {
        mode,
        uid,
        gid,
        passwd_line,
        group_line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_runtime::sys::Passwd;

    fn me(home: &str, gecos: &str) -> Caller {
        Caller {
            uid: 1000,
            gid: 100,
            user: Some(Passwd {
                name: "me".into(),
                gecos: gecos.into(),
                home: "/home/me".into(),
            }),
            group: Some("users".into()),
            home: Some(home.into()),
            cwd: "/".into(),
            hostname: "n1".into(),
            env: vec![],
            berth_exe: "/b".into(),
            started: std::time::Instant::now(),
            pid: 1,
        }
    }

    #[test]
    fn the_callers_lines() {
        let c = me("/home/me", "Me Myself");
        let i = inside(IdMode::Identity, &c);
        let id = identity(IdMode::Identity, &c, &i).unwrap();
        assert_eq!(
            id.passwd_line.as_deref(),
            Some("me:x:1000:100:Me Myself:/home/me:/bin/sh")
        );
        assert_eq!(id.group_line.as_deref(), Some("users:x:100:"));
        let root = identity(IdMode::FakeRoot, &c, &inside(IdMode::FakeRoot, &c)).unwrap();
        assert_eq!(root.passwd_line, None);
    }

    #[test]
    fn a_field_that_would_add_an_entry_is_refused() {
        for c in [
            me("/home/me:/x", ""),
            me("/home/me", "a\nroot2:x:0:0::/:/bin/sh"),
        ] {
            let i = inside(IdMode::Identity, &c);
            let err = identity(IdMode::Identity, &c, &i).unwrap_err().to_string();
            assert!(err.contains("would corrupt"), "{err}");
        }
    }

    #[test]
    fn berths_variables() {
        let c = me("/home/me", "");
        let env = fixed_env(&inside(IdMode::FakeRoot, &c), "n1");
        assert!(env.contains(&("HOME".into(), "/root".into())));
        assert!(env.contains(&("container".into(), "berth".into())));
    }
}
