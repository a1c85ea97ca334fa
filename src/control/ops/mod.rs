//! Every operation, one file each: its request, its reply, how the daemon applies it (with the
//! components its [`Ctx`] hands it: `cx.inbox()`, `cx.lifecycle()`, `cx.state()`, `cx.core()`, …).
//!
//! The [`ops!`] table below is the one list: it declares the modules, builds [`Call`] (the
//! enum that travels over the control socket, tagged by `op`) and its one `match`
//! ([`Call::apply`]). Adding an operation is a new file and a line here (and, when it needs
//! one, a method on the component it uses).

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{ApiError, Ctx, Op};

macro_rules! ops {
    ($($(#[$doc:meta])* $variant:ident => $module:ident :: $ty:ident,)*) => {
        $(pub mod $module;)*
        $(pub use $module::*;)*

        /// One call, as it travels: `{"op": "wait", ...the op's fields}`.
        #[derive(Debug, Serialize, Deserialize)]
        #[serde(tag = "op", rename_all = "snake_case")]
        pub enum Call {
            $($(#[$doc])* $variant($ty),)*
        }

        $(impl From<$ty> for Call {
            fn from(op: $ty) -> Call {
                Call::$variant(op)
            }
        })*

        impl Call {
            /// Every call's name on the wire, for errors that name a call the daemon does not know.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($module),)*];

            /// The call's name on the wire (`wait`, `confirm`, ...).
            pub fn name(&self) -> &'static str {
                match self {
                    $(Call::$variant(_) => stringify!($module),)*
                }
            }

            /// Whether it is applied in arrival order, before what the connection sends next.
            pub fn is_ordered(&self) -> bool {
                match self {
                    $(Call::$variant(_) => <$ty as Op>::ORDERED,)*
                }
            }

            /// Whether it may come over the socket (the exec runner's calls are the daemon's own).
            pub fn is_remote(&self) -> bool {
                match self {
                    $(Call::$variant(_) => <$ty as Op>::REMOTE,)*
                }
            }

            /// Applies the call and encodes its reply.
            pub async fn apply(self, cx: &Ctx<'_>) -> Result<Box<RawValue>, ApiError> {
                match self {
                    $(Call::$variant(op) => encode(op.apply(cx).await),)*
                }
            }
        }
    };
}

ops! {
    /// Open a session.
    Open => open::Open,
    /// Close a session.
    Close => close::Close,
    /// Settle claims.
    Settle => settle::Settle,
    /// Take or wait for items.
    Wait => wait::Wait,
    /// Messages after a cursor.
    Pull => pull::Pull,
    /// The newest messages.
    List => list::List,
    /// Mark everything read.
    Ack => ack::Ack,
    /// Answer a confirm.
    Confirm => confirm::Confirm,
    /// Open confirm requests.
    Pending => pending::Pending,
    /// One stored message.
    Message => message::GetMessage,
    /// Pause or resume evaluation.
    Pause => pause::Pause,
    /// Reload triggers.json.
    Reload => reload::Reload,
    /// The live rules.
    Rules => rules::Rules,
    /// Stats, with a consumer's position.
    Stats => stats::GetStats,
    /// The daemon's identity, listeners and stats.
    Status => status::GetStatus,
    /// `/metrics` as Prometheus text.
    Metrics => metrics::RenderMetrics,
    /// Append messages.
    Append => append::Append,
    /// Append what fits of a batch.
    AppendEach => append_each::AppendEach,
    /// The upstream tools.
    UpstreamTools => upstream_tools::UpstreamTools,
    /// Forward a call to an upstream tool.
    CallUpstream => call_upstream::CallUpstream,
    /// Change the action queues' capacity (a config reload).
    QueueCapacity => queue_capacity::QueueCapacity,
    /// The exec runner takes work.
    ExecNext => exec_next::ExecNext,
    /// The exec runner reports a run's end.
    ExecFinish => exec_finish::ExecFinish,
    /// Stop the daemon.
    Shutdown => shutdown::Shutdown,
    /// Whether a session pushes queued work.
    PushBy => push_by::PushBy,
    /// A host's agent is about to stop: hand it work, or let it stop.
    HookStop => hook_stop::HookStop,
    /// A stop hook wrote its decision (or could not).
    HookDone => hook_done::HookDone,
    /// On-duty mode for the stop hooks.
    Duty => duty::SetDuty,
    /// How the recently closed confirms ended.
    Closed => closed::Closed,
    /// A one-time link to the approval page.
    UiLink => ui_link::UiLink,
    /// Revoke the approval page's sessions and links.
    UiRevoke => ui_revoke::UiRevoke,
    /// A shared stream's consumer stores what it delivers.
    Replicate => replicate::Replicate,
    /// Whether a session puts a confirm to its user in an elicitation form.
    Elicit => elicit::Elicit,
    /// The shared queue's component takes work to publish.
    WorkOut => work_out::WorkOut,
    /// Work left for the shared queue.
    WorkShared => work_shared::WorkShared,
    /// Wait for a session that waits for work.
    WorkDemand => work_demand::WorkDemand,
    /// An item pulled from the shared queue becomes local work.
    WorkIn => work_in::WorkIn,
    /// Take back taken-in work no session claimed.
    WorkWithdraw => work_withdraw::WorkWithdraw,
    /// Where taken-in work is now.
    WorkHeld => work_held::WorkHeld,
    /// A session's host relays a permission prompt.
    RelayPermission => relay_permission::RelayPermission,
    /// A host's tool call ran: close the relayed request allowed in its own dialog.
    ToolRan => tool_ran::ToolRan,
    /// Answer a message in the conversation it came from.
    Reply => reply::Reply,
    /// MCP Events: the occurrences after a cursor (`events/poll`, a stream's turn).
    EventsPoll => events_poll::EventsPoll,
    /// MCP Events: make or refresh a webhook subscription.
    EventsSubscribe => events_subscribe::EventsSubscribe,
    /// MCP Events: end a webhook subscription.
    EventsUnsubscribe => events_unsubscribe::EventsUnsubscribe,
}

fn encode<T: Serialize>(reply: Result<T, ApiError>) -> Result<Box<RawValue>, ApiError> {
    let value = reply?;
    serde_json::value::to_raw_value(&value).map_err(|e| {
        ApiError::refused(
            super::RefusalCode::Failed,
            format!("the reply does not encode: {e}"),
        )
    })
}
