//! `work_in`: an item pulled from the shared queue becomes local work (a fresh action id, its
//! creation recorded, queued first for the waiting sessions). The daemon's own call: never
//! served over the socket.

use serde::{Deserialize, Serialize};

use crate::actions::Item;
use crate::control::{ApiError, Ctx, Op};

/// Takes in a pulled item.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkIn {
    /// The item, as the instance that made it published it.
    pub item: Item,
    /// The shared queue's name for it (its message carries it as `jetstream.work`).
    pub key: String,
}

impl Op for WorkIn {
    /// The local item.
    type Reply = Item;
    const REMOTE: bool = false;

    async fn apply(self, cx: &Ctx<'_>) -> Result<Item, ApiError> {
        let id = cx.core().next_action_id();
        Ok(cx
            .lifecycle()
            .take_in(self.item, id, &self.key, chrono::Utc::now()))
    }
}
