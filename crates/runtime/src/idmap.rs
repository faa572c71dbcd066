//! Who the caller is inside: the id mode, the user namespaces that make
//! it so, and their id maps (the caller alone, or with the subordinate
//! range of /etc/subuid and /etc/subgid through newuidmap/newgidmap).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use rustix::thread::UnshareFlags;

use crate::error::{Error, Result};
use crate::sys::{self, idmaps, Kernel};

/// How container user ids map to the caller's.
///
/// A container's user namespace is nested in its keeper's, so that the
/// container holds no capability over the keeper, its mounts or its
/// servers. The keeper's namespace keeps the caller's host ids
/// ([`KeeperIds::Host`]), so the nested one's maps read as host ids, as
/// Pyxis and enroot show them: `U U 1` for an `Identity` container, `0 U 1`
/// (after the subordinate range, when there is one) for `FakeRoot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IdMode {
    /// The caller is themself inside.
    Identity,
    /// The caller is root inside (uid 0 maps to U), one id only.
    FakeRoot,
    /// The caller is real root: no user namespace.
    #[serde(rename = "root")]
    HostRoot,
}

impl IdMode {
    /// The mode's name (`identity`, `fakeroot`, `root`).
    pub fn as_str(self) -> &'static str {
        match self {
            IdMode::Identity => "identity",
            IdMode::FakeRoot => "fakeroot",
            IdMode::HostRoot => "root",
        }
    }

    /// The mode named `s` ([`IdMode::as_str`]).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "identity" => Some(IdMode::Identity),
            "fakeroot" => Some(IdMode::FakeRoot),
            "root" => Some(IdMode::HostRoot),
            _ => None,
        }
    }

    /// Whether the mode has user namespaces (all but real root).
    pub fn has_user_namespace(self) -> bool {
        self != IdMode::HostRoot
    }
}

/// Which ids the caller has inside a keeper's user namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeeperIds {
    /// The caller is root inside (`0 U 1`, then `1 S C` for a subordinate
    /// range): for builds, and for a squashfs server that reports the
    /// image's ids as they are (squashfuse_ll).
    Root,
    /// The caller keeps their host ids inside (`U U 1`, then `S S C`), and
    /// holds capabilities as the namespace's creator rather than as root
    /// (kept across `exec` by [`Kernel::keep_capabilities_across_exec`]).
    /// berth's own squashfs server reports the image's root as the user
    /// (`berth_squashfs::fuse::owners`).
    Host,
}

/// Enters a new user namespace (unless `HostRoot`), mapping the caller to
/// root, and a new mount namespace. Returns the (uid, gid) seen inside.
pub fn enter_namespaces(k: &dyn Kernel, mode: IdMode) -> Result<(u32, u32)> {
    enter_namespaces_with(k, mode, KeeperIds::Root)
}

/// [`enter_namespaces`] with the caller's ids inside chosen by `ids`.
pub fn enter_namespaces_with(k: &dyn Kernel, mode: IdMode, ids: KeeperIds) -> Result<(u32, u32)> {
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    if mode == IdMode::HostRoot {
        k.unshare(UnshareFlags::NEWNS)
            .map_err(|e| Error::sys("unshare the mount namespace", None, e))?;
        // Mounts made here must not propagate back to the host.
        sys::make_rslave(k).map_err(|e| Error::sys("make / a slave mount", None, e))?;
        return Ok((uid, gid));
    }
    // With a subordinate id range (/etc/subuid, /etc/subgid) the setuid
    // helpers newuidmap/newgidmap map it too (to 1..N when the caller is
    // root inside, to its own ids when the caller keeps theirs), so image
    // files of other owners keep their owners (apt-get and dpkg can chown
    // under --fakeroot --writable). They run from outside the namespace,
    // once it exists.
    let helper = subid_ranges(uid, gid).and_then(|(u, g)| MapHelper::spawn(ids, uid, gid, u, g));
    k.unshare(UnshareFlags::NEWUSER | UnshareFlags::NEWNS)
        .map_err(no_user_namespace)?;
    let inside = ids.inside(uid, gid);
    if let Some(helper) = helper {
        match helper.finish() {
            Ok(()) => return Ok(inside),
            Err(e) => tracing::warn!("newuidmap/newgidmap failed ({e}); mapping your ids only"),
        }
    }
    // Only the maps a helper did not write (the two run side by side: one
    // may have succeeded).
    idmaps::write_missing_maps(
        &format!("{} {uid} 1", inside.0),
        &format!("{} {gid} 1", inside.1),
    )
    .map_err(|e| Error::Namespace(format!("cannot write the id maps: {e}")))?;
    Ok(inside)
}

