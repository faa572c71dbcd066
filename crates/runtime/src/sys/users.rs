//! The user database, through NSS (so LDAP/SSSD users of a cluster are
//! found, not only /etc/passwd).

/// A user database entry, looked up through NSS (so LDAP/SSSD users of a
/// cluster are found, not only /etc/passwd).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passwd {
    /// Login name.
    pub name: String,
    /// GECOS field.
    pub gecos: String,
    /// Home directory.
    pub home: String,
}

/// `getpwuid_r(3)`.
pub fn getpwuid(uid: u32) -> Option<Passwd> {
    let mut buf = vec![0u8; 16384];
    // SAFETY: a zeroed passwd is a valid out value for getpwuid_r.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: buffers are valid for their lengths; on success `result`
    // points to `pwd`, whose strings point into `buf`.
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() {
        return None;
    }
    let s = |p: *const libc::c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: getpwuid_r stored NUL-terminated strings inside `buf`.
            unsafe { std::ffi::CStr::from_ptr(p) }
                .to_string_lossy()
                .into_owned()
        }
    };
    Some(Passwd {
        name: s(pwd.pw_name),
        gecos: s(pwd.pw_gecos),
        home: s(pwd.pw_dir),
    })
}

/// `getgrgid_r(3)`: the group's name.
pub fn group_name(gid: u32) -> Option<String> {
    let mut buf = vec![0u8; 65536];
    // SAFETY: a zeroed group is a valid out value for getgrgid_r.
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::group = std::ptr::null_mut();
    // SAFETY: as in getpwuid.
    let rc = unsafe {
        libc::getgrgid_r(
            gid,
            &mut grp,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() || grp.gr_name.is_null() {
        return None;
    }
    // SAFETY: gr_name is a NUL-terminated string inside `buf`.
    Some(
        unsafe { std::ffi::CStr::from_ptr(grp.gr_name) }
            .to_string_lossy()
            .into_owned(),
    )
}
