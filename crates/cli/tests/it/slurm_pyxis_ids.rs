//! Pyxis's id maps under berth's plugin, on the real test Slurm as the
//! unprivileged user (Pyxis's remap_root.bats 1, 2 and env_vars.bats
//! 14-16): `/proc/self/uid_map` reads as host ids, the user's own id
//! without `--container-remap-root` and root standing for it with.

use crate::slurm_pyxis::{last_line, srun};
use crate::slurm_spank::{image, sandbox};

#[test]
#[cfg_attr(
    not(berth_it_slurm),
    ignore = "needs root, the test fixtures and berth's SPANK plugin: sudo bash tests/setup/setup.sh, then sudo bash tests/setup/slurm_plugin.sh target/debug"
)]
fn pyxis_uid_maps_read_as_host_ids() {
    let sb = sandbox();
    let img = image(&sb, "debian-python");
    let uid = sb.env.test_user().0;
    let (root, me) = (format!("0 {uid} 1"), format!("{uid} {uid} 1"));
    let map = |env: &[(&str, &str)], flags: &[&str]| {
        let mut args = vec![img.as_str()];
        args.extend_from_slice(flags);
        args.extend(["sh", "-c", "awk '{print $1, $2, $3}' /proc/self/uid_map"]);
        last_line(&srun(&sb, env, &args).ok())
    };
    assert_eq!(map(&[], &["--container-remap-root"]), root);
    assert_eq!(map(&[], &["--no-container-remap-root"]), me);
    assert_eq!(map(&[], &[]), me);
    let on = [("PYXIS_CONTAINER_REMAP_ROOT", "1")];
    let off = [("PYXIS_CONTAINER_REMAP_ROOT", "0")];
    assert_eq!(map(&on, &[]), root);
    assert_eq!(map(&off, &[]), me);
    // The command line wins over the variable.
    assert_eq!(map(&on, &["--no-container-remap-root"]), me);
}
