//! The rules watcher: reloads `triggers.json` when its content changes on disk.
//!
//! Editors save by writing a temporary file and renaming it over the old one, which
//! replaces the inode a file watch would follow, so the watcher watches the home
//! *directory* ([`dir`]). Only events that can change the file count: create, write, rename
//! and remove of `triggers.json` itself. Opening or reading it does not (the reload itself
//! reads the file, so reacting to access events reloaded forever), and neither does a
//! change of its metadata. Events are debounced (an editor's save is several events), and
//! the watcher then compares a hash of the file with the one it last saw, so one save is
//! one reload and a `touch` is none. The journals beside it are written for every message:
//! on Linux their writes make no event (the watch asks inotify for a write only once the
//! file is closed); elsewhere each is dropped by name as it comes. The watcher only
//! signals: the reload itself is the `reload` operation, the same one SIGHUP and `rules
//! reload` use, so a deleted or invalid file keeps the live rules.
//!
//! A watched file that is a symlink (a `triggers.json` kept in a dotfiles or rules checkout) is
//! edited at its target, which may live outside the home: the target's directory is watched
//! too, for the target's name. After every batch of events the links are resolved again, so a
//! link pointed elsewhere is followed to its new target (and the old directory unwatched).
//!
//! `switchboard.json` is watched the same way. A change is validated (an invalid file changes
//! nothing and says why), then compared with the settings the daemon started with: what can
//! change live ([`crate::config::LIVE_KEYS`]: `actions.queueCapacity`, `http.rateLimit`,
//! `http.githubSecret`) is applied, and every other changed key is named in one "restart
//! needed for X" log line, kept for `stats`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::config::{Config, ConfigReload, Home};
use crate::control::Local;
use crate::control::local::BoxFuture;
use crate::control::ops::{Reload, Reloaded};

mod dir;

use dir::DirWatch;

/// What the watcher reloads, and where it says what a `switchboard.json` change did.
#[derive(Clone)]
pub struct Watched {
    /// The daemon's operations (`reload`, `queue_capacity`).
    pub api: Local,
    /// The home whose files are watched.
    pub home: Home,
    /// Where a valid change of `switchboard.json` goes.
    pub components: Arc<dyn ApplyConfig>,
    /// The last change of `switchboard.json`, for `stats`.
    pub config_reload: Arc<std::sync::Mutex<Option<ConfigReload>>>,
    /// Where the watcher runs.
    pub tasks: tokio_util::task::TaskTracker,
}

/// Where a valid change of `switchboard.json` goes: the daemon's components, each of which
/// applies what it can live. The watcher only says what changed.
pub trait ApplyConfig: Send + Sync + 'static {
    /// `switchboard.json` changed from `old` to `new` (both valid).
    fn apply<'a>(&'a self, old: &'a Config, new: &'a Config) -> BoxFuture<'a, ()>;
}

/// How long the watcher waits for the next event of a save before it looks at the files.
const DEBOUNCE: Duration = Duration::from_millis(150);
/// The longest a stream of events can put that look off.
const DEBOUNCE_MAX: Duration = Duration::from_secs(1);

/// What the watcher last saw of the file: the hash of its bytes ([`crate::rules::file_hash`]),
/// `None` when it could not be read (missing or unreadable).
type Seen = Option<String>;

/// Which watched file an event may have changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Changed {
    Rules,
    Config,
}

/// Watches the home until shutdown.
///
/// The watch's handler only compares a reported name with the watched files' and passes on
/// nothing else: the debounce and the hashing run for the two watched files only, in this
/// task (hashing on the blocking pool).
pub fn spawn(watched: Watched) -> anyhow::Result<()> {
    let home = &watched.home;
    let dir = home.dir().to_path_buf();
    let path = home.triggers();
    let config_path = home.config_file();
    // What is on disk now, before watching: a save from here on is seen as a change.
    let seen = fingerprint(&path);
    let config_seen = fingerprint(&config_path);
    let (tx, rx) = mpsc::unbounded_channel::<Changed>();
    let names: Names = Arc::default();
    let watcher = {
        let names = names.clone();
        let on_event: dir::OnEvent = Box::new(move |changed| {
            for (name, which) in names.read().unwrap().iter() {
                if names_it(changed, name) {
                    let _ = tx.send(*which);
                }
            }
        });
        dir::recommended(on_event, &watched.tasks)?
    };
    let mut targets = Targets::new(watcher, dir.clone(), names, &path, &config_path)?;
    targets.refresh(&path, &config_path);
    // The settings the daemon started with, as the file gave them; and the ones running now
    // (what a reload applied since).
    let boot = home.load_config().unwrap_or_default();
    let mut running = boot.clone();
    let tasks = watched.tasks.clone();
    tasks.spawn(async move {
        let mut files = Files {
            rx,
            rules: (path, seen),
            config: (config_path, config_seen),
            // The watcher stops watching when dropped: it lives as long as this task.
            targets: Some(targets),
        };
        loop {
            let changed = tokio::select! {
                _ = watched.api.shutdown().cancelled() => break,
                changed = files.next() => changed,
            };
            let Some((rules, config)) = changed else {
                break;
            };
            if rules {
                // The file as the watcher saw it: not read again when `rules check` had the
                // daemon read exactly this file already.
                let unless = files.rules.1.clone();
                let _ = watched.api.call(Reload { unless }).await;
            }
            if config {
                reload_config(&watched, &boot, &mut running).await;
            }
        }
    });
    tracing::info!(dir = %dir.display(), "watching for triggers.json and switchboard.json changes");
    Ok(())
}

