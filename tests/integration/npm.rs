//! npm packages the tests install for themselves (CI starts from a clean clone with nothing
//! cached): each set goes into its own prefix under the target dir, installed once and reused
//! while its stamp matches. Without `npm` the tests that need it skip with a notice, except
//! under `CI=true`, where they fail.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::util::run_limited;

/// The longest one `npm install` may take.
const NPM_LIMIT: Duration = Duration::from_secs(600);

/// What installing a prefix gave: its `node_modules`, `None` to skip, or why it failed.
type Installed = Result<Option<PathBuf>, String>;

/// The `node_modules` of a prefix holding exactly `packages` (`name@version` specs, aliases
/// allowed), `None` to skip (no npm outside CI), or why the install failed.
pub fn prefix(name: &str, packages: &[&str]) -> Installed {
    static DONE: OnceLock<Mutex<Vec<(String, Installed)>>> = OnceLock::new();
    let done = DONE.get_or_init(Mutex::default);
    let mut done = done.lock().unwrap();
    if let Some((_, r)) = done.iter().find(|(n, _)| n == name) {
        return r.clone();
    }
    let r = install(name, packages);
    done.push((name.to_string(), r.clone()));
    r
}

fn install(name: &str, packages: &[&str]) -> Installed {
    let ci = super::util::ci();
    if Command::new("npm")
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_err()
    {
        if ci {
            return Err(format!(
                "npm is not installed, and CI=true: the tests that need {packages:?} cannot be \
                 skipped in CI"
            ));
        }
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED: {name} needs npm, which is not installed (under CI=true this fails) ***\n"
        );
        return Ok(None);
    }
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(tmp).map_err(|e| format!("create {}: {e}", tmp.display()))?;
    let lock = std::fs::File::create(tmp.join(format!("npm-{name}.lock")))
        .map_err(|e| format!("npm lock file: {e}"))?;
    fs4::fs_std::FileExt::lock_exclusive(&lock).map_err(|e| format!("lock {name}: {e}"))?;
    let dir = tmp.join(format!("npm-{name}"));
    let modules = dir.join("node_modules");
    let stamp = dir.join("switchboard-stamp");
    let want = packages.join("\n");
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s == want) && modules.is_dir() {
        return Ok(Some(modules));
    }
    let started = Instant::now();
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    // A package.json of its own, so npm installs here and not into a parent project.
    std::fs::write(dir.join("package.json"), r#"{"private": true}"#)
        .map_err(|e| format!("write package.json: {e}"))?;
    let run = run_limited(
        Command::new("npm")
            .arg("install")
            .arg("--prefix")
            .arg(&dir)
            .args([
                "--no-audit",
                "--no-fund",
                "--no-update-notifier",
                "--loglevel",
                "error",
            ])
            .args(packages),
        NPM_LIMIT,
    );
    if !run.status.is_some_and(|s| s.success()) {
        return Err(format!(
            "npm install {packages:?} failed ({})\nstdout:\n{}\nstderr:\n{}",
            run.describe(),
            run.stdout,
            run.stderr
        ));
    }
    std::fs::write(&stamp, want).map_err(|e| format!("write {}: {e}", stamp.display()))?;
    let _ = writeln!(
        std::io::stderr(),
        "npm: {packages:?} installed in {:.1?} at {}",
        started.elapsed(),
        dir.display()
    );
    Ok(Some(modules))
}

/// The `node` to run scripts with: the machine's.
pub fn node() -> PathBuf {
    PathBuf::from("node")
}
