//! Generated layer stacks, flattened and compared with the model.

use proptest::prelude::*;

use super::*;

fn arb_name() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "c", "a/x", "a/y", "b/x", "a/x/deep", "c/z"])
        .prop_map(String::from)
}

fn arb_entry() -> impl Strategy<Value = OwnedE> {
    prop_oneof![
        arb_name().prop_map(OwnedE::Dir),
        (arb_name(), "[a-z]{0,4}").prop_map(|(p, c)| OwnedE::File(p, c)),
        (arb_name(), "[a-z]{1,4}").prop_map(|(p, t)| OwnedE::Sym(p, format!("/{t}"))),
        (
            arb_name(),
            prop::sample::select(vec![
                "a", "b", "c", "../a", "x/../b", "/a/x", "../../c", "."
            ])
        )
            .prop_map(|(p, t)| OwnedE::Sym(p, t.to_string())),
        arb_name().prop_map(|p| {
            let (parent, name) = p
                .rsplit_once('/')
                .map(|(a, b)| (format!("{a}/"), b.to_string()))
                .unwrap_or_default();
            let name = if name.is_empty() { p.clone() } else { name };
            OwnedE::File(format!("{parent}.wh.{name}"), String::new())
        }),
        prop::sample::select(vec!["a", "b"])
            .prop_map(|d| OwnedE::File(format!("{d}/.wh..wh..opq"), String::new())),
    ]
}

/// Keeps a layer the way real layer tars are: parents listed before
/// children (only with `parents`), each path once, nothing below a
/// non-directory of the same layer.
fn sanitize(l: Vec<OwnedE>, parents: bool) -> Vec<OwnedE> {
    let mut out: Vec<OwnedE> = Vec::new();
    let mut seen: BTreeMap<String, bool> = BTreeMap::new(); // path -> is dir
    for e in l {
        let p = match &e {
            OwnedE::Dir(p)
            | OwnedE::File(p, _)
            | OwnedE::Sym(p, _)
            | OwnedE::Hard(p, _)
            | OwnedE::Dev(p) => p.clone(),
        };
        let is_wh = p.rsplit('/').next().unwrap().starts_with(".wh.");
        if seen.contains_key(&p) {
            continue;
        }
        let parents_of: Vec<String> = {
            let parts: Vec<&str> = p.split('/').collect();
            (1..parts.len()).map(|i| parts[..i].join("/")).collect()
        };
        if parents_of.iter().any(|a| seen.get(a) == Some(&false)) {
            continue;
        }
        if !is_wh
            && seen.keys().any(|k| k.starts_with(&format!("{p}/")))
            && !matches!(e, OwnedE::Dir(_))
        {
            continue;
        }
        for a in parents_of {
            if !seen.contains_key(&a) {
                seen.insert(a.clone(), true);
                if parents {
                    out.push(OwnedE::Dir(a));
                }
            }
        }
        seen.insert(p, matches!(e, OwnedE::Dir(_)) || is_wh);
        out.push(e);
    }
    out
}

proptest! {
    #[test]
    fn flatten_matches_model(
        layers in prop::collection::vec(
            (prop::collection::vec(arb_entry(), 0..8), any::<bool>()), 1..5),
        count_known in any::<bool>(),
    ) {
        let layers: Vec<Vec<OwnedE>> =
            layers.into_iter().map(|(l, parents)| sanitize(l, parents)).collect();
        let tars: Vec<Vec<u8>> = layers.iter().map(|l| layer_owned(l)).collect();
        let want = model_checked(&layers);
        match (flatten_with(&tars, count_known), want) {
            (Ok((got, _)), Ok(want)) => prop_assert_eq!(got, want),
            (Ok((got, _)), Err(ModelRefusal::Escape)) => {
                prop_assert!(false, "accepted what climbs above the root: {got:?}")
            }
            (_, Err(ModelRefusal::ParentNotDir)) => {}
            // Refused on purpose: a parent that is a file where an extractor
            // would fail too, a symlink that climbs above the root, an entry
            // below a non-directory listed later in its own layer.
            (Err(Error::UnsafeEntry { .. }), _) => {}
            (Err(Error::BadImage(m)), _) if m.contains("earlier entry of the same layer") => {}
            (Err(e), _) => prop_assert!(false, "unexpected error {e}"),
        }
    }

    #[test]
    fn normalize_never_escapes(raw in "[a-z./]{0,24}") {
        if let Ok(n) = normalize("l", raw.as_bytes()) {
            let s = String::from_utf8(n).unwrap();
            prop_assert!(!s.starts_with('/'));
            prop_assert!(!s.split('/').any(|c| c == ".." || c == "."));
        }
    }
}
