//! The newest stream seq stored in the local inbox, and the ingests waiting for theirs.
//!
//! An ingest's reply waits until this instance's consumer stored the stream seq JetStream gave
//! its message (its seqs are the local inbox's). A `tokio::sync::watch` woke every waiting
//! ingest at each stored batch, and each re-checked its seq and most went back to sleep: with
//! 16 posters, 16 wake-ups per batch. Here each waiter is filed under the seq it waits for, and
//! a batch wakes only those whose seq it reached, each once.
//!
//! No wake-up is lost: a waiter reads the seq and files itself under the same lock that a
//! rise takes after raising the seq, so either it reads the new seq or the rise finds it.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use tokio::sync::oneshot;

/// The applied mark and its waiters.
#[derive(Debug, Default)]
pub(super) struct Applied {
    seq: AtomicU64,
    /// Waiters by the seq they wait for.
    waiters: Mutex<BTreeMap<u64, Vec<oneshot::Sender<()>>>>,
}

impl Applied {
    /// The newest stream seq stored.
    pub(super) fn get(&self) -> u64 {
        self.seq.load(SeqCst)
    }

    /// Raises the mark to `seq` (a lower one changes nothing) and wakes the waiters it reached.
    pub(super) fn advance(&self, seq: u64) {
        if self.seq.fetch_max(seq, SeqCst) >= seq {
            return;
        }
        let reached = {
            let mut waiters = self.waiters.lock().unwrap();
            if waiters.is_empty() {
                return;
            }
            let later = waiters.split_off(&(seq + 1));
            std::mem::replace(&mut *waiters, later)
        };
        for tx in reached.into_values().flatten() {
            let _ = tx.send(());
        }
    }

    /// Waits until the mark reaches `seq`, for at most `timeout`; whether it did.
    pub(super) async fn reached(&self, seq: u64, timeout: Duration) -> bool {
        let rx = {
            let mut waiters = self.waiters.lock().unwrap();
            if self.get() >= seq {
                return true;
            }
            let (tx, rx) = oneshot::channel();
            waiters.entry(seq).or_default().push(tx);
            rx
        };
        if let Ok(Ok(())) = tokio::time::timeout(timeout, rx).await {
            return true;
        }
        // Given up: its entry goes now, not when the mark passes it (it may not for long).
        let mut waiters = self.waiters.lock().unwrap();
        if let Some(those) = waiters.get_mut(&seq) {
            those.retain(|tx| !tx.is_closed());
            if those.is_empty() {
                waiters.remove(&seq);
            }
        }
        self.get() >= seq
    }

    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.waiters.lock().unwrap().values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    const LONG: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn a_rise_wakes_the_waiters_it_reached_and_no_others() {
        let applied = Arc::new(Applied::default());
        applied.advance(3);
        assert!(applied.reached(3, LONG).await, "already there: no wait");
        let wait = |seq| {
            let applied = applied.clone();
            tokio::spawn(async move { applied.reached(seq, LONG).await })
        };
        let (five, six, nine) = (wait(5), wait(6), wait(9));
        while applied.waiting() < 3 {
            tokio::task::yield_now().await;
        }
        applied.advance(6);
        assert!(five.await.unwrap());
        assert!(six.await.unwrap());
        assert_eq!(applied.waiting(), 1, "9 is not reached: still waiting");
        applied.advance(2);
        assert_eq!(applied.get(), 6, "the mark never goes down");
        applied.advance(9);
        assert!(nine.await.unwrap());
        assert_eq!(applied.waiting(), 0);
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_leaves_nothing_behind() {
        let applied = Applied::default();
        assert!(!applied.reached(4, Duration::from_millis(10)).await);
        assert_eq!(applied.waiting(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_wake_up_is_lost_between_a_look_and_a_rise() {
        let applied = Arc::new(Applied::default());
        for seq in 1..=2000u64 {
            let waiter = {
                let applied = applied.clone();
                tokio::spawn(async move { applied.reached(seq, LONG).await })
            };
            applied.advance(seq);
            assert!(waiter.await.unwrap(), "seq {seq}: a wake-up was lost");
        }
    }
}
