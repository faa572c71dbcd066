use super::*;

fn task(step: Step) -> Task {
    Task {
        job_id: 42,
        step,
        argv: vec!["/usr/bin/hostname".into(), "-s".into()],
        cwd: None,
        node: None,
        several_on_node: false,
    }
}

/// The command line with the job's scope for named containers, joined.
fn joined(o: &Options, image: Option<&str>, t: &Task) -> String {
    berth_argv("b", o, image, t, &[], NamedSite::job()).join(" ")
}

#[test]
fn defaults_are_pyxis_defaults_and_shared_mode() {
    let mut o = Options::default();
    apply(&mut o, "container-image", Some("reg:5000/x:1")).unwrap();
    let a = berth_argv(
        "/b",
        &o,
        Some("sha256:ab"),
        &task(Step::Id(3)),
        &[],
        NamedSite::job(),
    );
    assert_eq!(
        a,
        [
            "/b",
            "run",
            "--argv0-fallback",
            "--env-below-image",
            "--shared",
            "slurm-42.3",
            "--entrypoint=",
            "--workdir-image",
            "sha256:ab",
            "/usr/bin/hostname",
            "-s"
        ]
    );
}

#[test]
fn every_option_maps() {
    let mut o = Options::default();
    for (n, v) in [
        ("container-image", Some("img")),
        (
            "container-mounts",
            Some("/data,/scratch:/s:ro,tmpfs:/t:size=1G,/data"),
        ),
        ("container-workdir", Some("/work")),
        ("container-name", Some("dev:exec")),
        ("container-writable", None),
        ("no-container-mount-home", None),
        ("container-remap-root", None),
        ("container-entrypoint", None),
        ("container-entrypoint-log", None),
        ("container-env", Some("A,B")),
        ("container-gpus", Some("0,1")),
        ("container-modules", Some("mpi,cxi")),
    ] {
        apply(&mut o, n, v).unwrap();
    }
    let a = berth_argv(
        "b",
        &o,
        Some("img"),
        &task(Step::Batch),
        &["/spool:/spool:ro".into()],
        NamedSite::job(),
    )
    .join(" ");
    assert_eq!(
        a,
        "b run --argv0-fallback --env-below-image --shared slurm-42-dev --reuse running --entrypoint-first --entrypoint-log -v /data:/data -v /scratch:/s:ro -v /spool:/spool:ro --tmpfs /t:size=1G -w /work --workdir-must-exist -e A -e B --writable --no-home --fakeroot --gpus 0,1 --mpi --module cxi /usr/bin/hostname -s"
    );
}

#[test]
fn the_images_workdir_unless_one_is_named_or_a_batch_script() {
    let mut o = Options::default();
    let mut t = task(Step::Id(1));
    t.cwd = Some("/home/u/run".into());
    let a = berth_argv("b", &o, Some("img"), &t, &[], NamedSite::job()).join(" ");
    assert!(
        a.contains(" --workdir-image ") && !a.contains(" -w "),
        "{a}"
    );
    t.step = Step::Batch;
    let a = berth_argv("b", &o, Some("img"), &t, &[], NamedSite::job()).join(" ");
    assert!(a.contains(" -w /home/u/run "), "{a}");
    apply(&mut o, "container-workdir", Some("/w")).unwrap();
    let a = berth_argv("b", &o, Some("img"), &t, &[], NamedSite::job()).join(" ");
    assert!(a.contains(" -w /w ") && !a.contains("/home/u/run"), "{a}");
    for (given, dir) in [("../", "/"), ("usr/../bin", "/bin"), ("/a/./b/", "/a/b")] {
        apply(&mut o, "container-workdir", Some(given)).unwrap();
        assert_eq!(o.workdir.as_deref(), Some(dir), "{given}");
    }
}

#[test]
fn named_containers_are_joined_as_they_run() {
    let mut o = Options::default();
    apply(&mut o, "container-name", Some("dev")).unwrap();
    let t = task(Step::Id(2));
    // Without an image: joined where it runs, else started from its
    // changes on the node, stacked read-only unless the step is writable.
    let a = berth_argv("b", &o, None, &t, &[], NamedSite::job()).join(" ");
    assert!(
        a.contains("--shared slurm-42-dev --reuse existing --name dev --name-readonly")
            && a.ends_with("--workdir-image /usr/bin/hostname -s"),
        "{a}"
    );
    apply(&mut o, "container-writable", None).unwrap();
    let a = berth_argv("b", &o, Some("img"), &t, &[], NamedSite::job()).join(" ");
    assert!(
        a.contains("--reuse any --name dev ")
            && !a.contains("--name-readonly")
            && a.contains(" img /usr/bin/hostname"),
        "{a}"
    );
    apply(&mut o, "container-name", Some("dev:create")).unwrap();
    let a = berth_argv("b", &o, Some("img"), &t, &[], NamedSite::job()).join(" ");
    assert!(a.contains("--reuse new"), "{a}");
    // `:exec` joins the one that runs, or fails: nothing is started.
    apply(&mut o, "container-name", Some("dev:exec")).unwrap();
    let a = berth_argv("b", &o, Some("img"), &t, &[], NamedSite::job()).join(" ");
    assert!(
        a.contains("--reuse running") && !a.contains(" img ") && !a.contains("--name"),
        "{a}"
    );
}

