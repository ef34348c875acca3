//! A crate's modules import each other in one direction only: at every level of the module
//! tree, the children of one module form no circle.
//!
//! The graph is read from the sources under `src/` (`src/bin/` holds separate crates and is
//! left out; so are comments, doc links included, and code after a file's `#[cfg(test)]`). A module's references are the paths it
//! names that start with `crate::`, `super::`, `self::` or one of its own child modules,
//! including `use` groups (`crate::{a, b::c}`). A reference from anywhere below child `a` of
//! module `m` to anywhere below its sibling `b` is an edge `a -> b` among `m`'s children; a
//! strongly connected group of more than one child is a circle.
//!
//! The same references check a crate's layers ([`crossings`]): the modules of one layer name
//! none of another's (kfdq's core never names the agent or the doctor).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A circle found among the children of `parent` (`""` is the crate root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Circle {
    /// The module whose children form the circle.
    pub parent: String,
    /// The children in the circle, sorted.
    pub members: Vec<String>,
}

/// The crate's modules: path (`a::b`) -> source text, tests left out. The crate root is `""`.
pub fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries =
            std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
        for e in entries {
            let p = e.expect("a directory entry").path();
            if p.is_dir() {
                if p != src.join("bin") {
                    stack.push(p);
                }
                continue;
            }
            if p.extension().and_then(|x| x.to_str()) != Some("rs") {
                continue;
            }
            let rel = p.strip_prefix(src).expect("below src");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let file = parts.pop().unwrap_or_default();
            let stem = file.trim_end_matches(".rs");
            if !matches!(stem, "mod" | "lib" | "main") || !parts.is_empty() && stem != "mod" {
                parts.push(stem.to_string());
            }
            let text =
                std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
            let code: String = text
                .split("#[cfg(test)]")
                .next()
                .unwrap_or("")
                .lines()
                .map(|l| l.split("//").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            out.entry(parts.join("::"))
                .or_insert_with(String::new)
                .push_str(&code);
        }
    }
    out
}

fn join(base: &str, name: &str) -> String {
    if base.is_empty() {
        name.to_string()
    } else {
        format!("{base}::{name}")
    }
}

fn parent(m: &str) -> &str {
    m.rfind("::").map_or("", |i| &m[..i])
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The deepest known module named by `segments` below `base`.
fn resolve(known: &BTreeSet<String>, base: &str, rest: &str) -> Option<String> {
    let mut at = base.to_string();
    let mut rest = rest;
    let mut found = None;
    loop {
        let name = ident(rest);
        if name.is_empty() {
            break;
        }
        let next = join(&at, name);
        if !known.contains(&next) {
            break;
        }
        found = Some(next.clone());
        at = next;
        rest = &rest[name.len()..];
        match rest.strip_prefix("::") {
            Some(r) if !r.starts_with('{') => rest = r,
            Some(r) => {
                // A group: each member may name a module below `at`.
                let inner = &r[1..r.find('}').unwrap_or(1)];
                let members: Vec<String> = inner
                    .split(',')
                    .filter_map(|x| resolve(known, &at, x.trim()))
                    .collect();
                return members.into_iter().next().or(found);
            }
            None => break,
        }
    }
    found
}

/// The modules `module`'s text refers to.
pub fn references(known: &BTreeSet<String>, module: &str, text: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    let bytes = text.as_bytes();
    for (i, _) in text.match_indices("::") {
        // The path's first segment: the identifier right before this `::`, at a path start.
        let start = text[..i]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |j| j + 1);
        if start > 0 && (bytes[start - 1] == b':' || bytes[start - 1] == b'.') {
            continue;
        }
        let first = &text[start..i];
        let rest = &text[i + 2..];
        let base = match first {
            "crate" => String::new(),
            "super" => parent(module).to_string(),
            "self" => module.to_string(),
            child if known.contains(&join(module, child)) => {
                refs.insert(join(module, child));
                continue;
            }
            _ => continue,
        };
        if let Some(group) = rest.strip_prefix('{') {
            let inner = &group[..group.find('}').unwrap_or(0)];
            refs.extend(
                inner
                    .split(',')
                    .filter_map(|x| resolve(known, &base, x.trim())),
            );
        } else if let Some(m) = resolve(known, &base, rest) {
            refs.insert(m);
        }
    }
    refs.remove(module);
    refs
}

