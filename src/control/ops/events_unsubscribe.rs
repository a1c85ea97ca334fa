//! `events_unsubscribe`: the MCP Events `events/unsubscribe`: ends the webhook subscription of
//! the same key (principal, `delivery.url`, name, arguments) at once.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::WebhookDelivery;
use crate::control::events::not_found;
use crate::control::{ApiError, Ctx, Op};

/// Ends a webhook subscription.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventsUnsubscribe {
    /// The event type.
    pub name: String,
    /// Its arguments, as subscribed.
    #[serde(default)]
    pub arguments: Option<Value>,
    /// The callback URL, as subscribed.
    pub delivery: WebhookDelivery,
}

impl Op for EventsUnsubscribe {
    type Reply = Value;

    async fn apply(self, cx: &Ctx<'_>) -> Result<Value, ApiError> {
        let Some(hooks) = cx.parts().event_hooks() else {
            return Err(not_found(
                "subscription",
                "events: no webhook subscription; this daemon delivers no webhooks",
            ));
        };
        hooks.unsubscribe(self).await?;
        Ok(json!({}))
    }
}