#[test]
fn a_steps_name_joins_its_unnamed_container() {
    // Pyxis's name of step 3's unnamed container in job 42 (exec.bats 3).
    let mut o = Options::default();
    apply(&mut o, "container-name", Some("42.3")).unwrap();
    let t = task(Step::Id(4));
    for named in [NamedSite::job(), NamedSite { global: true }] {
        let a = berth_argv("b", &o, Some("img"), &t, &[], named).join(" ");
        assert!(
            a.contains("--shared slurm-42.3 --reuse running ")
                && !a.contains("--name")
                && !a.contains(" img "),
            "{a}"
        );
    }
    // Another job's step, or not a step: a name as any other.
    apply(&mut o, "container-name", Some("41.3")).unwrap();
    assert_eq!(key(&o, &t), "slurm-42-41.3");
    apply(&mut o, "container-name", Some("42.x")).unwrap();
    assert_eq!(key(&o, &t), "slurm-42-42.x");
}

#[test]
fn global_named_containers_are_berths_named_containers() {
    let global = NamedSite { global: true };
    let mut o = Options::default();
    apply(&mut o, "container-name", Some("dev")).unwrap();
    let mut t = task(Step::Id(2));
    let a = berth_argv("b", &o, Some("img"), &t, &[], global).join(" ");
    assert!(
        a.contains("--name dev --reuse any") && !a.contains("--shared") && a.contains(" img "),
        "{a}"
    );
    // Without an image: the container's own; several tasks of a node
    // stack it read-only.
    t.several_on_node = true;
    let a = berth_argv("b", &o, None, &t, &[], global).join(" ");
    assert!(
        a.contains("--name dev --reuse existing --name-readonly")
            && a.ends_with("--workdir-image /usr/bin/hostname -s"),
        "{a}"
    );
}

#[test]
fn roots_home_is_the_users_home_under_remap_root() {
    let mut o = Options::default();
    assert_eq!(root_home_bind(&o, Some("/home/u")), None);
    apply(&mut o, "container-remap-root", None).unwrap();
    assert_eq!(
        root_home_bind(&o, Some("/home/u/")).as_deref(),
        Some("/home/u:/root")
    );
    assert_eq!(root_home_bind(&o, Some("rel")), None);
    assert_eq!(root_home_bind(&o, None), None);
    apply(&mut o, "no-container-mount-home", None).unwrap();
    assert_eq!(root_home_bind(&o, Some("/home/u")), None);
}

#[test]
fn per_task_mode_and_keys() {
    let mut o = Options::default();
    apply(&mut o, "container-mode", Some("per-task")).unwrap();
    let a = berth_argv(
        "b",
        &o,
        Some("img"),
        &task(Step::Id(0)),
        &[],
        NamedSite::job(),
    );
    assert!(!a.contains(&"--shared".to_string()));
    assert_eq!(key(&o, &task(Step::Batch)), "slurm-42.batch");
    let mut on = task(Step::Id(7));
    on.node = Some("nid0012/x".into());
    assert_eq!(key(&o, &on), "slurm-42.7.nid0012x");
    assert_eq!(key(&o, &task(Step::Interactive)), "slurm-42.interactive");
}

#[test]
fn bad_values_say_why() {
    let mut o = Options::default();
    assert!(apply(&mut o, "container-mode", Some("pod"))
        .unwrap_err()
        .contains("per-task"));
    assert!(apply(&mut o, "container-mounts", Some("rel:/x"))
        .unwrap_err()
        .contains("use a path"));
    assert!(apply(&mut o, "container-env", Some("FOO,"))
        .unwrap_err()
        .contains("empty item"));
    assert!(apply(&mut o, "container-name", Some("n:attach"))
        .unwrap_err()
        .contains("unknown flag"));
    assert!(apply(&mut o, "container-mounts", Some("/a:/b:rbind+suid"))
        .unwrap_err()
        .contains("suid"));
    assert!(apply(&mut o, "container-name", Some("a/b")).is_err());
    // The node's rule, at submission: a name the node would refuse under
    // container_scope=global (where it names a directory) fails here.
    for bad in [".x", "-x", "_x", &"n".repeat(129)] {
        assert!(apply(&mut o, "container-name", Some(bad))
            .unwrap_err()
            .contains("starting with a letter or digit"));
    }
    assert!(apply(&mut o, "container-image", Some(" ")).is_err());
}

#[test]
fn an_environment_file_names_the_image_and_the_entrypoint() {
    let mut o = Options::default();
    apply(&mut o, "environment", Some("pt")).unwrap();
    let a = joined(&o, Some("sha256:1"), &task(Step::Id(0)));
    assert!(
        a.contains("--environment pt --image sha256:1 ") && !a.contains("--entrypoint"),
        "{a}"
    );
}

#[test]
fn a_saved_container_is_the_task_s_own() {
    let mut o = Options::default();
    apply(&mut o, "container-save", Some("out.sqsh")).unwrap();
    let a = joined(&o, Some("img"), &task(Step::Id(0)));
    assert!(
        a.contains("--save ./out.sqsh") && !a.contains("--shared"),
        "{a}"
    );
    assert!(apply(&mut o, "container-save", Some("/tmp/")).is_err());
}
