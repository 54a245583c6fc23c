//! The crate's modules depend on each other in one direction only: no circles, neither
//! among its modules nor among its layers.
//!
//! Reads `src/**/*.rs` and takes each file's `crate::` paths (in `use` declarations and in
//! paths, test modules included; comments are skipped, so doc links do not count). A path
//! counts for the longest module it names (`crate::wire::frame::OVERHEAD` for
//! `wire::frame`, `crate::wire::Reader` for `wire`). Modules name each other by these
//! paths; `super::` and a module's relative paths to its own files are not read.
//!
//! A file counts for its module: a module declared `pub mod` is a module of its own (the
//! modules a layer groups, such as `wire::frame` and `lanes::relay`), while one declared
//! plain `mod` is a file of its parent (`driver/swim.rs` is part of `driver`). The layers
//! are the top-level modules (everything under `src/wire/` is `wire`). Every circle among
//! the modules, and every circle among the layers, fails the test, listed module by
//! module.
//!
//! A circle that cannot be broken yet may be named in [`KNOWN_CYCLES`], with a comment
//! saying why; any other circle still fails.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Circles tolerated for now, each as the modules (or layers) it passes through starting
/// from the smallest name (as the failure message prints them). Keep empty unless a circle
/// cannot be broken yet, and then say why next to it.
const KNOWN_CYCLES: &[&[&str]] = &[];

type Graph = BTreeMap<String, BTreeSet<String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The path of the module a file under `src` defines (`wire/mod.rs` and `wire.rs`:
/// `["wire"]`; `lib.rs`: none).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("file under src");
    let mut path: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_str().expect("UTF-8 path").to_owned())
        .collect();
    let last = path.pop().expect("a file name");
    let stem = last.strip_suffix(".rs").expect("a Rust file");
    if stem != "mod" && stem != "lib" {
        path.push(stem.to_owned());
    }
    path
}

/// The modules a file declares `pub mod` (as files: `pub mod frame;`).
fn public_children(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("pub mod ") {
        if code[..at].ends_with(is_ident) {
            continue;
        }
        let rest = &code[at + "pub mod ".len()..];
        let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
        if rest[name.len()..].trim_start().starts_with(';') {
            found.insert(name);
        }
    }
    found
}

/// The module a file counts for: its own module, cut at the first part declared plain
/// `mod` (a file of its parent). Top-level modules always count on their own.
fn unit_of(path: &[String], public: &BTreeMap<String, BTreeSet<String>>) -> Option<String> {
    let (first, rest) = path.split_first()?;
    let mut unit = first.clone();
    for part in rest {
        if !public
            .get(&unit)
            .is_some_and(|children| children.contains(part))
        {
            break;
        }
        unit = format!("{unit}::{part}");
    }
    Some(unit)
}

