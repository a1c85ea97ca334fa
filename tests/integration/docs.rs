//! Every command block that a page of the documentation marks as runnable, run as written.
//!
//! A page marks a ```` ```console ```` block with a comment on the line before its fence:
//! `<!-- runnable: ... -->` runs it in a new temporary home with no daemon,
//! `<!-- runnable with a daemon: ... -->` starts the home's daemon first (`switchboard start
//! --no-listen`) and stops it after. The block reads as a terminal does: `$ COMMAND` is run by
//! bash, `> MORE` lines continue it (a here-document), and the lines up to the next `$` are what
//! the command prints on stdout. An expected line `...` stands for any number of lines, and
//! `...` inside a line for any text (a path, a time). `HOME` is a temporary directory, so
//! `~/.switchboard` is a new home; `switchboard` on `PATH` is the binary under test; the working
//! directory holds `examples/` and `rules/` of the repository. With a daemon, each command runs
//! once the daemon has evaluated every message appended so far, as it has by the time a person
//! types the next line.
//!
//! The README's quick start has a marker and a test of its own (`cli.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::util::*;

const MARKER: &str = "<!-- runnable";

/// One command of a block and what it prints.
#[derive(Debug)]
struct Step {
    /// Line of the `$` in the page, for the failure message.
    line: usize,
    command: String,
    expected: Vec<String>,
}

/// One marked block.
#[derive(Debug)]
struct Block {
    page: String,
    line: usize,
    daemon: bool,
    steps: Vec<Step>,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The pages: the README and everything under `docs/`.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The marked blocks of one page. A marker not followed by a console block is a mistake in the
/// page, not a block to skip.
fn blocks(page: &str, text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if !line.starts_with(MARKER) {
            continue;
        }
        assert_eq!(
            lines.get(i + 1).copied(),
            Some("```console"),
            "{page}:{}: a runnable marker must be followed by a ```console block",
            i + 1
        );
        let mut steps: Vec<Step> = Vec::new();
        let mut j = i + 2;
        while j < lines.len() && lines[j] != "```" {
            let l = lines[j];
            if let Some(command) = l.strip_prefix("$ ") {
                steps.push(Step {
                    line: j + 1,
                    command: command.to_string(),
                    expected: Vec::new(),
                });
            } else if let (Some(more), Some(step)) = (l.strip_prefix("> "), steps.last_mut())
                && step.expected.is_empty()
            {
                step.command.push('\n');
                step.command.push_str(more);
            } else {
                let step = steps
                    .last_mut()
                    .unwrap_or_else(|| panic!("{page}:{}: output before any `$` command", j + 1));
                step.expected.push(l.to_string());
            }
            j += 1;
        }
        assert!(j < lines.len(), "{page}:{}: the block never ends", i + 2);
        assert!(!steps.is_empty(), "{page}:{}: no `$` command", i + 2);
        out.push(Block {
            page: page.to_string(),
            line: i + 1,
            daemon: line.starts_with("<!-- runnable with a daemon"),
            steps,
        });
    }
    out
}

/// One expected line against one printed line: `...` inside it matches any text.
fn line_matches(expected: &str, actual: &str) -> bool {
    let mut parts = expected.split("...");
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = actual.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (k, part) in parts.iter().enumerate() {
        if k + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// Expected lines against printed lines: a line `...` matches any number of lines.
fn lines_match(expected: &[String], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((e, rest)) if e == "..." => {
            (0..=actual.len()).any(|k| lines_match(rest, &actual[k..]))
        }
        Some((e, rest)) => actual
            .split_first()
            .is_some_and(|(a, more)| line_matches(e, a) && lines_match(rest, more)),
    }
}

/// Waits until the daemon of `home` has evaluated every message appended so far.
fn settled(home: &Path) {
    eventually(Duration::from_secs(10), "the daemon evaluates", || {
        let out = cli_in(home, &["stats", "--json"]);
        let stats: serde_json::Value = serde_json::from_str(&stdout(&out)).ok()?;
        let last = stats["inbox"]["last_seq"].as_u64()?;
        (stats["evaluated"].as_u64()? >= last).then_some(())
    });
}

/// Runs one block in a new temporary home; the failures, one sentence each.
fn run(block: &Block) -> Vec<String> {
    let root = tempfile::tempdir().unwrap();
    let bin_dir = root.path().join("bin");
    let work = root.path().join("work");
    std::fs::create_dir(&bin_dir).unwrap();
    std::fs::create_dir(&work).unwrap();
    std::os::unix::fs::symlink(bin(), bin_dir.join("switchboard")).unwrap();
    for dir in ["examples", "rules"] {
        std::os::unix::fs::symlink(repo().join(dir), work.join(dir)).unwrap();
    }
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let home = root.path().join(".switchboard");
    let _daemon = DaemonGuard(home.clone());
    let shell = |script: &str| {
        run_limited(
            Command::new("bash")
                .args(["-o", "pipefail", "-c", script])
                .current_dir(&work)
                .env("HOME", root.path())
                .env("PATH", &path)
                .env_remove("SWITCHBOARD_HOME")
                .env_remove("SWITCHBOARD_TOKEN")
                .env_remove("SWITCHBOARD_GITHUB_SECRET"),
            Duration::from_secs(30),
        )
    };
    if block.daemon {
        let started = shell("switchboard start --no-listen");
        assert!(
            started.status.is_some_and(|s| s.success()),
            "{}:{}: the daemon did not start: {}",
            block.page,
            block.line,
            started.stderr
        );
    }
    let mut failures = Vec::new();
    for step in &block.steps {
        if block.daemon {
            settled(&home);
        }
        let ran = shell(&step.command);
        let printed: Vec<&str> = ran.stdout.lines().collect();
        if ran.status.is_none() || !lines_match(&step.expected, &printed) {
            failures.push(format!(
                "{}:{}: `{}` ({}) printed\n{}\nwhere the page shows\n{}\nstderr: {}",
                block.page,
                step.line,
                step.command,
                ran.describe(),
                ran.stdout.trim_end(),
                step.expected.join("\n"),
                ran.stderr.trim_end()
            ));
        }
    }
    failures
}

#[test]
fn every_runnable_block_in_the_docs_prints_what_the_page_shows() {
    let mut all = Vec::new();
    for page in pages() {
        let name = page.strip_prefix(repo()).unwrap().display().to_string();
        all.extend(blocks(&name, &std::fs::read_to_string(&page).unwrap()));
    }
    assert!(
        all.len() >= 5,
        "the docs mark {} blocks runnable; a marker was lost",
        all.len()
    );
    let failures: Vec<String> = all.iter().flat_map(run).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn a_printed_line_that_differs_from_the_page_fails() {
    let page = "<!-- runnable: x -->\n```console\n$ cat > f <<'EOF'\n> a\n> EOF\n$ cat f\nfirst...\n...\nlast\n```\n";
    let block = blocks("p.md", page).remove(0);
    assert_eq!(block.steps[0].command, "cat > f <<'EOF'\na\nEOF");
    let expected = &block.steps[1].expected;
    assert!(lines_match(expected, &["first line", "x", "y", "last"]));
    assert!(lines_match(expected, &["first", "last"]));
    assert!(!lines_match(expected, &["first line", "x", "lost"]));
    assert!(!lines_match(expected, &["frist", "last"]));
    assert!(!lines_match(expected, &["first", "last", "more"]));
    assert!(line_matches("a ... c", "a b c"));
    assert!(!line_matches("a ... c", "a b d"));
    assert!(!line_matches("abc", "abcd"));
}