/// The error of a user namespace the kernel refused to make.
pub fn no_user_namespace(e: impl std::fmt::Display) -> Error {
    Error::Namespace(format!(
        "cannot create a user namespace ({e}); unprivileged user namespaces may be disabled: \
         ask your admin to set kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0"
    ))
}

impl KeeperIds {
    /// The caller's `(uid, gid)` inside a keeper namespace of these ids.
    pub fn inside(self, uid: u32, gid: u32) -> (u32, u32) {
        match self {
            KeeperIds::Root => (0, 0),
            KeeperIds::Host => (uid, gid),
        }
    }
}

/// The arguments of newuidmap/newgidmap after the pid for a keeper
/// namespace of `ids`: the caller's own id `id` first (the image's root
/// stands for it, `berth_squashfs::fuse::owners::image_ranges`), then the
/// subordinate range `(start, count)`.
fn helper_lines(ids: KeeperIds, id: u32, (start, count): (u32, u32)) -> Vec<String> {
    let first = match ids {
        KeeperIds::Root => [0, id, 1, 1, start, count],
        KeeperIds::Host => [id, id, 1, start, start, count],
    };
    first.iter().map(u32::to_string).collect()
}

/// Maps the fresh user namespace of the child `pid` (a keeper the run
/// started in namespaces of its own) with the
/// caller's subordinate ranges: newuidmap and newgidmap, each `exec`'d
/// directly, side by side, from outside the namespace as they must run,
/// while the child starts. `Ok(false)`: the caller has no ranges (or no
/// helpers); the child then maps its own ids alone ([`finish_own_maps`]).
/// `(uid, gid)`: the caller's ids.
pub fn map_child(
    pid: u32,
    ids: KeeperIds,
    (uid, gid): (u32, u32),
) -> std::result::Result<bool, String> {
    let Some((u, g)) = subid_ranges(uid, gid) else {
        return Ok(false);
    };
    let mut children = Vec::with_capacity(2);
    let mut failed = Vec::new();
    for (tool, id, range) in [("newuidmap", uid, u), ("newgidmap", gid, g)] {
        let spawned = Command::new(tool)
            .arg(pid.to_string())
            .args(helper_lines(ids, id, range))
            .env("PATH", HELPER_PATH)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn();
        match spawned {
            Ok(c) => children.push(c),
            Err(e) => failed.push(format!("{tool}: {e}")),
        }
    }
    await_helpers(children, failed).map(|()| true)
}

/// Where newuidmap and newgidmap are looked for.
const HELPER_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";

/// Waits for the map helpers `children`, whatever each does; `failed`
/// holds what went wrong before, and each helper's complaint is added.
fn await_helpers(
    children: Vec<std::process::Child>,
    mut failed: Vec<String>,
) -> std::result::Result<(), String> {
    for c in children {
        match c.wait_with_output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => failed.push(String::from_utf8_lossy(&out.stderr).trim().to_string()),
            Err(e) => failed.push(e.to_string()),
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}

/// The byte a run writes to the keeper it started once it has mapped the
/// keeper's namespace ([`map_child`]), whatever the helpers did.
pub const MAPPED: u8 = b'm';

/// In a keeper started in namespaces of its own: waits until the run
/// that started it has mapped them ([`map_child`]; it then writes
/// [`MAPPED`] to the keeper's stdin), and maps what it did not: the
/// caller's own ids alone, `inside` standing for `host`. An end of file
/// first means the run ended before its helpers were done (a Ctrl-C that
/// took them too): the keeper then leaves rather than serve later runs
/// with fewer ids than the user has.
pub fn finish_own_maps(inside: (u32, u32), host: (u32, u32)) -> Result<()> {
    use std::io::Read;
    let mut byte = [0u8; 1];
    let read = loop {
        match std::io::stdin().lock().read(&mut byte) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            other => break other,
        }
    };
    match read {
        Ok(1) if byte[0] == MAPPED => {}
        _ => {
            return Err(Error::Namespace(
                "the run that started this keeper ended before mapping its user namespace".into(),
            ))
        }
    }
    idmaps::write_missing_maps(
        &format!("{} {} 1", inside.0, host.0),
        &format!("{} {} 1", inside.1, host.1),
    )
    .map_err(|e| Error::Namespace(format!("cannot write the id maps: {e}")))
}

