//! The workspace's layout, checked on the source and the lockfile:
//! - inside every crate, imports between top-level modules form no cycle
//!   (a module's own tests may reach anywhere: they are not part of it);
//! - the service crate (`headroom-app`) has no Tauri anywhere in its
//!   dependency tree, so the CLI and the app are two front ends over it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_owned()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The code of a source file that is not a test: comments and a trailing
/// `#[cfg(test)] mod tests { … }` left out; a `tests.rs` or a file under
/// `tests/` is all test.
fn code_of(rel: &Path, text: &str) -> Vec<String> {
    let is_test =
        rel.file_name().is_some_and(|f| f == "tests.rs") || rel.components().any(|c| c.as_os_str() == "tests");
    if is_test {
        return Vec::new();
    }
    let body = text.find("#[cfg(test)]\nmod tests").map_or(text, |i| &text[..i]);
    body.lines().filter(|l| !l.trim_start().starts_with("//")).map(str::to_owned).collect()
}

/// Top-level module → the top-level modules its code names (`crate::x`),
/// for the crate whose sources are in `src`.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap().to_owned();
        let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
        let module = first.strip_suffix(".rs").unwrap_or(&first).to_owned();
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let names = graph.entry(module.clone()).or_default();
        for line in code_of(&rel, &text) {
            for (i, _) in line.match_indices("crate::") {
                let rest = &line[i + "crate::".len()..];
                let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
                let named = &rest[..end];
                // `headroom_crate::x` is another crate; `$crate::` a macro's.
                let before = line[..i].chars().next_back();
                if !named.is_empty() && named != module && !before.is_some_and(|c| c == '_' || c == '$') {
                    names.insert(named.to_owned());
                }
            }
        }
    }
    graph
}

/// Every cycle's modules (Tarjan's strongly connected components of more than one module).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let Some((w, _)) = self.graph.get_key_value(w.as_str()) else { continue };
                if !self.index.contains_key(w.as_str()) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w.as_str()]);
                    self.low.insert(v, low);
                } else if self.stack.contains(&w.as_str()) {
                    let low = self.low[v].min(self.index[w.as_str()]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let at = self.stack.iter().rposition(|&m| m == v).unwrap();
                let component: Vec<String> = self.stack.drain(at..).map(str::to_owned).collect();
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk { graph, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), found: Vec::new() };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

fn crate_sources() -> Vec<PathBuf> {
    let mut sources = vec![root().join("src-tauri/src")];
    for entry in std::fs::read_dir(root().join("src-tauri/crates")).unwrap().flatten() {
        sources.push(entry.path().join("src"));
    }
    sources.sort();
    sources
}

#[test]
fn no_crate_has_a_module_cycle() {
    let sources = crate_sources();
    assert!(sources.len() >= 10, "the app and its library crates: {sources:?}");
    let mut found = Vec::new();
    for src in &sources {
        let graph = module_graph(src);
        assert!(graph.len() >= 2, "{}: {} modules", src.display(), graph.len());
        found.extend(cycles(&graph).into_iter().map(|c| format!("{}: {}", src.display(), c.join(" → "))));
    }
    assert!(found.is_empty(), "module cycles:\n{}", found.join("\n"));
}

#[test]
fn the_check_finds_a_cycle_and_ignores_tests_and_comments() {
    let tmp = headroom_test_support::scratch("layout");
    let src = tmp.join("src");
    std::fs::create_dir_all(src.join("b")).unwrap();
    let write = |rel: &str, text: &str| std::fs::write(src.join(rel), text).unwrap();
    write("lib.rs", "mod a; mod b; mod c;\n");
    write("a.rs", "use crate::b::x;\n// crate::c in a comment\n#[cfg(test)]\nmod tests {\n    use crate::c::y;\n}\n");
    write("b/mod.rs", "pub fn f() { crate::c::z(); headroom_crate::a::q(); }\n");
    write("b/tests.rs", "use crate::a::w;\n");
    write("c.rs", "use crate::b::v;\n");
    let graph = module_graph(&src);
    assert_eq!(graph["a"], BTreeSet::from(["b".to_owned()]));
    assert_eq!(graph["b"], BTreeSet::from(["c".to_owned()]));
    // Tarjan's order within a component is its own: compared as a set.
    let found = cycles(&graph);
    assert_eq!(found.len(), 1, "{found:?}");
    let mut cycle = found[0].clone();
    cycle.sort();
    assert_eq!(cycle, ["b", "c"]);
}

/// Package name → the names of the packages it depends on, from Cargo.lock
/// (which lists dev-dependencies too: the check is the stricter for it).
fn lockfile_graph(lock: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for package in lock.split("[[package]]").skip(1) {
        let Some(name) = package.lines().find_map(|l| l.strip_prefix("name = ")) else { continue };
        let name = name.trim_matches('"').to_owned();
        let deps = graph.entry(name).or_default();
        if let Some(list) = package.split("dependencies = [").nth(1).and_then(|rest| rest.split(']').next()) {
            for dep in list.split(',').map(|d| d.trim().trim_matches('"')).filter(|d| !d.is_empty()) {
                deps.insert(dep.split(' ').next().unwrap_or(dep).to_owned());
            }
        }
    }
    graph
}

fn tree_of<'a>(graph: &'a BTreeMap<String, BTreeSet<String>>, from: &'a str) -> BTreeSet<&'a str> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from];
    while let Some(name) = todo.pop() {
        if seen.insert(name) {
            todo.extend(graph.get(name).into_iter().flatten().map(String::as_str));
        }
    }
    seen
}

#[test]
fn the_service_crate_has_no_tauri_in_its_tree() {
    let lock = std::fs::read_to_string(root().join("Cargo.lock")).unwrap();
    let graph = lockfile_graph(&lock);
    let tree = tree_of(&graph, "headroom-app");
    // Its own library crates are in it (the walk works) …
    for name in ["headroom-engine", "headroom-store", "headroom-server", "tokio", "serde"] {
        assert!(tree.contains(name), "{name} not found under headroom-app: {tree:?}");
    }
    // … and neither Tauri nor the app crate that wraps it.
    let tauri: Vec<_> = tree.iter().filter(|n| n.starts_with("tauri") || **n == "headroom" || **n == "wry").collect();
    assert!(tauri.is_empty(), "headroom-app depends on {tauri:?}");
    // The app crate does reach Tauri: the check can see it.
    assert!(tree_of(&graph, "headroom").contains("tauri"));
}