/// The file names whose events count, and which watched file each stands for: the two files'
/// own names, and the names of their symlink targets.
type Names = Arc<std::sync::RwLock<Vec<(OsString, Changed)>>>;

/// The directories watched: the home, and the directory of each watched file's symlink target
/// outside it.
struct Targets {
    watcher: Box<dyn DirWatch>,
    /// The home, resolved, to tell a target beside the links from one elsewhere.
    home_real: PathBuf,
    /// The other directories watched now.
    extra: Vec<PathBuf>,
    names: Names,
    /// The two files' own names in the home.
    own: [(OsString, Changed); 2],
}

impl Targets {
    /// Watches the home for the files at `rules` and `config`.
    fn new(
        mut watcher: Box<dyn DirWatch>,
        home: PathBuf,
        names: Names,
        rules: &Path,
        config: &Path,
    ) -> anyhow::Result<Targets> {
        watcher.watch(&home)?;
        let name = |p: &Path| p.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        Ok(Targets {
            watcher,
            home_real: std::fs::canonicalize(&home).unwrap_or(home),
            extra: Vec::new(),
            names,
            own: [
                (name(rules), Changed::Rules),
                (name(config), Changed::Config),
            ],
        })
    }

    /// Resolves the links again: watches the directory of each target outside the home,
    /// stops watching a directory no target is in any more, and counts the targets' names.
    fn refresh(&mut self, rules: &Path, config: &Path) {
        let mut names: Vec<(OsString, Changed)> = self.own.to_vec();
        let mut dirs: Vec<PathBuf> = Vec::new();
        for (path, which) in [(rules, Changed::Rules), (config, Changed::Config)] {
            let Some((dir, name)) = link_target(path) else {
                continue;
            };
            names.push((name, which));
            if dir != self.home_real && !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
        for dir in &dirs {
            if self.extra.contains(dir) {
                continue;
            }
            match self.watcher.watch(dir) {
                Ok(()) => tracing::info!(
                    dir = %dir.display(),
                    "watching the directory of a symlinked rules or config file"
                ),
                Err(err) => tracing::warn!(
                    dir = %dir.display(),
                    cause = %err,
                    "cannot watch the directory of a symlinked rules or config file; edits \
                     there are picked up by `{}` only",
                    crate::home::command("rules reload")
                ),
            }
        }
        for dir in &self.extra {
            if !dirs.contains(dir) {
                self.watcher.unwatch(dir);
            }
        }
        self.extra = dirs;
        *self.names.write().unwrap() = names;
    }
}

/// Where the symlink at `path` points: the real directory of its target and the target's name.
/// `None` when `path` is not a symlink. A dangling link (its target not created yet) still
/// names its target, when the target's directory exists.
fn link_target(path: &Path) -> Option<(PathBuf, OsString)> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.file_type().is_symlink() {
        return None;
    }
    let target = match std::fs::canonicalize(path) {
        Ok(real) => real,
        Err(_) => {
            let link = std::fs::read_link(path).ok()?;
            let link = match path.parent() {
                Some(dir) if link.is_relative() => dir.join(link),
                _ => link,
            };
            std::fs::canonicalize(link.parent()?)
                .ok()?
                .join(link.file_name()?)
        }
    };
    Some((
        target.parent()?.to_path_buf(),
        target.file_name()?.to_os_string(),
    ))
}

/// The watched files, what was last seen of each, and the events that may have changed them.
struct Files {
    rx: mpsc::UnboundedReceiver<Changed>,
    rules: (PathBuf, Seen),
    config: (PathBuf, Seen),
    /// The watches, resolved again after each batch of events (`None` in unit tests, which
    /// send the events themselves).
    targets: Option<Targets>,
}

