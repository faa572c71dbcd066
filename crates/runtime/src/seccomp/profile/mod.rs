//! Seccomp profiles from a file (`--security-opt seccomp=FILE`), in the
//! JSON format of Docker, podman and the OCI runtime specification's
//! `linux.seccomp`: a default action, and rules naming system calls, an
//! action and conditions on their arguments.
//!
//! A profile is compiled here into classic BPF, before the container's
//! process is forked (nothing is allocated once it is):
//! - Rules apply to the native system call table and, when the profile
//!   lists the 32-bit architecture (`architectures`, or `archMap`'s
//!   `subArchitectures` of the native one), to the compat table, each name
//!   looked up in that table (a name one table lacks is skipped there, as
//!   libseccomp does). Other architectures, and x32 system calls on
//!   x86_64, get `EPERM`.
//! - Where several rules of one system call match, the action of higher
//!   precedence wins (the kernel's order: kill process, kill thread,
//!   trap, errno, trace, log, allow); where none does, the default action.
//! - Argument conditions are 64-bit and unsigned (`SCMP_CMP_EQ`, `NE`,
//!   `LT`, `LE`, `GT`, `GE`, `MASKED_EQ` with `value` the mask and
//!   `valueTwo` the datum); all of a rule's conditions must hold.
//! - Docker's `includes` and `excludes` are honoured: `caps` against the
//!   capabilities the command has (none in identity mode, all in
//!   fakeroot's own namespace, the kept set as real root), `arches`
//!   against the native architecture, `minKernel` against the running
//!   kernel.
//! - berth's terminal guard (`TIOCSTI`, `TIOCLINUX`: EPERM) comes first
//!   whatever the profile says; `seccomp=unconfined` is the way to lift it.
//!
//! Not supported, and refused with a message: `SCMP_ACT_NOTIFY` (it needs
//! a listener) and `listenerPath`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, Result};

