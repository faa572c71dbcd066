//! What a task joining a shared container in place may take over from
//! the task that prepared it (`berth run --hand-over`, the Slurm
//! plugin's tasks): which of the command's variables are each task's own
//! values, and whether any value is worked out from the task's own (then
//! every task needs berth to work out its own).

use crate::Result;

/// Builds the command's environment once more with `build`, every one of
/// the caller's values (`host`) replaced by a marker of its own. The names
/// whose value is their own marker pass through from each task; a value
/// that holds a marker otherwise (`RANK` from `SLURM_PROCID`, a path list
/// that extends the caller's) is worked out from the caller's (`true`).
/// A value the image or berth sets is the same for every task, even
/// where it equals the caller's.
pub fn own_values(
    host: &[(String, String)],
    build: impl FnOnce(&[(String, String)]) -> Result<Vec<(String, String)>>,
) -> Result<(Vec<String>, bool)> {
    let marker = |i: usize| format!("\u{1}berth-caller-{i}\u{1}");
    let marked: Vec<(String, String)> = host
        .iter()
        .enumerate()
        .map(|(i, (k, _))| (k.clone(), marker(i)))
        .collect();
    let mut passed = Vec::new();
    let mut derived = false;
    for (k, v) in build(&marked)? {
        let own = host.iter().position(|(n, _)| *n == k).map(marker);
        if own.as_deref() == Some(v.as_str()) {
            passed.push(k);
        } else if v.contains('\u{1}') {
            derived = true;
        }
    }
    Ok((passed, derived))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn own_fixed_and_derived_values_are_told_apart() {
        let host = kv(&[
            ("SLURM_PROCID", "0"),
            ("CUDA_VISIBLE_DEVICES", "0"),
            ("MODULEPATH", "/m"),
        ]);
        // The image sets CUDA_VISIBLE_DEVICES=0, equal to this task's.
        let build = |h: &[(String, String)]| {
            let get = |k: &str| h.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            Ok(vec![
                ("SLURM_PROCID".to_string(), get("SLURM_PROCID").unwrap()),
                ("CUDA_VISIBLE_DEVICES".to_string(), "0".to_string()),
                ("HOME".to_string(), "/home/u".to_string()),
            ])
        };
        let (passed, derived) = own_values(&host, build).unwrap();
        assert_eq!(passed, ["SLURM_PROCID"]);
        assert!(!derived);
        let rank = |h: &[(String, String)]| {
            let id = h.iter().find(|(n, _)| n == "SLURM_PROCID").unwrap();
            Ok(vec![("RANK".to_string(), id.1.clone())])
        };
        assert!(own_values(&host, rank).unwrap().1);
        let path = |h: &[(String, String)]| {
            let m = h.iter().find(|(n, _)| n == "MODULEPATH").unwrap();
            Ok(vec![("MODULEPATH".to_string(), format!("/site:{}", m.1))])
        };
        assert!(own_values(&host, path).unwrap().1);
    }
}
