//! Variables a launcher inside the image expects from the scheduler, set
//! from Slurm's where the image shows it needs them: PyTorch's
//! `torch.distributed` rendezvous (`MASTER_ADDR`, `MASTER_PORT`,
//! `WORLD_SIZE`, `RANK`, `LOCAL_RANK`) for an image with
//! `PYTORCH_VERSION` (every NGC and Docker Hub PyTorch image), as enroot's
//! `50-slurm-pytorch.sh` hook and Pyxis set them. A value the image or
//! the task already has is kept.

/// The variables to add for a task with environment `task` (Slurm's) in
/// an image whose `Env` is `image`; `container` is the container's
/// environment so far (what it already has is not set again).
pub fn pytorch(
    image: &[(String, String)],
    task: &[(String, String)],
    container: &[(String, String)],
) -> Vec<(String, String)> {
    let get = |env: &[(String, String)], k: &str| {
        env.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
    };
    if get(image, "PYTORCH_VERSION").is_none() || get(task, "SLURM_PROCID").is_none() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut add = |k: &str, v: Option<String>| {
        if let Some(v) = v.filter(|_| get(container, k).is_none()) {
            out.push((k.to_string(), v));
        }
    };
    add(
        "MASTER_ADDR",
        get(task, "SLURM_STEP_NODELIST")
            .or_else(|| get(task, "SLURM_JOB_NODELIST"))
            .and_then(|l| first_host(&l)),
    );
    add(
        "MASTER_PORT",
        get(task, "SLURM_JOB_ID")
            .and_then(|j| j.parse::<u64>().ok())
            .map(|j| (j % 4536 + 61000).to_string()),
    );
    add(
        "WORLD_SIZE",
        get(task, "SLURM_STEP_NUM_TASKS").or_else(|| get(task, "SLURM_NTASKS")),
    );
    add("RANK", get(task, "SLURM_PROCID"));
    add("LOCAL_RANK", get(task, "SLURM_LOCALID"));
    // As torch.distributed.run does when a node has several processes.
    let count = |k: &str| {
        get(task, k)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(1)
    };
    if count("SLURM_STEP_NUM_TASKS") > count("SLURM_STEP_NUM_NODES") {
        add("OMP_NUM_THREADS", Some("1".to_string()));
    }
    out
}

/// The first host of a Slurm host list (`nid[001234-001240,001250],login1`
/// gives `nid001234`), as `scontrol show hostnames | head -1` does.
pub fn first_host(list: &str) -> Option<String> {
    let list = list.trim();
    let open = list.find('[');
    let comma = list.find(',');
    match (open, comma) {
        (Some(o), c) if c.is_none_or(|c| o < c) => {
            let close = list[o..].find(']')? + o;
            let first = list[o + 1..close].split([',', '-']).next()?;
            // A suffix after the brackets belongs to the same name.
            let suffix = list[close + 1..].split(',').next().unwrap_or_default();
            Some(format!("{}{first}{suffix}", &list[..o]))
        }
        _ => list
            .split(',')
            .next()
            .filter(|h| !h.is_empty())
            .map(str::to_string),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn first_hosts_of_slurm_lists() {
        assert_eq!(first_host("n1").as_deref(), Some("n1"));
        assert_eq!(first_host("n[1-3]").as_deref(), Some("n1"));
        assert_eq!(
            first_host("nid[001234-001240,001250]").as_deref(),
            Some("nid001234")
        );
        assert_eq!(first_host("a,b[2-3]").as_deref(), Some("a"));
        assert_eq!(first_host("rack[4-5]-gpu,x").as_deref(), Some("rack4-gpu"));
        assert_eq!(first_host(""), None);
    }

    #[test]
    fn pytorch_images_get_the_rendezvous() {
        let image = env(&[("PYTORCH_VERSION", "2.3.0")]);
        let task = env(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_STEP_NODELIST", "gpu[07-08]"),
            ("SLURM_JOB_ID", "123456"),
            ("SLURM_STEP_NUM_TASKS", "8"),
            ("SLURM_STEP_NUM_NODES", "2"),
        ]);
        let set = pytorch(&image, &task, &env(&[("MASTER_PORT", "29500")]));
        assert_eq!(
            set,
            env(&[
                ("MASTER_ADDR", "gpu07"),
                ("WORLD_SIZE", "8"),
                ("RANK", "5"),
                ("LOCAL_RANK", "1"),
                ("OMP_NUM_THREADS", "1"),
            ])
        );
        assert_eq!(
            pytorch(&image, &task, &[])[1],
            (
                "MASTER_PORT".to_string(),
                (123456 % 4536 + 61000).to_string()
            )
        );
        // Not a PyTorch image, or not under Slurm: nothing.
        assert!(pytorch(&[], &task, &[]).is_empty());
        assert!(pytorch(&image, &[], &[]).is_empty());
    }
}
