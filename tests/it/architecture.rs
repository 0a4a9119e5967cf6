//! The shape of the crate holds: imports point down the layers that `src/lib.rs`'s Layout list
//! names, no import cycle between files of `src/` (test modules and comments aside; a module
//! declaring or re-exporting its children is not an import), no file longer than about 900
//! lines before its tests, and no `too_many_arguments` allowance.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::support::repo;

/// Module path (`["pipeline", "decode"]`) -> the file's text.
fn sources() -> BTreeMap<Vec<String>, String> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<Vec<String>, String>) {
        for entry in std::fs::read_dir(dir).expect("src readable").flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "bin") {
                    walk(&path, root, out);
                }
                continue;
            }
            if path.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = path.strip_prefix(root).expect("under src");
            let mut parts: Vec<String> = rel
                .with_extension("")
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            if parts == ["lib"] || parts == ["main"] {
                parts.clear();
            }
            if parts.last().is_some_and(|p| p == "tests") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("readable");
            out.insert(parts, text);
        }
    }
    let root = repo().join("src");
    let mut out = BTreeMap::new();
    walk(&root, &root, &mut out);
    out
}

/// The text before `#[cfg(test)]`, without `//` comments.
fn code_only(text: &str) -> String {
    text.split("\n#[cfg(test)]")
        .next()
        .unwrap_or("")
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Module paths named after `crate::` or `super::` in `code`, as written (not yet resolved).
fn paths(code: &str, module: &[String], is_mod_file: bool) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    for (prefix, base) in [
        ("crate::", Vec::new()),
        ("super::", {
            // `super` of a mod.rs is its parent; of a plain file, the enclosing module.
            let mut b = module.to_vec();
            b.pop();
            let _ = is_mod_file;
            b
        }),
    ] {
        let mut rest = code;
        while let Some(at) = rest.find(prefix) {
            let before_ok = at == 0 || !rest[..at].ends_with(|c: char| ident(c) || c == ':');
            rest = &rest[at + prefix.len()..];
            if !before_ok {
                continue;
            }
            // `crate::{a::b, c}` expands to each item.
            let groups: Vec<String> = if let Some(inner) = rest.strip_prefix('{') {
                let end = inner.find('}').unwrap_or(inner.len());
                inner[..end]
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .collect()
            } else {
                let end = rest
                    .find(|c: char| !(ident(c) || c == ':'))
                    .unwrap_or(rest.len());
                vec![rest[..end].to_string()]
            };
            for g in groups {
                let mut p = base.clone();
                p.extend(
                    g.split("::")
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty() && s != "self" && !s.starts_with('{')),
                );
                out.push(p);
            }
        }
    }
    out
}

/// File -> the files it imports (test modules and comments aside).
fn edges() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let files = sources();
    let modules: BTreeSet<Vec<String>> = files.keys().cloned().collect();
    let resolve = |p: &[String]| -> Option<Vec<String>> {
        (1..=p.len())
            .rev()
            .map(|k| p[..k].to_vec())
            .find(|m| modules.contains(m))
    };
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (module, text) in &files {
        let deps = edges.entry(module.clone()).or_default();
        for p in paths(&code_only(text), module, true) {
            if let Some(target) = resolve(&p) {
                // A module declaring or re-exporting its own children is not an import.
                let child = target.len() > module.len() && target.starts_with(module);
                if target != *module && !child {
                    deps.insert(target);
                }
            }
        }
    }
    edges
}

/// The layers of the Layout list in `src/lib.rs`: each bullet is a layer, lowest first, and a
/// top-level module belongs to the first bullet that links it (`[`name`]` or `[`name::x`]`).
fn layers(lib: &str) -> BTreeMap<String, usize> {
    let doc = lib
        .split("# Layout")
        .nth(1)
        .expect("lib.rs has a Layout section");
    let mut bullets: Vec<String> = Vec::new();
    for line in doc.lines().skip(1) {
        let Some(text) = line.strip_prefix("//!") else {
            break;
        };
        let text = text.trim();
        if let Some(b) = text.strip_prefix("- ") {
            bullets.push(b.to_string());
        } else if let Some(last) = bullets.last_mut().filter(|_| !text.is_empty()) {
            last.push(' ');
            last.push_str(text);
        }
    }
    let mut layer = BTreeMap::new();
    for (i, bullet) in bullets.iter().enumerate() {
        for link in bullet.split("[`").skip(1) {
            let Some((path, _)) = link.split_once("`]") else {
                continue;
            };
            let top = path.split("::").next().unwrap_or(path);
            if !top.is_empty() && top.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                layer.entry(top.to_string()).or_insert(i);
            }
        }
    }
    layer
}

