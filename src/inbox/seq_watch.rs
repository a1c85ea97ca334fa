//! A watch of one seq that only rises: the highest visible message, which every append moves.
//!
//! `tokio::sync::watch` would do, but it is built for any value: each send takes a write lock
//! and wakes through eight `Notify`s, one mutex each, whether anyone waits or not, which was
//! a sixth of an append by `perf`. A seq fits an atomic, so here a send is one `fetch_max`,
//! and the one `Notify` is touched only while a receiver waits.
//!
//! No wake-up is lost: a waiting receiver registers with the `Notify`, then counts itself
//! among the waiters, then reads the seq; a sender raises the seq, then reads the count. All
//! four are `SeqCst`, so either the receiver reads the new seq or the sender sees it waiting
//! and notifies it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};

use tokio::sync::Notify;

use crate::message::Seq;

/// The sending side: raises the seq and wakes the receivers waiting for a change. Dropping it
/// closes the watch: waiting receivers get [`Closed`].
#[derive(Debug)]
pub struct SeqWatch {
    shared: Arc<Shared>,
}

/// A receiver: reads the seq and waits until it is not the one it last saw.
#[derive(Clone, Debug)]
pub struct SeqReceiver {
    shared: Arc<Shared>,
    seen: Seq,
}

/// The sender is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the seq watch is closed")]
pub struct Closed;

#[derive(Debug)]
struct Shared {
    value: AtomicU64,
    /// Receivers inside [`SeqReceiver::changed`].
    waiters: AtomicUsize,
    closed: AtomicBool,
    notify: Notify,
}

impl SeqWatch {
    /// A watch starting at `seq`.
    pub fn new(seq: Seq) -> SeqWatch {
        SeqWatch {
            shared: Arc::new(Shared {
                value: seq.into(),
                waiters: AtomicUsize::new(0),
                closed: AtomicBool::new(false),
                notify: Notify::new(),
            }),
        }
    }

    /// The seq now.
    pub fn get(&self) -> Seq {
        self.shared.value.load(SeqCst)
    }

    /// Raises the seq to `seq`; true when it moved (a lower or equal `seq` changes nothing).
    pub fn advance(&self, seq: Seq) -> bool {
        let moved = self.shared.value.fetch_max(seq, SeqCst) < seq;
        if moved {
            self.wake();
        }
        moved
    }

    /// Sets the seq to `seq`, lower or not (a daemon's seqs after its home was replaced).
    pub fn replace(&self, seq: Seq) {
        if self.shared.value.swap(seq, SeqCst) != seq {
            self.wake();
        }
    }

    /// A receiver that has seen the seq of now.
    pub fn subscribe(&self) -> SeqReceiver {
        SeqReceiver {
            seen: self.get(),
            shared: Arc::clone(&self.shared),
        }
    }

    fn wake(&self) {
        if self.shared.waiters.load(SeqCst) > 0 {
            self.shared.notify.notify_waiters();
        }
    }
}

impl Drop for SeqWatch {
    fn drop(&mut self) {
        self.shared.closed.store(true, SeqCst);
        self.shared.notify.notify_waiters();
    }
}

impl SeqReceiver {
    /// The seq now.
    pub fn borrow(&self) -> Seq {
        self.shared.value.load(SeqCst)
    }

    /// The seq now, which this receiver has then seen.
    pub fn borrow_and_update(&mut self) -> Seq {
        self.seen = self.borrow();
        self.seen
    }

    /// Waits until the seq is not the one this receiver last saw, and marks it seen; `Err`
    /// once the sender is gone. Cancel-safe.
    pub async fn changed(&mut self) -> Result<(), Closed> {
        let shared = &*self.shared;
        loop {
            let notified = shared.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let _waiting = Waiting::enter(&shared.waiters);
            let now = shared.value.load(SeqCst);
            if now != self.seen {
                self.seen = now;
                return Ok(());
            }
            if shared.closed.load(SeqCst) {
                return Err(Closed);
            }
            notified.await;
        }
    }

    /// Waits until `until` holds for the seq, and returns it; `Err` once the sender is gone
    /// and it does not hold.
    pub async fn wait_for(&mut self, until: impl Fn(Seq) -> bool) -> Result<Seq, Closed> {
        loop {
            let now = self.borrow_and_update();
            if until(now) {
                return Ok(now);
            }
            self.changed().await?;
        }
    }
}

/// Counts a receiver among the waiters for as long as it lives, however `changed` ends.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn enter(waiters: &'a AtomicUsize) -> Waiting<'a> {
        waiters.fetch_add(1, SeqCst);
        Waiting(waiters)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// `fut`'s output, failing the test if a wake-up does not come.
    async fn soon<F: std::future::Future>(fut: F) -> F::Output {
        tokio::time::timeout(Duration::from_secs(10), fut)
            .await
            .expect("a wake-up was lost")
    }

    #[tokio::test]
    async fn changed_sees_a_rise_and_only_a_rise() {
        let watch = SeqWatch::new(3);
        let mut rx = watch.subscribe();
        assert_eq!(rx.borrow(), 3);
        assert!(!watch.advance(2), "a lower seq changes nothing");
        assert!(!watch.advance(3));
        let nothing = tokio::time::timeout(Duration::from_millis(20), rx.changed()).await;
        assert!(nothing.is_err(), "no change, no wake-up");
        assert!(watch.advance(5));
        soon(rx.changed()).await.unwrap();
        assert_eq!(rx.borrow_and_update(), 5);
        watch.replace(1);
        soon(rx.changed()).await.unwrap();
        assert_eq!(rx.borrow(), 1, "replace may go down");
        let closed = rx.clone();
        drop(watch);
        assert_eq!(soon(rx.changed()).await, Err(Closed));
        assert_eq!(soon(closed.clone().changed()).await, Err(Closed));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_wake_up_is_lost_between_threads() {
        // A receiver that waits for every seq in turn, and a sender on another thread that
        // raises it one by one: a lost wake-up leaves the receiver waiting, and the timeout
        // fails the test.
        const N: Seq = 20_000;
        let watch = Arc::new(SeqWatch::new(0));
        let mut rx = watch.subscribe();
        let waiter = tokio::spawn(async move {
            let mut seen = 0;
            while seen < N {
                rx.changed().await.unwrap();
                let now = rx.borrow_and_update();
                assert!(now > seen, "the seq only rises");
                seen = now;
            }
        });
        let sender = Arc::clone(&watch);
        let raise = std::thread::spawn(move || {
            for seq in 1..=N {
                sender.advance(seq);
                if seq % 64 == 0 {
                    std::thread::yield_now();
                }
            }
        });
        soon(waiter).await.unwrap();
        raise.join().unwrap();
    }

    #[tokio::test]
    async fn a_cancelled_wait_leaves_no_waiter_behind() {
        let watch = SeqWatch::new(0);
        let mut rx = watch.subscribe();
        let _ = tokio::time::timeout(Duration::from_millis(5), rx.changed()).await;
        assert_eq!(watch.shared.waiters.load(SeqCst), 0);
        let waited = rx.wait_for(|s| s >= 2);
        tokio::pin!(waited);
        assert!(futures::poll!(waited.as_mut()).is_pending());
        assert_eq!(
            watch.shared.waiters.load(SeqCst),
            1,
            "counted while it waits"
        );
        watch.advance(1);
        watch.advance(2);
        assert_eq!(soon(waited).await, Ok(2));
        assert_eq!(watch.shared.waiters.load(SeqCst), 0);
    }
}