/// Becomes `uid`/`gid` in a nested user namespace that maps them to the
/// caller's own ids in the keeper's (which are the caller on the host).
/// Capabilities go with it at `exec` unless `uid` is 0.
pub fn become_caller(k: &dyn Kernel, uid: u32, gid: u32) -> Result<()> {
    let (me, my_group) = (
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw(),
    );
    k.unshare(UnshareFlags::NEWUSER)
        .map_err(|e| Error::sys("create the nested user namespace", None, e))?;
    idmaps::write_id_maps(&format!("{uid} {me} 1"), &format!("{gid} {my_group} 1"))
        .map_err(|e| Error::Namespace(format!("cannot write the nested id maps: {e}")))
}

/// The first `NAME:START:COUNT` line of a subuid/subgid file for `owner`
/// (a name) or `id`, with a non-zero count.
fn find_range(text: &str, owner: Option<&str>, id: u32) -> Option<(u32, u32)> {
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.trim().split(':').collect();
        let [who, start, count] = f.as_slice() else {
            return None;
        };
        let mine = owner == Some(*who) || *who == id.to_string();
        let (start, count): (u32, u32) = (start.parse().ok()?, count.parse().ok()?);
        (mine && count > 0).then_some((start, count))
    })
}

/// Whether the caller has subordinate uid and gid ranges and the helpers
/// that map them (what `--fakeroot` and builds use when there).
pub fn has_subordinate_ranges() -> bool {
    let uid = rustix::process::getuid().as_raw();
    subid_ranges(uid, rustix::process::getgid().as_raw()).is_some()
}

/// The caller's subordinate uid and gid ranges `(start, count)`, when both
/// files grant one and the helpers exist.
fn subid_ranges(uid: u32, gid: u32) -> Option<((u32, u32), (u32, u32))> {
    if std::env::var_os("BERTH_NO_SUBIDS").is_some() {
        return None;
    }
    let name = sys::getpwuid(uid).map(|p| p.name);
    let read = |f: &str| std::fs::read_to_string(f).ok();
    let u = find_range(&read("/etc/subuid")?, name.as_deref(), uid)?;
    // subgid entries are keyed by user name (or uid), like subuid.
    let subgid = read("/etc/subgid")?;
    let g = find_range(&subgid, name.as_deref(), uid).or_else(|| find_range(&subgid, None, gid))?;
    let on_path = |b: &str| {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(b).is_file()))
            .unwrap_or(false)
            || Path::new("/usr/bin").join(b).is_file()
    };
    (on_path("newuidmap") && on_path("newgidmap")).then_some((u, g))
}

/// Two shells that wait for a line on stdin, then map the caller's
/// namespace, one with newuidmap and one with newgidmap, at once (each
/// `exec`s its helper: a map costs one shell and one setuid helper, and
/// the two run side by side). Dropped unfinished (the namespace could not
/// be made), the shells read end of file and exit; they are reaped then.
struct MapHelper(Vec<std::process::Child>);

impl MapHelper {
    fn spawn(ids: KeeperIds, uid: u32, gid: u32, u: (u32, u32), g: (u32, u32)) -> Option<Self> {
        let pid = std::process::id();
        let mut helper = MapHelper(Vec::with_capacity(2));
        for (tool, id, range) in [("newuidmap", uid, u), ("newgidmap", gid, g)] {
            let lines = helper_lines(ids, id, range).join(" ");
            let script = format!("read go || exit 1; exec {tool} {pid} {lines}");
            let child = Command::new("/bin/sh")
                .arg("-c")
                .arg(script)
                .env("PATH", HELPER_PATH)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .ok()?;
            helper.0.push(child);
        }
        Some(helper)
    }

    /// Lets the helpers map (the namespace exists now) and waits for both,
    /// whatever either does.
    fn finish(mut self) -> std::result::Result<(), String> {
        let mut failed = Vec::new();
        for c in &mut self.0 {
            if let Some(mut stdin) = c.stdin.take() {
                if let Err(e) = stdin.write_all(b"go\n") {
                    failed.push(e.to_string());
                }
            }
        }
        await_helpers(std::mem::take(&mut self.0), failed)
    }
}

impl Drop for MapHelper {
    fn drop(&mut self) {
        for mut c in std::mem::take(&mut self.0) {
            drop(c.stdin.take());
            let _ = c.wait();
        }
    }
}

