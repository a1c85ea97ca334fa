//! Rules of the house that the compiler does not check, held against the source.
//!
//! Every task the daemon starts runs on its one task tracker (ARCHITECTURE.md, "Processes"), so
//! that shutdown waits for all of them and none outlives the daemon: production code spawns
//! with `tasks.spawn`, never with a bare `tokio::spawn`. Tests may (`#[cfg(test)] mod tests`
//! sits at the end of a file, which clippy's `items_after_test_module` enforces, and `tests.rs`
//! files are tests whole).

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The lines of `text` before its test module: (line number, line).
fn production_lines(text: &str) -> Vec<(usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .windows(2)
        .position(|w| w[0].trim() == "#[cfg(test)]" && w[1].trim_start().starts_with("mod tests"))
        .unwrap_or(lines.len());
    lines[..end]
        .iter()
        .enumerate()
        .map(|(i, l)| (i + 1, *l))
        .collect()
}

#[test]
fn every_task_of_the_daemon_runs_on_its_tracker() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    assert!(files.len() > 50, "found the sources: {}", files.len());
    let mut bare = Vec::new();
    for file in files
        .iter()
        .filter(|f| f.file_name().unwrap() != "tests.rs")
    {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in production_lines(&text) {
            let code = line.split("//").next().unwrap();
            if code.contains("tokio::spawn(") || code.contains("tokio::task::spawn(") {
                bare.push(format!("{}:{n}: {}", file.display(), line.trim()));
            }
        }
    }
    assert!(
        bare.is_empty(),
        "tasks spawned outside the daemon's tracker (use `tasks.spawn`):\n{}",
        bare.join("\n")
    );
}

#[test]
fn the_check_sees_a_bare_spawn_and_skips_test_modules() {
    let text =
        "fn a() {\n    tokio::spawn(x);\n}\n#[cfg(test)]\nmod tests {\n    tokio::spawn(y);\n}\n";
    let lines = production_lines(text);
    assert_eq!(lines.len(), 3);
    assert!(
        lines
            .iter()
            .any(|(n, l)| *n == 2 && l.contains("tokio::spawn(x)"))
    );
    assert!(!lines.iter().any(|(_, l)| l.contains("tokio::spawn(y)")));
}
