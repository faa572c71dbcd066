//! `USER` and `--chown` as ids, from the image's own /etc/passwd and
//! /etc/group (read in a child chrooted into the stage root, or in the RUN
//! step's pivoted root).

use std::fs;

use super::UserError;

/// A user's ids and home directory.
pub(super) type Ids = (u32, u32, String);

/// `USER` or `--chown` as ids: `name|uid[:group|gid]`, names from the
/// image's /etc/passwd and /etc/group (the current root); and the home.
pub(super) fn resolve_user(spec: &str) -> Result<Ids, UserError> {
    let passwd = fs::read_to_string("/etc/passwd").unwrap_or_default();
    resolve_user_in(spec, &passwd, &|| {
        fs::read_to_string("/etc/group").unwrap_or_default()
    })
}

/// [`resolve_user`] with the text of /etc/passwd, and of /etc/group when a
/// group is named.
fn resolve_user_in(spec: &str, passwd: &str, group: &dyn Fn() -> String) -> Result<Ids, UserError> {
    if spec.is_empty() {
        return Ok((0, 0, "/root".into()));
    }
    let (u, g) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let entry = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() >= 6 && (f[0] == u || f[2] == u));
    let uid: u32 = match (&entry, u.parse::<u32>()) {
        (_, Ok(n)) => n,
        (Some(f), _) => f[2]
            .parse()
            .map_err(|_| UserError::BadPasswdEntry(u.to_string()))?,
        (None, _) => return Err(UserError::UnknownUser(u.to_string())),
    };
    let home = entry
        .as_ref()
        .map(|f| f[5].to_string())
        .unwrap_or_else(|| "/".into());
    let gid: u32 = match g {
        None => entry
            .as_ref()
            .and_then(|f| f[3].parse().ok())
            .unwrap_or(uid),
        Some(g) => match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => group()
                .lines()
                .map(|l| l.split(':').collect::<Vec<_>>())
                .find(|f| f.len() >= 3 && f[0] == g)
                .and_then(|f| f[2].parse().ok())
                .ok_or_else(|| UserError::UnknownGroup(g.to_string()))?,
        },
    };
    Ok((uid, gid, home))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\napp:x:1234:1235::/home/app:/bin/sh\nbad:x:nan:1::/:/bin/sh\n";
    const GROUP: &str = "root:x:0:\nstaff:x:50:\n";

    fn resolve(spec: &str) -> Result<Ids, UserError> {
        resolve_user_in(spec, PASSWD, &|| GROUP.to_string())
    }

    #[test]
    fn names_and_numbers_resolve_in_the_images_files() {
        assert_eq!(resolve("").unwrap(), (0, 0, "/root".into()));
        assert_eq!(resolve("app").unwrap(), (1234, 1235, "/home/app".into()));
        assert_eq!(resolve("1234").unwrap(), (1234, 1235, "/home/app".into()));
        assert_eq!(
            resolve("app:staff").unwrap(),
            (1234, 50, "/home/app".into())
        );
        assert_eq!(resolve("4321:4321").unwrap(), (4321, 4321, "/".into()));
        // A uid not in /etc/passwd: its own number as the group.
        assert_eq!(resolve("77").unwrap(), (77, 77, "/".into()));
    }

    #[test]
    fn unknown_names_say_which_file_lacks_them() {
        assert_eq!(
            resolve("nobody"),
            Err(UserError::UnknownUser("nobody".into()))
        );
        assert_eq!(
            resolve("app:wheel"),
            Err(UserError::UnknownGroup("wheel".into()))
        );
        assert_eq!(resolve("bad"), Err(UserError::BadPasswdEntry("bad".into())));
        assert!(resolve("nobody")
            .unwrap_err()
            .to_string()
            .contains("/etc/passwd"));
    }
}