/// The id maps of the user namespace nested in a keeper's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NestedMaps {
    /// `uid_map` text.
    pub uid_map: String,
    /// `gid_map` text.
    pub gid_map: String,
    /// `setgroups` is denied (identity mode: one id only, as the kernel
    /// requires of a map written without `CAP_SETGID` above it).
    pub deny_setgroups: bool,
}

impl NestedMaps {
    /// Identity mode: the caller's host ids `(uid, gid)` map to themselves
    /// as the keeper's namespace (this one) has them: `U U 1` where it
    /// keeps host ids, `U 0 1` where the caller is root in it.
    pub fn caller(host: (u32, u32)) -> Self {
        let read = |f: &str| std::fs::read_to_string(f).unwrap_or_default();
        caller_in(
            host,
            &read("/proc/self/uid_map"),
            &read("/proc/self/gid_map"),
        )
    }

    /// Fakeroot mode: the image's ids map to the ids of the keeper's
    /// namespace (this one) that stand for them, as its squashfs server
    /// reports them: root to the caller, 1 and up to the subordinate range
    /// when there is one. The container is root over the image's files,
    /// in a namespace of its own, with no capability in the keeper's.
    pub fn same_as_keeper() -> Self {
        let read = |f: &str| std::fs::read_to_string(f).unwrap_or_default();
        NestedMaps {
            uid_map: image_ids(&read("/proc/self/uid_map")),
            gid_map: image_ids(&read("/proc/self/gid_map")),
            deny_setgroups: false,
        }
    }
}

/// [`NestedMaps::caller`] for a keeper namespace with these maps.
fn caller_in((uid, gid): (u32, u32), uid_map: &str, gid_map: &str) -> NestedMaps {
    NestedMaps {
        uid_map: format!("{uid} {} 1", inside_of(uid_map, uid).unwrap_or(0)),
        gid_map: format!("{gid} {} 1", inside_of(gid_map, gid).unwrap_or(0)),
        deny_setgroups: true,
    }
}

/// The id inside a map's namespace that stands for `outside` (an id of
/// the parent namespace).
fn inside_of(map: &str, outside: u32) -> Option<u32> {
    map.lines().find_map(|l| {
        let f: Vec<u32> = l
            .split_whitespace()
            .filter_map(|n| n.parse().ok())
            .collect();
        let [inside, first, count] = f.as_slice() else {
            return None;
        };
        let offset = outside.checked_sub(*first)?;
        (offset < *count).then(|| inside + offset)
    })
}

/// A map from the image's ids to the ids of `map`'s namespace that stand
/// for them; the image's root last (Pyxis's tests read the last line).
fn image_ids(map: &str) -> String {
    let mut lines: Vec<String> = berth_squashfs::fuse::owners::image_ranges(map)
        .iter()
        .map(|r| format!("{} {} {}", r.image, r.inside, r.count))
        .collect();
    if lines.is_empty() {
        return "0 0 1".to_string();
    }
    lines.rotate_left(1);
    lines.join("\n")
}

/// The uid and gid that stand for the highest image id this user
/// namespace's maps both cover, when they cover more than the image's
/// root (a subordinate range): ids of the range no container is; `None`
/// in the initial namespace or with single-id maps.
pub fn spare_ids() -> Option<(u32, u32)> {
    let read = |f: &str| std::fs::read_to_string(f).ok();
    spare_ids_in(&read("/proc/self/uid_map")?, &read("/proc/self/gid_map")?)
}

/// [`spare_ids`] for these maps.
fn spare_ids_in(uid_map: &str, gid_map: &str) -> Option<(u32, u32)> {
    use berth_squashfs::fuse::owners::{image_ranges, stand_in};
    let (uids, gids) = (image_ranges(uid_map), image_ranges(gid_map));
    let total = |r: &[berth_squashfs::fuse::owners::ImageRange]| -> Option<u64> {
        r.iter().try_fold(0u64, |sum, r| {
            (r.count < u32::MAX).then_some(sum + u64::from(r.count))
        })
    };
    let top = total(&uids)?.min(total(&gids)?).checked_sub(1)?;
    let top = u32::try_from(top).ok().filter(|t| *t > 0)?;
    Some((stand_in(&uids, top)?, stand_in(&gids, top)?))
}