/// A profile file as Docker and the OCI specification write it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProfileFile {
    default_action: String,
    #[serde(default)]
    default_errno_ret: Option<u32>,
    #[serde(default)]
    architectures: Option<Vec<String>>,
    #[serde(default)]
    arch_map: Option<Vec<ArchMap>>,
    #[serde(default)]
    syscalls: Option<Vec<RuleFile>>,
    #[serde(default)]
    listener_path: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ArchMap {
    architecture: String,
    #[serde(default)]
    sub_architectures: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RuleFile {
    #[serde(default)]
    names: Option<Vec<String>>,
    /// Older Docker profiles: one name per rule.
    #[serde(default)]
    name: Option<String>,
    action: String,
    #[serde(default)]
    errno_ret: Option<u32>,
    #[serde(default)]
    args: Option<Vec<ArgFile>>,
    #[serde(default)]
    includes: Option<Scope>,
    #[serde(default)]
    excludes: Option<Scope>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ArgFile {
    index: u32,
    value: u64,
    #[serde(default)]
    value_two: u64,
    op: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Scope {
    #[serde(default)]
    caps: Option<Vec<String>>,
    #[serde(default)]
    arches: Option<Vec<String>>,
    #[serde(default)]
    min_kernel: Option<String>,
}

/// What the command will hold when the filter applies, for `includes` and
/// `excludes`.
pub struct Context {
    /// Whether the command holds capability `n` (`CAP_*` number).
    pub has_cap: Box<dyn Fn(u32) -> bool>,
    /// The running kernel's `(major, minor)`.
    pub kernel: (u32, u32),
}

/// A seccomp action and its return value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Action(u32);

impl Action {
    /// The kernel's precedence: higher wins.
    fn precedence(self) -> u32 {
        match self.0 & libc::SECCOMP_RET_ACTION_FULL {
            libc::SECCOMP_RET_KILL_PROCESS => 7,
            libc::SECCOMP_RET_KILL_THREAD => 6,
            libc::SECCOMP_RET_TRAP => 5,
            libc::SECCOMP_RET_ERRNO => 4,
            libc::SECCOMP_RET_TRACE => 2,
            libc::SECCOMP_RET_LOG => 1,
            _ => 0,
        }
    }
}

/// The action `name` (`SCMP_ACT_*`) with `errno` for those that take one.
fn action(name: &str, errno: Option<u32>, default_errno: u32, file: &Path) -> Result<Action> {
    let errno = errno.unwrap_or(default_errno) & libc::SECCOMP_RET_DATA;
    Ok(Action(match name {
        "SCMP_ACT_ALLOW" => libc::SECCOMP_RET_ALLOW,
        "SCMP_ACT_ERRNO" => libc::SECCOMP_RET_ERRNO | errno,
        "SCMP_ACT_KILL" | "SCMP_ACT_KILL_THREAD" => libc::SECCOMP_RET_KILL_THREAD,
        "SCMP_ACT_KILL_PROCESS" => libc::SECCOMP_RET_KILL_PROCESS,
        "SCMP_ACT_TRAP" => libc::SECCOMP_RET_TRAP,
        "SCMP_ACT_TRACE" => libc::SECCOMP_RET_TRACE | errno,
        "SCMP_ACT_LOG" => libc::SECCOMP_RET_LOG,
        "SCMP_ACT_NOTIFY" => {
            return Err(bad(
                file,
                "SCMP_ACT_NOTIFY needs a seccomp listener, which berth does not run",
            ))
        }
        other => return Err(bad(file, &format!("unknown action {other:?}"))),
    }))
}

fn bad(file: &Path, why: &str) -> Error {
    Error::Usage(format!(
        "--security-opt seccomp={}: {why}; give a profile in Docker's or the OCI format (podman's is /usr/share/containers/seccomp.json)",
        file.display()
    ))
}

/// A comparison of one 64-bit argument.
#[derive(Debug, Clone, Copy)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    MaskedEq,
}

#[derive(Debug, Clone, Copy)]
struct Cond {
    index: u32,
    op: Op,
    value: u64,
    value_two: u64,
}

#[derive(Debug, Clone)]
struct Rule {
    action: Action,
    conds: Vec<Cond>,
}

/// Which system call table a name is looked up in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Table {
    Native,
    Compat,
}

fn number(table: Table, name: &str) -> Option<u32> {
    use std::str::FromStr;
    match table {
        Table::Native => syscalls::Sysno::from_str(name).ok().map(|s| s.id() as u32),
        #[cfg(target_arch = "x86_64")]
        Table::Compat => syscalls::x86::Sysno::from_str(name)
            .ok()
            .map(|s| s.id() as u32),
        #[cfg(target_arch = "aarch64")]
        Table::Compat => syscalls::arm::Sysno::from_str(name)
            .ok()
            .map(|s| s.id() as u32),
    }
}

/// The native architecture's names in profiles: libseccomp's, and the Go
/// names Docker's `includes.arches` use.
#[cfg(target_arch = "x86_64")]
const NATIVE_NAMES: [&str; 3] = ["SCMP_ARCH_X86_64", "amd64", "x86_64"];
#[cfg(target_arch = "x86_64")]
const COMPAT_NAMES: [&str; 3] = ["SCMP_ARCH_X86", "x86", "386"];
#[cfg(target_arch = "aarch64")]
const NATIVE_NAMES: [&str; 3] = ["SCMP_ARCH_AARCH64", "arm64", "aarch64"];
#[cfg(target_arch = "aarch64")]
const COMPAT_NAMES: [&str; 3] = ["SCMP_ARCH_ARM", "arm", "arm"];

/// The compiled rules of a profile: per table, per system call number.
struct Compiled {
    default: Action,
    native: BTreeMap<u32, Vec<Rule>>,
    compat: Option<BTreeMap<u32, Vec<Rule>>>,
}

/// The most instructions the kernel takes in one filter.
const BPF_MAXINSNS: usize = 4096;

/// Reads and compiles the profile in `file` for a command in `ctx`.
pub fn load_file(file: &Path, ctx: &Context) -> Result<Vec<libc::sock_filter>> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        Error::Usage(format!(
            "--security-opt seccomp={}: cannot read the profile: {e}",
            file.display()
        ))
    })?;
    compile_text(&text, file, ctx)
}

/// Compiles the profile `text` (read from `file`, named in messages).
pub fn compile_text(text: &str, file: &Path, ctx: &Context) -> Result<Vec<libc::sock_filter>> {
    let profile: ProfileFile = serde_json::from_str(text)
        .map_err(|e| bad(file, &format!("not a seccomp profile ({e})")))?;
    let compiled = compile(&profile, file, ctx)?;
    let program = emit(&compiled);
    if program.len() > BPF_MAXINSNS {
        return Err(bad(
            file,
            &format!(
                "the profile compiles to {} instructions, more than the kernel's 4096",
                program.len()
            ),
        ));
    }
    Ok(program)
}

