//! The crate's modules depend on each other in one direction only: no circles.
//!
//! Reads `src/**/*.rs`, takes each file's `crate::X` references (in `use` declarations and
//! in paths, test modules included; comments are skipped, so doc links do not count) and
//! credits them to the file's top-level module (everything under `src/sim/` is `sim`).
//! Every circle among those modules fails the test, listed module by module.
//!
//! A circle that cannot be broken yet may be named in [`KNOWN_CYCLES`], with a comment
//! saying why; any other circle still fails.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Circles tolerated for now, each as the modules it passes through starting from the
/// smallest name (as the failure message prints them). Keep empty unless a circle cannot
/// be broken yet, and then say why next to it.
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

/// The top-level module a file under `src` belongs to (`None` for `lib.rs`).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).expect("file under src");
    let first = rel.components().next()?.as_os_str().to_str()?.to_owned();
    if rel.components().count() > 1 {
        return Some(first);
    }
    let name = first.strip_suffix(".rs")?;
    (name != "lib").then(|| name.to_owned())
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

/// The first segment after each `crate::`, and each first segment inside
/// `crate::{a::b, c}`.
fn crate_references(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        if code[..at].ends_with(|c: char| is_ident(c) || c == '$') {
            continue; // `$crate::` or part of a longer name
        }
        let rest = code[at + "crate::".len()..].trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level names of the group: those after `{` or a `,` at depth 0.
            let mut depth = 0;
            let mut expect_name = true;
            let mut name = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => expect_name = true,
                    c if expect_name && is_ident(c) => name.push(c),
                    c if expect_name && c.is_whitespace() && name.is_empty() => {}
                    _ => {
                        if !name.is_empty() {
                            found.insert(std::mem::take(&mut name));
                        }
                        expect_name = false;
                    }
                }
            }
            if !name.is_empty() {
                found.insert(name);
            }
        } else {
            let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

/// Module dependencies of the crate rooted at `src`.
fn dependencies(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(src, f)).collect();
    let mut graph: Graph = modules
        .iter()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    for file in &files {
        let Some(module) = module_of(src, file) else {
            continue;
        };
        let source = fs::read_to_string(file).expect("readable source");
        for target in crate_references(&strip_comments(&source)) {
            if target != module && modules.contains(&target) {
                graph.get_mut(&module).expect("known module").insert(target);
            }
        }
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
fn modules_form_no_circles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = dependencies(&src);
    assert!(
        graph.len() > 10 && graph.contains_key("sim") && graph["driver"].contains("session"),
        "the scan found too little: {graph:?}"
    );
    let known: Vec<Vec<String>> = KNOWN_CYCLES
        .iter()
        .map(|c| c.iter().map(|m| m.to_string()).collect())
        .collect();
    let found = cycles(&graph);
    let new: Vec<String> = found
        .iter()
        .filter(|c| !known.contains(c))
        .map(|c| describe(c))
        .collect();
    assert!(
        new.is_empty(),
        "module circles in grid-core (break each by moving the shared item to a lower \
         module):\n  {}",
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
         // crate::session::Transmit\n\
         use crate::{auth::Pins, identity::{NodeId, Interner}, lanes};\n\
         let x = crate::frame::OVERHEAD; let s = \"crate::node\";\n\
         /* crate::relay */ $crate::repair::x();",
    );
    let found: Vec<String> = crate_references(&code).into_iter().collect();
    assert_eq!(found, ["auth", "frame", "identity", "lanes", "wire"]);
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
