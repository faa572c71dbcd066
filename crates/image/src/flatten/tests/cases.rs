//! Examples: each a layer stack and what the flattened tree must hold.

use super::*;

#[test]
fn upper_replaces_lower() {
    check_against_model(&[
        &[
            E::Dir("etc"),
            E::File("etc/a", "old"),
            E::File("etc/b", "b"),
        ],
        &[E::File("etc/a", "new")],
    ]);
}

#[test]
fn whiteouts_and_opaque() {
    check_against_model(&[
        &[
            E::Dir("d"),
            E::File("d/x", "x"),
            E::File("d/y", "y"),
            E::Dir("o"),
            E::File("o/1", "1"),
            E::File("keep", "k"),
        ],
        &[
            E::File("d/.wh.x", ""),
            E::Dir("o"),
            E::File("o/.wh..wh..opq", ""),
            E::File("o/2", "2"),
        ],
    ]);
}

#[test]
fn whiteout_does_not_hide_same_layer() {
    let (t, _) = flatten(&[
        layer(&[E::File("a", "lower")]),
        layer(&[E::File("a", "same"), E::File(".wh.a", "")]),
    ])
    .unwrap();
    assert_eq!(t.get("a"), Some(&Node::File("same".into())));
}

#[test]
fn file_replaced_by_dir_and_dir_by_file() {
    check_against_model(&[
        &[E::File("f", "file"), E::Dir("d"), E::File("d/inner", "i")],
        &[
            E::Dir("f"),
            E::File("f/child", "c"),
            E::File("d", "now a file"),
        ],
    ]);
}

#[test]
fn hard_link_keeps_old_content_when_target_overwritten() {
    let (t, _) = flatten(&[
        layer(&[E::File("t", "old"), E::Hard("l", "t")]),
        layer(&[E::File("t", "new")]),
    ])
    .unwrap();
    assert_eq!(t.get("t"), Some(&Node::File("new".into())));
    assert_eq!(t.get("l"), Some(&Node::File("old".into())));
}

#[test]
fn hard_link_pairs_and_chains() {
    let (t, _) = flatten(&[
        layer(&[E::File("t", "old"), E::Hard("l1", "t"), E::Hard("l2", "t")]),
        layer(&[E::File(".wh.t", "")]),
    ])
    .unwrap();
    assert_eq!(t.get("t"), None);
    assert_eq!(t.get("l1"), Some(&Node::File("old".into())));
    assert_eq!(t.get("l2"), Some(&Node::File("old".into())));
}

#[test]
fn devices_dropped_and_shadow_lower() {
    let (t, stats) = flatten(&[
        layer(&[E::File("dev/null", "x")]),
        layer(&[E::Dev("dev/null")]),
    ])
    .unwrap();
    assert_eq!(t.get("dev/null"), None);
    assert_eq!(stats.dropped_devices, vec!["dev/null".to_string()]);
}

#[test]
fn names_are_normalised() {
    let (t, _) = flatten(&[layer(&[
        E::Dir("./"),
        E::Dir("./a/"),
        E::File("./a/./b", "b"),
    ])])
    .unwrap();
    assert_eq!(t.get("a/b"), Some(&Node::File("b".into())));
}

fn refused(layers: &[Vec<u8>], needle: &str) {
    match flatten(layers) {
        Err(e @ Error::UnsafeEntry { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(needle), "{msg} lacks {needle}");
        }
        other => panic!("expected refusal naming {needle}, got {other:?}"),
    }
}

#[test]
fn escapes_are_refused() {
    refused(&[layer(&[E::File("../escape", "x")])], "../escape");
    refused(
        &[layer(&[E::File("a/../../escape", "x")])],
        "a/../../escape",
    );
    refused(&[layer(&[E::File("/../abs", "x")])], "/../abs");
    // Symlinked parents that climb above the root, in the same layer and
    // in a lower one, emitted at once and deferred.
    refused(
        &[layer(&[
            E::Sym("lnk", "../../tmp"),
            E::File("lnk/escape", "x"),
        ])],
        "lnk/escape",
    );
    refused(
        &[
            layer(&[E::Dir("a"), E::Sym("a/lnk", "../../tmp")]),
            layer(&[E::File("a/lnk/escape", "x")]),
        ],
        "a/lnk/escape",
    );
    refused(
        &[
            layer(&[E::Sym("lnk", "/usr/../../tmp")]),
            layer(&[E::File("lnk/escape", "x")]),
        ],
        "lnk/escape",
    );
    refused(&[layer(&[E::Hard("h", "../../etc/passwd")])], "\"h\"");
    refused(&[layer(&[E::Hard("h", "/../etc/passwd")])], "\"h\"");
    refused(
        &[layer(&[E::Sym("s", "/etc"), E::Hard("h", "s/passwd")])],
        "\"h\"",
    );
    refused(&[layer(&[E::Dir("d"), E::Hard("h", "d")])], "\"h\"");
    refused(
        &[layer(&[
            E::Sym("l", "m"),
            E::Sym("m", "l"),
            E::File("l/x", "x"),
        ])],
        "loops",
    );
    refused(&[layer(&[E::Sym("/", "/tmp")])], "root directory");
}

