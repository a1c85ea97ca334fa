//! The help that is more than the flags: each command's examples, the files it reads or
//! writes, and the exit statuses, shown at the end of `--help` and as sections of the man
//! pages. `switchboard man` prints the top page; `switchboard man --dir DIR` writes one page per
//! command (`switchboard.1`, `switchboard-rules-check.1`, ...), as `git` and `gh` ship theirs.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use clap_mangen::Man;
use clap_mangen::roff::{Roff, bold, roman};

use super::exit;

/// Options of `man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write one page per command into DIR (`switchboard.1`, `switchboard-start.1`, ...)
    /// instead of printing the top page.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// With `--dir`: print what was written as JSON (`{"dir": ..., "pages": [...]}`).
    #[arg(long, requires = "dir")]
    pub json: bool,
}

/// The examples and the files of every command, and what each file holds.
const HELP: &str = include_str!("help.txt");

/// The lines of the section `[name]` of [`HELP`], comments left out; `None` when it has none.
fn section(name: &str) -> Option<Vec<&'static str>> {
    let mut lines = HELP.lines().filter(|l| !l.starts_with('#'));
    let header = format!("[{name}]");
    lines.by_ref().find(|l| *l == header)?;
    Some(lines.take_while(|l| !l.starts_with('[')).collect())
}

/// The examples of the command at `path` (`rules check`): each command line and what it does.
fn examples(path: &str) -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    let mut command = "";
    for line in section(path).unwrap_or_default() {
        match line.strip_prefix("    ") {
            Some(what) => out.push((command, what)),
            None if line.starts_with("files:") => {}
            None => command = line,
        }
    }
    out
}

/// The files the command at `path` reads or writes, with what each holds.
fn files(path: &str) -> Vec<(&'static str, &'static str)> {
    let all: Vec<(&str, &str)> = section("files")
        .unwrap_or_default()
        .into_iter()
        .filter_map(|l| l.split_once(": "))
        .collect();
    let names = section(path)
        .unwrap_or_default()
        .into_iter()
        .find_map(|l| l.strip_prefix("files:"))
        .unwrap_or_default();
    names
        .split_whitespace()
        .filter_map(|name| all.iter().find(|(n, _)| *n == name).copied())
        .collect()
}

/// `command`'s path below the top (`rules check`), from its bin name (`switchboard rules check`).
fn path_of(cmd: &clap::Command) -> String {
    let bin = cmd.get_bin_name().unwrap_or_else(|| cmd.get_name());
    bin.split_whitespace().skip(1).collect::<Vec<_>>().join(" ")
}

/// The end of `--help`: the examples and the exit statuses.
fn after_help(path: &str) -> String {
    let mut text = String::new();
    let ex = examples(path);
    if !ex.is_empty() {
        text.push_str("Examples:\n");
        for (line, what) in &ex {
            text.push_str(&format!("  {line}\n      {what}\n"));
        }
        text.push('\n');
    }
    text.push_str(&exit::help());
    text
}

/// The command line's definition with the examples and exit statuses at the end of each
/// command's `--help`.
pub fn command() -> clap::Command {
    let mut cmd = <super::Cli as clap::CommandFactory>::command();
    cmd.build();
    decorate(cmd)
}

fn decorate(cmd: clap::Command) -> clap::Command {
    let path = path_of(&cmd);
    let subs: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    let mut cmd = cmd.after_help(after_help(&path));
    for name in subs {
        cmd = cmd.mut_subcommand(name, decorate);
    }
    cmd
}