/// The source without comments (line, doc and block comments) and string contents.
fn strip_comments(source: &str) -> String {
    let bytes = source.as_bytes();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < bytes.len() {
        if source[i..].starts_with("//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if source[i..].starts_with("/*") {
            let mut depth = 0;
            while i < bytes.len() {
                if source[i..].starts_with("/*") {
                    depth += 1;
                    i += 2;
                } else if source[i..].starts_with("*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if bytes[i] == b'"' && !source[..i].ends_with('\'') {
            // A string: its text is not code (raw strings of this crate hold no quotes).
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else {
            let c = source[i..].chars().next().expect("char boundary");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn skip_whitespace(chars: &[char], at: &mut usize) {
    while chars.get(*at).is_some_and(|c| c.is_whitespace()) {
        *at += 1;
    }
}

/// Reads the path (or `use` tree) starting at `at`, after `prefix`, and adds each path it
/// names to `found`: `a::b::C` is `[a, b, C]`; `a::{b::C, self, d::*}` is `[a, b, C]`,
/// `[a]` and `[a, d]`.
fn read_tree(
    chars: &[char],
    at: &mut usize,
    mut prefix: Vec<String>,
    found: &mut Vec<Vec<String>>,
) {
    loop {
        skip_whitespace(chars, at);
        match chars.get(*at) {
            Some('{') => {
                *at += 1;
                loop {
                    skip_whitespace(chars, at);
                    match chars.get(*at) {
                        None => return,
                        Some('}') => {
                            *at += 1;
                            return;
                        }
                        Some(',') => *at += 1,
                        Some(_) => {
                            read_tree(chars, at, prefix.clone(), found);
                            // Past what a branch leaves (`as name`, a `*`), to its `,` or `}`.
                            while chars.get(*at).is_some_and(|&c| c != ',' && c != '}') {
                                *at += 1;
                            }
                        }
                    }
                }
            }
            Some(&c) if is_ident(c) => {
                let start = *at;
                while chars.get(*at).is_some_and(|&c| is_ident(c)) {
                    *at += 1;
                }
                let name: String = chars[start..*at].iter().collect();
                if name != "self" {
                    prefix.push(name);
                }
                let mut next = *at;
                skip_whitespace(chars, &mut next);
                if chars.get(next) == Some(&':') && chars.get(next + 1) == Some(&':') {
                    *at = next + 2;
                } else {
                    break;
                }
            }
            _ => break,
        }
    }
    if !prefix.is_empty() {
        found.push(prefix);
    }
}

/// Every path after a `crate::`, as its parts.
fn crate_references(code: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let keyword: Vec<char> = "crate::".chars().collect();
    let mut found = Vec::new();
    for start in 0..chars.len() {
        if !chars[start..].starts_with(&keyword) {
            continue;
        }
        if start > 0 && (is_ident(chars[start - 1]) || chars[start - 1] == '$') {
            continue; // `$crate::` or part of a longer name
        }
        let mut at = start + keyword.len();
        read_tree(&chars, &mut at, Vec::new(), &mut found);
    }
    found
}

/// Module dependencies of the crate rooted at `src`.
fn dependencies(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let sources: Vec<(Vec<String>, String)> = files
        .iter()
        .map(|file| {
            let source = fs::read_to_string(file).expect("readable source");
            (module_path(src, file), strip_comments(&source))
        })
        .collect();
    let public: BTreeMap<String, BTreeSet<String>> = sources
        .iter()
        .map(|(path, code)| (path.join("::"), public_children(code)))
        .collect();
    let mut graph: Graph = sources
        .iter()
        .filter_map(|(path, _)| unit_of(path, &public))
        .map(|unit| (unit, BTreeSet::new()))
        .collect();
    for (path, code) in &sources {
        let Some(unit) = unit_of(path, &public) else {
            continue;
        };
        for reference in crate_references(code) {
            let target = (1..=reference.len())
                .rev()
                .map(|len| reference[..len].join("::"))
                .find(|name| graph.contains_key(name));
            if let Some(target) = target.filter(|target| *target != unit) {
                graph.get_mut(&unit).expect("known module").insert(target);
            }
        }
    }
    graph
}

/// The layers' dependencies: each module taken as its top-level module.
fn layers(modules: &Graph) -> Graph {
    let layer = |module: &str| module.split("::").next().expect("a name").to_owned();
    let mut graph = Graph::new();
    for (module, targets) in modules {
        let from = layer(module);
        let edges = graph.entry(from.clone()).or_default();
        edges.extend(targets.iter().map(|t| layer(t)).filter(|to| *to != from));
    }
    graph
}

/// Every elementary circle, each starting at its smallest module, in order.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    fn walk(
        graph: &Graph,
        start: &str,
        node: &str,
        path: &mut Vec<String>,
        found: &mut Vec<Vec<String>>,
    ) {
        for next in &graph[node] {
            if next == start {
                found.push(path.clone());
            } else if next.as_str() > start && !path.contains(next) {
                path.push(next.clone());
                walk(graph, start, next, path, found);
                path.pop();
            }
        }
    }
    let mut found = Vec::new();
    for start in graph.keys() {
        walk(graph, start, start, &mut vec![start.clone()], &mut found);
    }
    found
}

fn describe(cycle: &[String]) -> String {
    let mut text = cycle.join(" -> ");
    text.push_str(" -> ");
    text.push_str(&cycle[0]);
    text
}

#[test]
fn modules_and_layers_form_no_circles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = dependencies(&src);
    let layers = layers(&modules);
    assert!(
        modules.len() > 10
            && modules.contains_key("sim")
            && modules["driver"].contains("wire::session")
            && modules["lanes::relay"].contains("lanes::names")
            && layers["driver"].contains("wire"),
        "the scan found too little: {modules:?}"
    );
    let known: Vec<Vec<String>> = KNOWN_CYCLES
        .iter()
        .map(|c| c.iter().map(|m| m.to_string()).collect())
        .collect();
    let mut found = cycles(&modules);
    found.extend(cycles(&layers));
    // A circle among top-level modules is in both graphs: list it once.
    found.sort();
    found.dedup();
    let new: Vec<String> = found
        .iter()
        .filter(|c| !known.contains(c))
        .map(|c| describe(c))
        .collect();
    assert!(
        new.is_empty(),
        "circles among grid-core's modules or layers (break each by moving the shared item \
         to a lower module):\n  {}",
        new.join("\n  ")
    );
    let gone: Vec<String> = known
        .iter()
        .filter(|c| !found.contains(c))
        .map(|c| describe(c))
        .collect();
    assert!(
        gone.is_empty(),
        "known circles that no longer exist; drop them from KNOWN_CYCLES:\n  {}",
        gone.join("\n  ")
    );
}

#[test]
fn references_are_read_from_code_only() {
    let code = strip_comments(
        "use crate::wire::{Reader, WireError};\n\
         /// see [`crate::driver`]\n\
         // crate::wire::session::Transmit\n\
         use crate::{identity::{self, auth::Pins}, lanes::{names::*, relay::RelayQueue as Q}};\n\
         let x = crate::wire::frame::OVERHEAD; let s = \"crate::driver::node\";\n\
         /* crate::lanes::relay */ $crate::lanes::repair::x(); crate::sim :: run::<u8>();",
    );
    let found: Vec<String> = crate_references(&code)
        .iter()
        .map(|path| path.join("::"))
        .collect();
    assert_eq!(
        found,
        [
            "wire::Reader",
            "wire::WireError",
            "identity",
            "identity::auth::Pins",
            "lanes::names",
            "lanes::relay::RelayQueue",
            "wire::frame::OVERHEAD",
            "sim::run",
        ]
    );
}

#[test]
fn public_modules_count_on_their_own_and_private_ones_for_their_parent() {
    let public: BTreeMap<String, BTreeSet<String>> = [
        (
            "wire",
            public_children("pub mod frame;\nmod helpers; pub mod inline { }"),
        ),
        ("sim", public_children("mod world;")),
    ]
    .into_iter()
    .map(|(path, children)| (path.to_owned(), children))
    .collect();
    let unit = |path: &[&str]| {
        let path: Vec<String> = path.iter().map(|p| p.to_string()).collect();
        unit_of(&path, &public)
    };
    assert_eq!(unit(&[]), None);
    assert_eq!(unit(&["wire"]).as_deref(), Some("wire"));
    assert_eq!(unit(&["wire", "frame"]).as_deref(), Some("wire::frame"));
    assert_eq!(unit(&["wire", "helpers"]).as_deref(), Some("wire"));
    assert_eq!(unit(&["wire", "inline"]).as_deref(), Some("wire"));
    assert_eq!(unit(&["sim", "world"]).as_deref(), Some("sim"));
}

#[test]
fn circles_are_found() {
    let edges = [("a", "b"), ("b", "c"), ("c", "a"), ("b", "a"), ("c", "d")];
    let mut graph = Graph::new();
    for (from, to) in edges {
        graph
            .entry(from.to_owned())
            .or_default()
            .insert(to.to_owned());
        graph.entry(to.to_owned()).or_default();
    }
    let found: Vec<String> = cycles(&graph).iter().map(|c| describe(c)).collect();
    assert_eq!(found, ["a -> b -> a", "a -> b -> c -> a"]);
}
