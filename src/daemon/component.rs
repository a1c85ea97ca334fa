//! The shape of a part of the daemon beside the core, and the list the daemon starts.
//!
//! A [`Component`] is built from its own settings (`exec`, `upstreams`, the HTTP listeners...)
//! and comes up in two steps, because the operations are built from what the parts report:
//! [`Component::report`] hands the operations what it answers for (a part of `stats`, families
//! of `/metrics`, the upstream tools, where appends go), then [`Component::start`] runs it with
//! a [`Context`] that holds them. [`Components`] is the list in start order; once started it
//! is [`Running`], which a change of `switchboard.json` reaches: only the components whose
//! sections changed are reloaded, and each applies what it can live (the rest waits for a
//! restart, as the reload's report says).

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, Home};
use crate::control::local::BoxFuture;
use crate::control::{Local, Parts};
use crate::sources::SourceContext;

/// What a component may use once it starts: the operations (its only way to the core), the
/// shutdown token, the task tracker every task runs on, and the home.
#[derive(Clone)]
pub struct Context {
    /// The operations.
    pub api: Local,
    /// Where its tasks run.
    pub tasks: TaskTracker,
    /// The home.
    pub home: Home,
}

impl Context {
    /// Fires when the daemon shuts down.
    pub fn shutdown(&self) -> &CancellationToken {
        self.api.shutdown()
    }

    /// The context of a source: where it appends, where its tasks run.
    pub fn source(&self) -> SourceContext {
        SourceContext::new(self.api.clone(), self.tasks.clone())
    }
}

/// A part of the daemon beside the core, built from its own settings.
pub trait Component: Send + Sync + 'static {
    /// What of `switchboard.json` it is built from.
    type Settings;

    /// The sections (or keys) of `switchboard.json` it is built from: a reload that changes
    /// none of them leaves it alone.
    const KEYS: &'static [&'static str];

    /// Its settings in `config`.
    fn settings(config: &Config) -> Self::Settings;

    /// Adds what it answers for to the operations' parts, before the operations are built.
    fn report(&self, parts: Parts) -> Parts {
        parts
    }

    /// Starts it from `settings`: its tasks go on `cx.tasks` and end when `cx.shutdown()` fires.
    fn start(&self, cx: &Context, settings: Self::Settings) -> anyhow::Result<()>;

    /// Applies changed settings without a restart, where it can. By default it cannot: the
    /// change takes effect at the next start.
    fn reload<'a>(&'a self, cx: &'a Context, settings: Self::Settings) -> BoxFuture<'a, ()> {
        let _ = (cx, settings);
        Box::pin(async {})
    }
}

/// A [`Component`] in the list, its settings type erased.
trait Entry: Send + Sync {
    fn report(&self, parts: Parts) -> Parts;
    fn start(&self, cx: &Context, config: &Config) -> anyhow::Result<()>;
    fn concerned(&self, changed: &[String]) -> bool;
    fn reload<'a>(&'a self, cx: &'a Context, config: &'a Config) -> BoxFuture<'a, ()>;
}

impl<C: Component> Entry for C {
    fn report(&self, parts: Parts) -> Parts {
        Component::report(self, parts)
    }

    fn start(&self, cx: &Context, config: &Config) -> anyhow::Result<()> {
        Component::start(self, cx, C::settings(config))
    }

    fn concerned(&self, changed: &[String]) -> bool {
        changed.iter().any(|key| {
            C::KEYS.iter().any(|own| {
                key == own
                    || key
                        .strip_prefix(own)
                        .is_some_and(|rest| rest.starts_with('.'))
            })
        })
    }

    fn reload<'a>(&'a self, cx: &'a Context, config: &'a Config) -> BoxFuture<'a, ()> {
        Component::reload(self, cx, C::settings(config))
    }
}

/// The components of the daemon, in the order they start.
#[derive(Default)]
pub struct Components {
    list: Vec<Box<dyn Entry>>,
}

impl Components {
    /// Adds `component` after the others.
    pub fn with(mut self, component: impl Component) -> Components {
        self.list.push(Box::new(component));
        self
    }

    /// What every component answers for, added to `parts`.
    pub fn report(&self, parts: Parts) -> Parts {
        self.list.iter().fold(parts, |parts, c| c.report(parts))
    }

    /// Starts each from its settings in `config`, in order; the first failure stops the rest.
    pub fn start(self, cx: Context, config: &Config) -> anyhow::Result<Running> {
        for component in &self.list {
            component.start(&cx, config)?;
        }
        Ok(Running {
            components: self,
            cx,
        })
    }
}

/// The components, started.
pub struct Running {
    components: Components,
    cx: Context,
}

impl Running {
    /// What they use.
    pub fn context(&self) -> &Context {
        &self.cx
    }

    /// `switchboard.json` changed from `old` to `new` (both valid): each component built from
    /// a section that changed applies its new settings where it can.
    pub async fn reload(&self, old: &Config, new: &Config) {
        let changed = crate::config::changed_keys(old, new);
        for component in &self.components.list {
            if component.concerned(&changed) {
                component.reload(&self.cx, new).await;
            }
        }
    }
}

impl crate::watch::ApplyConfig for Running {
    fn apply<'a>(&'a self, old: &'a Config, new: &'a Config) -> BoxFuture<'a, ()> {
        Box::pin(self.reload(old, new))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A component that records what it was asked to do.
    struct Probe {
        seen: Arc<Mutex<Vec<String>>>,
    }

    impl Component for Probe {
        type Settings = usize;
        const KEYS: &'static [&'static str] = &["actions.queueCapacity", "http"];

        fn settings(config: &Config) -> usize {
            config.actions.queue_capacity
        }

        fn start(&self, _: &Context, settings: usize) -> anyhow::Result<()> {
            self.seen.lock().unwrap().push(format!("start {settings}"));
            Ok(())
        }

        fn reload<'a>(&'a self, _: &'a Context, settings: usize) -> BoxFuture<'a, ()> {
            self.seen.lock().unwrap().push(format!("reload {settings}"));
            Box::pin(async {})
        }
    }

    #[tokio::test]
    async fn a_reload_reaches_only_the_components_whose_sections_changed() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(dir.path()).unwrap();
        let core = crate::app::Core::memory(
            crate::daemon::core_settings(&Config::default()),
            crate::rules::RuleSet::builtin(),
        );
        let cx = Context {
            api: Local::bare(core),
            tasks: TaskTracker::new(),
            home,
        };
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let boot = Config::default();
        let running = Components::default()
            .with(Probe { seen: seen.clone() })
            .start(cx, &boot)
            .unwrap();
        let start = format!("start {}", boot.actions.queue_capacity);
        assert_eq!(*seen.lock().unwrap(), vec![start.clone()]);

        let mut other = boot.clone();
        other.exec.max_concurrent += 1;
        other.actions.held_nudges += 1;
        running.reload(&boot, &other).await;
        assert_eq!(
            *seen.lock().unwrap(),
            vec![start.clone()],
            "not its sections"
        );

        let mut bigger = boot.clone();
        bigger.actions.queue_capacity = 7;
        running.reload(&boot, &bigger).await;
        let mut limited = boot.clone();
        limited.http.rate_limit = "5/s".into();
        running.reload(&boot, &limited).await;
        assert_eq!(
            *seen.lock().unwrap(),
            [
                start,
                "reload 7".to_string(),
                format!("reload {}", boot.actions.queue_capacity)
            ]
        );
    }
}