/// `switchboard man [--dir DIR]`.
pub fn execute(args: ManArgs) -> anyhow::Result<ExitCode> {
    let cmd = command();
    match args.dir {
        None => {
            let mut text = Vec::new();
            render(&cmd, &mut text)?;
            std::io::stdout().lock().write_all(&text)?;
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
            let mut written = Vec::new();
            write_pages(&cmd, &dir, &mut written)?;
            let mut out = std::io::stdout().lock();
            match args.json {
                true => writeln!(
                    out,
                    "{}",
                    serde_json::json!({"dir": dir.display().to_string(), "pages": written})
                )?,
                false => writeln!(
                    out,
                    "wrote {} man pages to {}",
                    written.len(),
                    dir.display()
                )?,
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes the page of `cmd` and of each of its subcommands into `dir`; adds their file names
/// to `written`.
fn write_pages(cmd: &clap::Command, dir: &Path, written: &mut Vec<String>) -> anyhow::Result<()> {
    let file = format!("{}.1", page_name(cmd));
    let path = dir.join(&file);
    let mut text = Vec::new();
    render(cmd, &mut text)?;
    std::fs::write(&path, text)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    written.push(file);
    for sub in pages(cmd) {
        write_pages(sub, dir, written)?;
    }
    Ok(())
}

/// The subcommands that get a page of their own: not the hidden ones, nor clap's `help`.
fn pages(cmd: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    cmd.get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
}

/// `switchboard-rules-check` for `switchboard rules check`.
fn page_name(cmd: &clap::Command) -> String {
    let bin = cmd.get_bin_name().unwrap_or_else(|| cmd.get_name());
    bin.split_whitespace().collect::<Vec<_>>().join("-")
}

/// One page: clap's sections (name, synopsis, description, options, subcommands), then
/// EXAMPLES, FILES, EXIT STATUS, ENVIRONMENT and SEE ALSO.
fn render(cmd: &clap::Command, w: &mut Vec<u8>) -> std::io::Result<()> {
    let path = path_of(cmd);
    let name = page_name(cmd);
    let man = Man::new(cmd.clone()).title(&name);
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(w)?;
    }
    if pages(cmd).next().is_some() {
        man.render_subcommands_section(w)?;
    }
    let mut roff = Roff::default();
    let ex = examples(&path);
    if !ex.is_empty() {
        roff.control("SH", ["EXAMPLES"]);
        for (line, what) in ex {
            roff.control("TP", []);
            roff.text([bold(line)]);
            roff.text([roman(what)]);
        }
    }
    let files = files(&path);
    if !files.is_empty() {
        roff.control("SH", ["FILES"]);
        for (file, what) in files {
            let shown = if file.starts_with('~') || file.starts_with('.') {
                file.to_string()
            } else {
                format!("~/.switchboard/{file}")
            };
            roff.control("TP", []);
            roff.text([bold(shown)]);
            roff.text([roman(what)]);
        }
        roff.text([roman(
            "The home is ~/.switchboard unless --home DIR or SWITCHBOARD_HOME says otherwise.",
        )]);
    }
    roff.control("SH", ["EXIT STATUS"]);
    for (code, meaning) in exit::CODES {
        roff.control("TP", []);
        roff.text([bold(code.to_string())]);
        roff.text([roman(*meaning)]);
    }
    roff.control("SH", ["ENVIRONMENT"]);
    for (var, what) in [
        ("SWITCHBOARD_HOME", "the home, when --home is not given"),
        (
            "SWITCHBOARD_TOKEN",
            "the ingest bearer token, over the token file",
        ),
        ("NO_COLOR", "no colour in `watch` and `status`"),
        ("RUST_LOG", "what is logged (stderr, or daemon.log)"),
    ] {
        roff.control("TP", []);
        roff.text([bold(var)]);
        roff.text([roman(what)]);
    }
    roff.control("SH", ["SEE ALSO"]);
    let mut see: Vec<String> = pages(cmd).map(|s| format!("{}(1)", page_name(s))).collect();
    if !path.is_empty() {
        see.insert(0, "switchboard(1)".into());
    }
    roff.text([roman(see.join(", "))]);
    roff.to_writer(w)?;
    man.render_version_section(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command has examples and a `files:` line (empty when it has no files), so a new
    /// command cannot ship without them; every file named is described.
    #[test]
    fn every_command_has_examples_and_files() {
        fn walk(cmd: &clap::Command, out: &mut Vec<String>) {
            for sub in pages(cmd) {
                out.push(path_of(sub));
                walk(sub, out);
            }
        }
        let mut paths = Vec::new();
        walk(&command(), &mut paths);
        assert!(paths.contains(&"rules check".to_string()), "{paths:?}");
        for path in &paths {
            assert!(!examples(path).is_empty(), "no examples for `{path}`");
            let listed = section(path)
                .unwrap()
                .iter()
                .any(|l| l.starts_with("files:"));
            assert!(listed, "no `files:` line for `{path}`");
        }
        let named = section("")
            .unwrap()
            .into_iter()
            .find_map(|l| l.strip_prefix("files:"));
        let named: Vec<&str> = named.unwrap().split_whitespace().collect();
        assert_eq!(
            files("").len(),
            named.len(),
            "a file without a description: {named:?}"
        );
    }
}