impl Files {
    /// Waits for a save that changed the content of either file: gathers events until
    /// [`DEBOUNCE`] passes without one (an editor's save is several), then compares hashes,
    /// so one save is one reload and a `touch` is none. Says which changed; `None` once
    /// the watcher is gone.
    async fn next(&mut self) -> Option<(bool, bool)> {
        loop {
            let first = self.rx.recv().await?;
            let (mut rules, mut config) = (first == Changed::Rules, first == Changed::Config);
            let until = Instant::now() + DEBOUNCE_MAX;
            loop {
                let quiet = tokio::time::sleep_until((Instant::now() + DEBOUNCE).min(until));
                tokio::select! {
                    _ = quiet => break,
                    more = self.rx.recv() => match more {
                        Some(Changed::Rules) => rules = true,
                        Some(Changed::Config) => config = true,
                        None => break,
                    },
                }
            }
            if let Some(targets) = &mut self.targets {
                // A link may have been pointed elsewhere.
                targets.refresh(&self.rules.0, &self.config.0);
            }
            let rules = rules && changed_content(&mut self.rules).await;
            let config = config && changed_content(&mut self.config).await;
            if rules || config {
                return Some((rules, config));
            }
        }
    }
}

/// Whether the file's content differs from what was last seen (and remembers it).
async fn changed_content((path, seen): &mut (PathBuf, Seen)) -> bool {
    let read = path.clone();
    let now = tokio::task::spawn_blocking(move || fingerprint(&read))
        .await
        .unwrap_or_else(|_| seen.clone());
    if now == *seen {
        return false;
    }
    *seen = now;
    true
}

/// Reads `switchboard.json` again: the components whose settings changed since the
/// `running` ones apply what can change live; names what needs a restart (what differs from
/// the `boot` settings), and tells `watch`.
async fn reload_config(watched: &Watched, boot: &Config, running: &mut Config) {
    let (report, line) = match read_config(&watched.home) {
        Ok(new) => {
            // `SWITCHBOARD_GITHUB_SECRET` wins over the file, as at start.
            let secret_from_env =
                std::env::var(crate::config::GITHUB_SECRET_ENV).is_ok_and(|v| !v.trim().is_empty());
            let plan = crate::config::plan_reload(boot, running, &new, secret_from_env);
            watched.components.apply(running, &new).await;
            if plan.restart_needed.is_empty() {
                tracing::info!("{}", plan.message);
            } else {
                tracing::warn!("{}", plan.message);
            }
            *running = new;
            let line = plan
                .message
                .strip_prefix("switchboard.json ")
                .unwrap_or(&plan.message)
                .to_string();
            (plan, line)
        }
        Err(errors) => {
            let more = match errors.len() {
                0 | 1 => String::new(),
                n => format!(
                    " (and {} more error{})",
                    n - 1,
                    if n == 2 { "" } else { "s" }
                ),
            };
            let first = errors.first().cloned().unwrap_or_default();
            let line = format!("{first}{more}; still running the previous settings");
            (not_reloaded(errors.join("\n")), line)
        }
    };
    watched.api.announce(Reloaded {
        file: "switchboard.json".into(),
        ok: report.ok,
        line: format!("config: {line}"),
        report: serde_json::to_value(&report).unwrap_or_default(),
    });
    *watched.config_reload.lock().unwrap() = Some(report);
}