fn compile(p: &ProfileFile, file: &Path, ctx: &Context) -> Result<Compiled> {
    if p.listener_path.as_deref().is_some_and(|l| !l.is_empty()) {
        return Err(bad(file, "listenerPath (a seccomp agent) is not supported"));
    }
    let default_errno = p.default_errno_ret.unwrap_or(libc::EPERM as u32);
    let default = action(&p.default_action, None, default_errno, file)?;
    let listed = |names: &[&str]| {
        p.architectures
            .iter()
            .flatten()
            .any(|a| names.contains(&a.as_str()))
    };
    let native_map = p
        .arch_map
        .iter()
        .flatten()
        .find(|m| NATIVE_NAMES.contains(&m.architecture.as_str()));
    let compat_in_map = native_map.is_some_and(|m| {
        m.sub_architectures
            .iter()
            .flatten()
            .any(|s| COMPAT_NAMES.contains(&s.as_str()))
    });
    let no_arches = p.architectures.as_ref().is_none_or(|a| a.is_empty()) && p.arch_map.is_none();
    let with_compat = compat_in_map || listed(&COMPAT_NAMES);
    if !no_arches && !listed(&NATIVE_NAMES) && native_map.is_none() {
        return Err(bad(
            file,
            &format!(
                "the profile does not list this machine's architecture ({})",
                NATIVE_NAMES[0]
            ),
        ));
    }
    let mut native: BTreeMap<u32, Vec<Rule>> = BTreeMap::new();
    let mut compat: BTreeMap<u32, Vec<Rule>> = BTreeMap::new();
    for r in p.syscalls.iter().flatten() {
        if !in_scope(r, ctx) {
            continue;
        }
        let act = action(&r.action, r.errno_ret, default_errno, file)?;
        let conds = r
            .args
            .iter()
            .flatten()
            .map(|a| cond(a, file))
            .collect::<Result<Vec<_>>>()?;
        let rule = Rule { action: act, conds };
        let names = r.names.iter().flatten().chain(r.name.iter());
        for name in names {
            if let Some(nr) = number(Table::Native, name) {
                native.entry(nr).or_default().push(rule.clone());
            }
            if with_compat {
                if let Some(nr) = number(Table::Compat, name) {
                    compat.entry(nr).or_default().push(rule.clone());
                }
            }
        }
    }
    for rules in native.values_mut().chain(compat.values_mut()) {
        // Stable: rules of one precedence keep the profile's order.
        rules.sort_by_key(|r| std::cmp::Reverse(r.action.precedence()));
    }
    Ok(Compiled {
        default,
        native,
        compat: with_compat.then_some(compat),
    })
}

fn cond(a: &ArgFile, file: &Path) -> Result<Cond> {
    if a.index > 5 {
        return Err(bad(file, &format!("argument index {} (0 to 5)", a.index)));
    }
    let op = match a.op.as_str() {
        "SCMP_CMP_EQ" => Op::Eq,
        "SCMP_CMP_NE" => Op::Ne,
        "SCMP_CMP_LT" => Op::Lt,
        "SCMP_CMP_LE" => Op::Le,
        "SCMP_CMP_GT" => Op::Gt,
        "SCMP_CMP_GE" => Op::Ge,
        "SCMP_CMP_MASKED_EQ" => Op::MaskedEq,
        other => return Err(bad(file, &format!("unknown comparison {other:?}"))),
    };
    Ok(Cond {
        index: a.index,
        op,
        value: a.value,
        value_two: a.value_two,
    })
}

/// Docker's `includes` (all must hold) and `excludes` (none may).
fn in_scope(r: &RuleFile, ctx: &Context) -> bool {
    let cap = |name: &String| cap_number(name).is_some_and(|n| (ctx.has_cap)(n));
    let native_arch = |a: &String| NATIVE_NAMES.contains(&a.as_str());
    if let Some(inc) = &r.includes {
        if !inc.caps.iter().flatten().all(cap) {
            return false;
        }
        if inc
            .arches
            .as_ref()
            .is_some_and(|a| !a.is_empty() && !a.iter().any(native_arch))
        {
            return false;
        }
        if let Some(min) = inc.min_kernel.as_deref().filter(|m| !m.is_empty()) {
            if ctx.kernel < parse_kernel(min) {
                return false;
            }
        }
    }
    if let Some(exc) = &r.excludes {
        if exc.caps.iter().flatten().any(cap) {
            return false;
        }
        if exc.arches.iter().flatten().any(native_arch) {
            return false;
        }
    }
    true
}

/// `"5.8"` or `"5.8.0-63-generic"` as `(5, 8)`.
pub fn parse_kernel(release: &str) -> (u32, u32) {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// The capabilities' names, by number (`capability.h`).
const CAP_NAMES: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// `CAP_SYS_ADMIN` (or `SYS_ADMIN`) as its number.
fn cap_number(name: &str) -> Option<u32> {
    let bare = name.strip_prefix("CAP_").unwrap_or(name);
    CAP_NAMES
        .iter()
        .position(|n| n.eq_ignore_ascii_case(bare))
        .map(|i| i as u32)
}

mod asm;
#[cfg(test)]
#[allow(unsafe_code)]
mod tests;

use asm::emit;