/// Upward imports: (importing file, imported file) where the import's layer is above the
/// importer's; modules missing from the list are reported as `(module, "not in the Layout")`.
fn upward(
    edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
    layer: &BTreeMap<String, usize>,
) -> Vec<String> {
    let mut out = BTreeSet::new();
    let rank = |m: &[String]| m.first().and_then(|top| layer.get(top).copied());
    for (from, deps) in edges {
        // The crate root and the test-only fixtures sit outside the layers.
        if from.is_empty() || from[0] == "testutil" {
            continue;
        }
        let Some(own) = rank(from) else {
            out.insert(format!("{} is not in the Layout list", from[0]));
            continue;
        };
        for to in deps {
            if to.first().is_some_and(|t| t == "testutil") {
                continue;
            }
            match rank(to) {
                Some(theirs) if theirs > own => {
                    out.insert(format!("{} -> {}", from.join("::"), to.join("::")));
                }
                None => {
                    out.insert(format!("{} is not in the Layout list", to[0]));
                }
                _ => {}
            }
        }
    }
    out.into_iter().collect()
}

#[test]
fn imports_point_down_the_layers_of_lib_rs() {
    let lib = std::fs::read_to_string(repo().join("src/lib.rs")).expect("lib.rs");
    let layer = layers(&lib);
    assert!(layer["record"] < layer["engine"] && layer["pipeline"] < layer["config"]);
    let found = upward(&edges(), &layer);
    assert!(
        found.is_empty(),
        "imports up the layers:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_layer_check_sees_an_upward_import() {
    let lib = "//! # Layout\n//!\n//! - [`low`]: one\n//! - [`high`], [`low::x`]: two\n";
    let layer = layers(lib);
    assert_eq!((layer["low"], layer["high"]), (0, 1));
    let v = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
    let mut edges = BTreeMap::new();
    edges.insert(v("low::a"), BTreeSet::from([v("high")]));
    edges.insert(v("high"), BTreeSet::from([v("low::a")]));
    edges.insert(v("other"), BTreeSet::new());
    assert_eq!(
        upward(&edges, &layer),
        ["low::a -> high", "other is not in the Layout list"]
    );
}

#[test]
fn no_import_cycle_between_files_of_src() {
    let edges = edges();
    assert!(edges.len() > 40, "found {} modules", edges.len());
    assert!(
        edges[&vec!["config".to_string()]]
            .contains(&vec!["pipeline".to_string(), "settings".to_string()]),
        "the parser sees config -> pipeline::settings"
    );
    // Depth-first search for a back edge.
    fn visit(
        m: &Vec<String>,
        edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        state: &mut BTreeMap<Vec<String>, u8>,
        stack: &mut Vec<Vec<String>>,
        cycles: &mut Vec<String>,
    ) {
        state.insert(m.clone(), 1);
        stack.push(m.clone());
        for d in edges.get(m).into_iter().flatten() {
            match state.get(d).copied().unwrap_or(0) {
                0 => visit(d, edges, state, stack, cycles),
                1 => {
                    let at = stack.iter().position(|s| s == d).unwrap_or(0);
                    let cycle: Vec<String> = stack[at..].iter().map(|s| s.join("::")).collect();
                    cycles.push(format!("{} -> {}", cycle.join(" -> "), d.join("::")));
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(m.clone(), 2);
    }
    let mut state = BTreeMap::new();
    let mut cycles = Vec::new();
    for m in edges.keys() {
        if !state.contains_key(m) {
            visit(m, &edges, &mut state, &mut Vec::new(), &mut cycles);
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_cycle_finder_sees_a_cycle() {
    let a = paths(
        "use crate::b::X;\nfn f() { super::c::g() }",
        &["a".into()],
        false,
    );
    assert_eq!(
        a,
        vec![
            vec!["b".to_string(), "X".into()],
            vec!["c".into(), "g".into()]
        ]
    );
    let grouped = paths("use crate::{kafka::RecordView, offsets};", &[], true);
    assert_eq!(grouped.len(), 2);
}

#[test]
fn files_stay_small_and_functions_take_few_arguments() {
    let mut long = Vec::new();
    for (module, text) in sources() {
        let code = text.split("\n#[cfg(test)]").next().unwrap_or("");
        let lines = code.lines().count();
        if lines > 900 {
            long.push(format!("{} ({lines} lines)", module.join("::")));
        }
        assert!(
            !code.contains("too_many_arguments"),
            "{} allows too_many_arguments: use a context struct",
            module.join("::")
        );
    }
    assert!(
        long.is_empty(),
        "files over 900 lines before their tests: {long:?}"
    );
}