/// `switchboard.json` read and checked: the settings, or every error, each located and
/// rendered with the file's name (the defaults when there is no file). A file another user
/// could have changed is not read, as at start ([`Home::check_file`]).
fn read_config(home: &Home) -> Result<Config, Vec<String>> {
    let path = home.config_file();
    if let Err(refused) = home.check_file(&path) {
        return Err(vec![refused.to_string()]);
    }
    match crate::home::read_regular(&path, crate::home::MAX_READ) {
        Ok(text) => crate::config::check(&text).map_err(|errors| {
            errors
                .iter()
                .map(|e| e.render("switchboard.json"))
                .collect()
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
        Err(e) => Err(vec![format!("cannot read switchboard.json: {e}")]),
    }
}

/// The report (and error log line) of a `switchboard.json` that was not applied, for `why`.
fn not_reloaded(why: String) -> ConfigReload {
    let message = format!("switchboard.json not reloaded: {why}; the running settings stay");
    tracing::error!("{message}");
    ConfigReload {
        at: crate::message::format_timestamp(chrono::Utc::now()),
        ok: false,
        message,
        ..Default::default()
    }
}

/// Whether a change the watch reported (a file's name, or `None` for "anything may have
/// changed") can concern the file named `file_name`.
fn names_it(changed: Option<&std::ffi::OsStr>, file_name: &OsString) -> bool {
    changed.is_none_or(|name| name == file_name)
}

/// The hash of the file's bytes, or `None` when it cannot be read.
fn fingerprint(path: &Path) -> Seen {
    std::fs::read(path)
        .ok()
        .map(|bytes| crate::rules::file_hash(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_concerns_the_file_it_names_and_a_lost_queue_concerns_every_file() {
        let name = OsString::from("triggers.json");
        assert!(names_it(Some("triggers.json".as_ref()), &name));
        assert!(!names_it(Some("channels.jsonl".as_ref()), &name));
        assert!(!names_it(Some("triggers.json.swp".as_ref()), &name));
        assert!(names_it(None, &name));
    }

    /// Watched files in `dir` as they are now, and the sender of their events.
    fn files(dir: &Path) -> (Files, mpsc::UnboundedSender<Changed>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let rules = dir.join("triggers.json");
        let config = dir.join("switchboard.json");
        let files = Files {
            rx,
            rules: (rules.clone(), fingerprint(&rules)),
            config: (config.clone(), fingerprint(&config)),
            targets: None,
        };
        (files, tx)
    }

    /// What `files.next()` says within `within`, if anything.
    async fn next_within(files: &mut Files, within: Duration) -> Option<(bool, bool)> {
        tokio::time::timeout(within, files.next())
            .await
            .ok()
            .flatten()
    }

    /// On tokio's paused clock: the debounce and the windows in which nothing may happen pass
    /// without real time, and the debounce is measured exactly.
    #[tokio::test(start_paused = true)]
    async fn a_burst_of_events_for_one_save_is_one_change_and_a_touch_is_none() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("triggers.json"), "{}").unwrap();
        let (mut files, tx) = files(dir.path());
        // An editor's save: several events, the content changed.
        std::fs::write(dir.path().join("triggers.json"), r#"{"rules":[]}"#).unwrap();
        for _ in 0..5 {
            tx.send(Changed::Rules).unwrap();
        }
        let started = Instant::now();
        assert_eq!(
            next_within(&mut files, Duration::from_secs(5)).await,
            Some((true, false))
        );
        assert!(
            started.elapsed() >= DEBOUNCE,
            "looked before the save settled"
        );
        assert_eq!(
            next_within(&mut files, DEBOUNCE * 3).await,
            None,
            "one save, one change"
        );
        // Events without a change of content (a `touch`): nothing.
        tx.send(Changed::Rules).unwrap();
        assert_eq!(next_within(&mut files, DEBOUNCE * 3).await, None);
        // `switchboard.json` created: its own change.
        std::fs::write(dir.path().join("switchboard.json"), "{}").unwrap();
        tx.send(Changed::Config).unwrap();
        assert_eq!(
            next_within(&mut files, Duration::from_secs(5)).await,
            Some((false, true))
        );
        // The watcher gone: the stream ends (it does not time out).
        drop(tx);
        let ended = tokio::time::timeout(Duration::from_secs(5), files.next()).await;
        assert_eq!(ended, Ok(None));
    }

    #[test]
    fn a_link_target_is_its_real_directory_and_name_even_before_it_exists() {
        let home = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let real_outside = std::fs::canonicalize(outside.path()).unwrap();
        let target = outside.path().join("oncall.json");
        std::fs::write(&target, "{}").unwrap();
        let link = home.path().join("triggers.json");
        assert_eq!(link_target(&link), None, "missing");
        std::fs::write(&link, "{}").unwrap();
        assert_eq!(link_target(&link), None, "a plain file");
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(
            link_target(&link),
            Some((real_outside.clone(), OsString::from("oncall.json")))
        );
        // A chain of links ends at the last target.
        let hop = home.path().join("hop.json");
        std::os::unix::fs::symlink(&target, &hop).unwrap();
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink("hop.json", &link).unwrap();
        assert_eq!(
            link_target(&link),
            Some((real_outside.clone(), OsString::from("oncall.json")))
        );
        // Dangling: the directory it names is watched for the file to appear.
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(outside.path().join("later.json"), &link).unwrap();
        assert_eq!(
            link_target(&link),
            Some((real_outside, OsString::from("later.json")))
        );
    }

    #[test]
    fn fingerprint_follows_the_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("triggers.json");
        assert_eq!(fingerprint(&path), None);
        std::fs::write(&path, "{}").unwrap();
        let first = fingerprint(&path);
        assert!(first.is_some());
        std::fs::write(&path, "{}").unwrap();
        assert_eq!(fingerprint(&path), first, "same bytes, same fingerprint");
        std::fs::write(&path, r#"{"rules":[]}"#).unwrap();
        assert_ne!(fingerprint(&path), first);
    }
}