#[test]
fn absolute_symlinked_parents_stay_inside_the_root() {
    // What would be an escape on the host lands inside the image.
    let (t, _) = flatten(&[layer(&[E::Sym("lnk", "/tmp"), E::File("lnk/inside", "x")])]).unwrap();
    assert_eq!(t.get("tmp/inside"), Some(&Node::File("x".into())));
    assert_eq!(t.get("lnk"), Some(&Node::Sym("/tmp".into())));
    let (t, _) = flatten(&[
        layer(&[E::Sym("lnk", "/tmp")]),
        layer(&[E::File("lnk/inside", "x")]),
    ])
    .unwrap();
    assert_eq!(t.get("tmp/inside"), Some(&Node::File("x".into())));
}

#[test]
fn the_root_entry_and_absolute_names() {
    // umoci insert DIR / names the root `/`; GNU tar -P writes `/etc/x`.
    for root in ["/", ".", "./", "//"] {
        let (t, stats) = flatten(&[layer(&[
            E::Dir(root),
            E::Dir("/etc/"),
            E::File("/etc/x", "x"),
            E::Hard("/etc/y", "/etc/x"),
            E::File("a/../b", "b"),
        ])])
        .unwrap();
        assert_eq!(t.get("etc/x"), Some(&Node::File("x".into())), "{root}");
        assert_eq!(t.get("etc/y"), Some(&Node::File("x".into())), "{root}");
        assert_eq!(t.get("b"), Some(&Node::File("b".into())), "{root}");
        assert_eq!(stats.entries, 5, "{root}");
    }
}

/// The root entry's mode, owner and times become the root's.
#[test]
fn the_root_entry_gives_the_roots_attributes() {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = raw_header("/", EntryType::Directory, 0, "");
    h.set_mode(0o750);
    h.set_uid(12);
    h.set_cksum();
    b.append(&h, &b""[..]).unwrap();
    let out = flatten_raw(&b.into_inner().unwrap());
    let mut ar = tar::Archive::new(&out[..]);
    let e = ar.entries().unwrap().next().unwrap().unwrap();
    assert_eq!(&e.path_bytes()[..], b"./");
    assert_eq!(e.header().mode().unwrap(), 0o750);
    assert_eq!(e.header().uid().unwrap(), 12);
}

#[test]
fn writes_through_a_lower_merged_usr_symlink_land_in_usr() {
    // The image: a merged-/usr base, an upper layer adding
    // lib/newfile without listing lib/.
    let base: &[E] = &[
        E::Sym("lib", "usr/lib"),
        E::Sym("bin", "/usr/bin"),
        E::Dir("usr"),
        E::Dir("usr/lib"),
        E::File("usr/lib/old", "old"),
        E::Dir("usr/bin"),
    ];
    let upper: &[E] = &[
        E::File("lib/newfile", "new"),
        E::File("lib/old", "replaced"),
        E::File("bin/tool", "t"),
    ];
    for known in [true, false] {
        let (t, stats) = flatten_with(&[layer(base), layer(upper)], known).unwrap();
        assert_eq!(t.get("usr/lib/newfile"), Some(&Node::File("new".into())));
        assert_eq!(t.get("usr/lib/old"), Some(&Node::File("replaced".into())));
        assert_eq!(t.get("usr/bin/tool"), Some(&Node::File("t".into())));
        assert_eq!(t.get("lib"), Some(&Node::Sym("usr/lib".into())));
        assert!(stats.deferred >= 3);
    }
    check_against_model(&[base, upper]);
    // A layer that lists lib/ as a directory replaces the symlink, as
    // umoci and containers/storage do.
    check_against_model(&[base, &[E::Dir("lib"), E::File("lib/newfile", "new")]]);
    // Lower entries listed before the symlink, deeper chains, three layers.
    check_against_model(&[
        &[
            E::Dir("usr"),
            E::Dir("usr/lib"),
            E::File("usr/lib/x", "base"),
            E::Sym("lib", "usr/lib"),
        ],
        &[E::Dir("lib/sub"), E::File("lib/x", "mid")],
        &[E::File("lib/sub/y", "top"), E::File("lib/x", "top")],
    ]);
    // An upper file over a lower directory reached through the symlink.
    check_against_model(&[
        &[
            E::Sym("lib", "usr/lib"),
            E::Dir("usr"),
            E::Dir("usr/lib"),
            E::Dir("usr/lib/d"),
            E::File("usr/lib/d/inner", "i"),
        ],
        &[E::File("lib/d", "now a file")],
    ]);
}