/// Whether this process's user namespace maps no uid 0 (a keeper's where
/// the user keeps host ids).
pub fn maps_no_root() -> bool {
    std::fs::read_to_string("/proc/self/uid_map").is_ok_and(|m| {
        !berth_squashfs::fuse::owners::image_ranges(&m)
            .iter()
            .any(|r| r.inside == 0 && r.count > 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::fake::{Call, Recording};

    #[test]
    fn subordinate_ranges_by_name_or_id() {
        let file = "alice:100000:65536\n  1001:300000:65536\nbob:200000:0\n";
        assert_eq!(find_range(file, Some("alice"), 1000), Some((100000, 65536)));
        assert_eq!(find_range(file, Some("carol"), 1001), Some((300000, 65536)));
        // A zero count grants nothing.
        assert_eq!(find_range(file, Some("bob"), 1002), None);
    }

    /// What newuidmap/newgidmap are given for a keeper's namespace: the
    /// caller's own id first, then the range (host ids, or root inside).
    #[test]
    fn the_helpers_map_the_caller_first_then_the_range() {
        assert_eq!(
            helper_lines(KeeperIds::Host, 1001, (200000, 65536)).join(" "),
            "1001 1001 1 200000 200000 65536"
        );
        assert_eq!(
            helper_lines(KeeperIds::Root, 1001, (200000, 65536)).join(" "),
            "0 1001 1 1 200000 65536"
        );
        assert_eq!(KeeperIds::Host.inside(1001, 100), (1001, 100));
        assert_eq!(KeeperIds::Root.inside(1001, 100), (0, 0));
    }

    #[test]
    fn fakeroot_nested_maps_take_the_image_ids_to_their_stand_ins() {
        // The keeper keeps host ids: the container's maps read as Pyxis's.
        assert_eq!(
            image_ids("      1000       1000          1\n    200000     200000      65536\n"),
            "1 200000 65536\n0 1000 1"
        );
        assert_eq!(image_ids("1000 1000 1\n"), "0 1000 1");
        // The caller is root in the keeper's namespace.
        assert_eq!(
            image_ids("         0       1000          1\n         1     200000      65536\n"),
            "1 1 65536\n0 0 1"
        );
        assert_eq!(image_ids(""), "0 0 1");
    }

    #[test]
    fn identity_nested_maps_take_the_caller_to_their_own_ids() {
        let host = caller_in(
            (1000, 100),
            "1000 1000 1\n200000 200000 65536\n",
            "100 100 1\n",
        );
        assert_eq!(
            (host.uid_map.as_str(), host.gid_map.as_str()),
            ("1000 1000 1", "100 100 1")
        );
        let root = caller_in((1000, 100), "0 1000 1\n1 200000 65536\n", "0 100 1\n");
        assert_eq!(
            (root.uid_map.as_str(), root.gid_map.as_str()),
            ("1000 0 1", "100 0 1")
        );
        assert!(host.deny_setgroups && root.deny_setgroups);
    }

    #[test]
    fn the_spare_ids_stand_for_the_top_of_the_subordinate_ranges() {
        let root = "0 1000 1\n1 200000 65536\n";
        assert_eq!(spare_ids_in(root, root), Some((65536, 65536)));
        let host = "1000 1000 1\n200000 200000 65536\n";
        assert_eq!(spare_ids_in(host, host), Some((265535, 265535)));
        // The user's own id above the range (LDAP ids), and ranges that
        // start apart: each id from its own map, never the user's.
        let high = "1500000 1500000 1\n100000 100000 65536\n";
        let groups = "1500000 1500000 1\n300000 300000 1000\n";
        assert_eq!(spare_ids_in(high, groups), Some((100999, 300999)));
        assert_eq!(spare_ids_in("0 1000 1\n", "0 1000 1\n"), None);
        assert_eq!(spare_ids_in("1000 1000 1\n", "100 100 1\n"), None);
        assert_eq!(spare_ids_in("0 0 4294967295\n", "0 0 4294967295\n"), None);
    }

    #[test]
    fn real_root_gets_a_private_mount_namespace_only() {
        let k = Recording::new();
        enter_namespaces(&k, IdMode::HostRoot).unwrap();
        let calls = k.calls();
        assert_eq!(calls[0], Call::Unshare(UnshareFlags::NEWNS));
        assert!(
            matches!(&calls[1], Call::Mount { flags, .. } if *flags == libc::MS_REC | libc::MS_SLAVE)
        );
    }

    #[test]
    fn a_refused_user_namespace_says_what_to_ask_for() {
        let k = Recording::new();
        k.fail("Unshare", sys::Errno::PERM);
        let err = enter_namespaces(&k, IdMode::Identity)
            .unwrap_err()
            .to_string();
        assert!(err.contains("user.max_user_namespaces"), "{err}");
    }
}