/// Strongly connected groups of more than one node (Tarjan), each sorted.
pub fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        on: BTreeSet<String>,
        out: Vec<Vec<String>>,
    }
    fn visit(t: &mut T<'_>, v: &str) {
        let n = t.index.len();
        t.index.insert(v.into(), n);
        t.low.insert(v.into(), n);
        t.stack.push(v.into());
        t.on.insert(v.into());
        let succ: Vec<String> = t.g.get(v).into_iter().flatten().cloned().collect();
        for w in succ {
            let lw = if !t.index.contains_key(&w) {
                visit(t, &w);
                t.low[&w]
            } else if t.on.contains(&w) {
                t.index[&w]
            } else {
                continue;
            };
            let lv = t.low[v].min(lw);
            t.low.insert(v.into(), lv);
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(&w);
                let done = w == v;
                comp.push(w);
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g: graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

/// The child of `parent` that `m` lies in (or is), if any.
fn child_of(parent: &str, m: &str) -> Option<String> {
    let rest = if parent.is_empty() {
        m
    } else {
        m.strip_prefix(parent)?.strip_prefix("::")?
    };
    let first = rest.split("::").next().filter(|s| !s.is_empty())?;
    Some(join(parent, first))
}

/// Every circle in the crate whose sources are in `src`, at every level of its module tree.
pub fn crate_circles(src: &Path) -> (BTreeMap<String, String>, Vec<Circle>) {
    let mods = modules(src);
    let known: BTreeSet<String> = mods.keys().cloned().collect();
    let edges: Vec<(String, String)> = mods
        .iter()
        .flat_map(|(m, text)| {
            references(&known, m, text)
                .into_iter()
                .map(move |r| (m.clone(), r))
        })
        .collect();
    let mut found = Vec::new();
    for p in &known {
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, to) in &edges {
            if let (Some(a), Some(b)) = (child_of(p, from), child_of(p, to))
                && a != b
            {
                graph.entry(a).or_default().insert(b);
            }
        }
        found.extend(circles(&graph).into_iter().map(|members| Circle {
            parent: p.clone(),
            members,
        }));
    }
    (mods, found)
}

/// Fails the test when the crate in `src` has a circle, naming it; also when fewer than
/// `min_modules` modules were read (a wrong path would otherwise pass).
pub fn assert_no_circles(src: &Path, min_modules: usize) {
    let (mods, found) = crate_circles(src);
    assert!(
        mods.len() >= min_modules,
        "read {} modules from {}, expected at least {min_modules}",
        mods.len(),
        src.display()
    );
    assert!(
        found.is_empty(),
        "modules of {} that import each other in a circle (parent: members): {}",
        src.display(),
        found
            .iter()
            .map(|c| format!(
                "{}: {}",
                if c.parent.is_empty() {
                    "crate"
                } else {
                    &c.parent
                },
                c.members.join(" <-> ")
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
}

/// Whether `m` is one of `roots` or lies below one.
fn within(m: &str, roots: &[&str]) -> bool {
    roots
        .iter()
        .any(|r| m == *r || m.strip_prefix(r).is_some_and(|rest| rest.starts_with("::")))
}

/// The references (module, module referred to) from the modules at or below `from` to those at
/// or below `to`, in the crate whose sources are in `src`: each one breaks a layering rule.
pub fn crossings(src: &Path, from: &[&str], to: &[&str]) -> Vec<(String, String)> {
    let mods = modules(src);
    let known: BTreeSet<String> = mods.keys().cloned().collect();
    mods.iter()
        .filter(|(m, _)| within(m, from))
        .flat_map(|(m, text)| {
            references(&known, m, text)
                .into_iter()
                .filter(|r| within(r, to))
                .map(move |r| (m.clone(), r))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(ms: &[&str]) -> BTreeSet<String> {
        ms.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn references_resolve_crate_super_self_groups_and_children() {
        let k = known(&["", "a", "a::x", "a::y", "b", "c"]);
        assert_eq!(
            references(
                &k,
                "a::x",
                "use super::y::F; use crate::{b, c::G}; let z = a::x::q;"
            ),
            known(&["a::y", "b", "c"])
        );
        assert_eq!(
            references(&k, "a", "use self::x::F; y::g(); foo::y::h(); v.c::z"),
            known(&["a::x", "a::y"])
        );
        assert_eq!(
            references(&k, "", "a::f(); crate::b::g()"),
            known(&["a", "b"])
        );
    }

    #[test]
    fn a_circle_is_found_at_its_level() {
        let g: BTreeMap<String, BTreeSet<String>> = [
            ("a", vec!["b"]),
            ("b", vec!["c"]),
            ("c", vec!["a"]),
            ("d", vec!["a"]),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
        .collect();
        assert_eq!(
            circles(&g),
            vec![vec!["a".to_string(), "b".into(), "c".into()]]
        );
    }

    #[test]
    fn a_planted_circle_between_submodules_is_reported() {
        let dir = tempfile::tempdir().expect("tempdir");
        let src = dir.path();
        std::fs::create_dir_all(src.join("m")).expect("mkdir");
        std::fs::write(src.join("lib.rs"), "mod m; mod top;").expect("write");
        std::fs::write(src.join("top.rs"), "use crate::m::p::X;").expect("write");
        std::fs::write(src.join("m/mod.rs"), "mod p; mod q;").expect("write");
        std::fs::write(src.join("m/p.rs"), "use super::q::Y;").expect("write");
        std::fs::write(
            src.join("m/q.rs"),
            "use crate::m::p::X;\n#[cfg(test)]\nuse crate::top::Z;",
        )
        .expect("write");
        let (mods, found) = crate_circles(src);
        assert_eq!(mods.len(), 5, "{mods:?}");
        assert_eq!(
            found,
            vec![Circle {
                parent: "m".into(),
                members: vec!["m::p".into(), "m::q".into()]
            }]
        );
    }

    #[test]
    fn a_crossing_between_layers_is_reported() {
        let dir = tempfile::tempdir().expect("tempdir");
        let src = dir.path();
        std::fs::create_dir_all(src.join("core")).expect("mkdir");
        std::fs::write(src.join("lib.rs"), "mod core; mod agent; mod agents;").expect("write");
        std::fs::write(src.join("core/mod.rs"), "mod wire;").expect("write");
        std::fs::write(src.join("core/wire.rs"), "use crate::agent::X;").expect("write");
        std::fs::write(src.join("agent.rs"), "use crate::core::wire::Y;").expect("write");
        std::fs::write(src.join("agents.rs"), "").expect("write");
        assert_eq!(
            crossings(src, &["core"], &["agent"]),
            vec![("core::wire".to_string(), "agent".to_string())]
        );
        // The other direction is allowed; a module whose name only starts alike is not below.
        assert!(crossings(src, &["core"], &["agents"]).is_empty());
        assert!(crossings(src, &["agent"], &["core::wire"]).len() == 1);
    }
}