/// A tar stream as bytes, without the end-of-archive marker and, with
/// `pad` false, without the last entry's padding either.
fn unterminated(entries: &[E], pad: bool) -> Vec<u8> {
    let full = layer(entries);
    let mut end = 0;
    let mut ar = tar::Archive::new(&full[..]);
    for e in ar.entries().unwrap() {
        let e = e.unwrap();
        end = e.raw_file_position() + e.header().entry_size().unwrap();
    }
    let end = if pad { end.div_ceil(512) * 512 } else { end };
    full[..end as usize].to_vec()
}

#[test]
fn a_layer_without_end_marker_or_last_padding_has_ended() {
    for pad in [true, false] {
        let l = unterminated(&[E::Dir("d"), E::File("d/f", "hi\n")], pad);
        let (t, _) = flatten(&[layer(&[E::File("base", "b")]), l]).unwrap();
        assert_eq!(t.get("d/f"), Some(&Node::File("hi\n".into())), "pad {pad}");
    }
}

#[test]
fn a_layer_cut_inside_an_entry_is_truncated() {
    let big = "x".repeat(2000);
    let whole = layer(&[E::File("f", Box::leak(big.into_boxed_str()))]);
    // Inside the content, at a block boundary and not; inside a header.
    for cut in [512 + 1024, 512 + 700, 512 + 2000 + 5, 300] {
        let l = whole[..cut].to_vec();
        let err = flatten(&[l]).unwrap_err();
        assert!(matches!(err, Error::BadImage(_)), "{cut}: {err}");
        assert!(err.to_string().contains("truncated"), "{cut}: {err}");
    }
}

#[test]
fn upper_symlink_over_lower_dir_hides_lower_contents() {
    // Not an escape: the upper layer replaced the directory by a link.
    check_against_model(&[
        &[E::Dir("d"), E::File("d/x", "x")],
        &[E::Sym("d", "/elsewhere")],
    ]);
}

#[test]
fn dangling_hard_link_is_bad_image() {
    let err = flatten(&[layer(&[E::Hard("h", "nothing")])]).unwrap_err();
    assert!(matches!(err, Error::BadImage(_)), "{err}");
}

#[test]
fn xattrs_pass_through() {
    let mut b = tar::Builder::new(Vec::new());
    b.append_pax_extensions([("SCHILY.xattr.user.k", &b"v"[..])])
        .unwrap();
    let mut h = raw_header("f", EntryType::Regular, 1, "");
    h.set_cksum();
    b.append(&h, &b"1"[..]).unwrap();
    let out = flatten_raw(&b.into_inner().unwrap());
    let mut ar = tar::Archive::new(&out[..]);
    let mut e = ar.entries().unwrap().next().unwrap().unwrap();
    let exts: Vec<(String, Vec<u8>)> = e
        .pax_extensions()
        .unwrap()
        .unwrap()
        .map(|x| {
            let x = x.unwrap();
            (x.key().unwrap().to_string(), x.value_bytes().to_vec())
        })
        .collect();
    assert_eq!(
        exts,
        vec![("SCHILY.xattr.user.k".to_string(), b"v".to_vec())]
    );
}

#[test]
fn hard_link_keeps_old_content_when_a_deferred_entry_overwrites_its_target() {
    // The upper layer does not list d/, so its d/t waits; the lower d/t is
    // held back with it, and the lower hard link to it too.
    let (t, _) = flatten(&[
        layer(&[E::Dir("d"), E::File("d/t", "old"), E::Hard("d/l", "d/t")]),
        layer(&[E::File("d/t", "new")]),
    ])
    .unwrap();
    assert_eq!(t.get("d/t"), Some(&Node::File("new".into())));
    assert_eq!(t.get("d/l"), Some(&Node::File("old".into())));
}
