//! Turns taken first come, first served: the queue of tasks waiting in `Driver::next`.
//!
//! async-lock's mutex is only eventually fair (a task that unlocks and locks again can
//! overtake the waiters), so the driver queues its callers here: a lock that is handed
//! straight to the longest waiter on release. Taking a free turn and passing one nobody
//! waits for are one atomic operation each; the queue and its mutex are for waiters.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

/// [`Turn::word`]: nobody holds the turn.
const FREE: u8 = 0;
/// Somebody holds it.
const HELD: u8 = 1;
/// Added to [`HELD`] (only with the queue's mutex held) when somebody may be queued:
/// passing the turn then takes the slow path, through the queue.
const QUEUED: u8 = 2;

/// A first come, first served async lock without data.
#[derive(Debug, Default)]
pub(crate) struct Turn {
    /// [`FREE`], [`HELD`] or `HELD | QUEUED`. It goes from `FREE` to `HELD` (taking)
    /// and back (passing to nobody) without the mutex; every other change is made
    /// with the mutex held.
    word: AtomicU8,
    state: Mutex<TurnState>,
}

#[derive(Debug, Default)]
struct TurnState {
    /// Waiters in arrival order.
    queue: VecDeque<(u64, Waker)>,
    /// The waiter the turn was handed to, until it notices.
    granted: Option<u64>,
    next_id: u64,
}

impl Turn {
    fn state(&self) -> MutexGuard<'_, TurnState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the turn if it is free.
    fn try_take(&self) -> bool {
        self.word
            .compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// With the mutex held: takes the turn if it was just passed to nobody (`true`), or
    /// marks it as having waiters, so that passing it goes through the queue.
    fn take_or_mark_queued(&self) -> bool {
        loop {
            let word = self.word.load(Ordering::Acquire);
            if word == FREE {
                if self.try_take() {
                    return true;
                }
            } else if word & QUEUED != 0
                || self
                    .word
                    .compare_exchange(word, word | QUEUED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                return false;
            }
        }
    }

    /// Whether nobody holds the turn and nobody waits for it. Only a hint (it may change
    /// right after), costing one load where taking and passing the turn cost an atomic
    /// read-modify-write each.
    pub(crate) fn is_free(&self) -> bool {
        self.word.load(Ordering::Acquire) == FREE
    }

    /// How many tasks wait for the turn (not counting its holder).
    pub(crate) fn queued(&self) -> usize {
        self.state().queue.len()
    }

    /// Waits for the turn; it passes on when the guard is dropped.
    pub(crate) fn lock(&self) -> TakeTurn<'_> {
        TakeTurn {
            turn: self,
            queued: None,
            done: false,
        }
    }

    /// Hands the turn to the longest waiter, or frees it.
    fn pass(&self) {
        if self
            .word
            .compare_exchange(HELD, FREE, Ordering::Release, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
        let next = {
            let mut st = self.state();
            match st.queue.pop_front() {
                Some((id, waker)) => {
                    st.granted = Some(id);
                    if st.queue.is_empty() {
                        self.word.store(HELD, Ordering::Release);
                    }
                    Some(waker)
                }
                None => {
                    self.word.store(FREE, Ordering::Release);
                    None
                }
            }
        };
        if let Some(waker) = next {
            waker.wake();
        }
    }
}

/// The future of [`Turn::lock`].
pub(crate) struct TakeTurn<'a> {
    turn: &'a Turn,
    queued: Option<u64>,
    done: bool,
}

impl<'a> Future for TakeTurn<'a> {
    type Output = TurnGuard<'a>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<TurnGuard<'a>> {
        let this = &mut *self;
        assert!(!this.done, "TakeTurn polled after completion");
        let turn = this.turn;
        if this.queued.is_none() && turn.try_take() {
            this.done = true;
            return Poll::Ready(TurnGuard { turn });
        }
        let mut st = turn.state();
        match this.queued {
            None if turn.take_or_mark_queued() => {}
            None => {
                let id = st.next_id;
                st.next_id += 1;
                st.queue.push_back((id, cx.waker().clone()));
                this.queued = Some(id);
                return Poll::Pending;
            }
            Some(id) if st.granted == Some(id) => st.granted = None,
            Some(id) => {
                if let Some((_, w)) = st.queue.iter_mut().find(|(i, _)| *i == id) {
                    w.clone_from(cx.waker());
                }
                return Poll::Pending;
            }
        }
        this.done = true;
        this.queued = None;
        Poll::Ready(TurnGuard { turn })
    }
}

impl Drop for TakeTurn<'_> {
    fn drop(&mut self) {
        let Some(id) = self.queued else { return };
        let mut st = self.turn.state();
        if st.granted == Some(id) {
            // Handed the turn but gone before taking it: pass it on.
            st.granted = None;
            drop(st);
            self.turn.pass();
        } else {
            st.queue.retain(|(i, _)| *i != id);
        }
    }
}

/// Holds the turn until dropped.
pub(crate) struct TurnGuard<'a> {
    turn: &'a Turn,
}

impl Drop for TurnGuard<'_> {
    fn drop(&mut self) {
        self.turn.pass();
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use futures_lite::future;

    use super::*;

    #[test]
    fn turns_go_in_arrival_order_even_to_a_task_that_comes_back() {
        let turn = Turn::default();
        let order = RefCell::new(Vec::new());
        let task = |name: &'static str, rounds: usize| {
            let (turn, order) = (&turn, &order);
            async move {
                for _ in 0..rounds {
                    let _t = turn.lock().await;
                    order.borrow_mut().push(name);
                    future::yield_now().await;
                }
            }
        };
        future::block_on(future::zip(
            task("a", 3),
            future::zip(task("b", 3), task("c", 3)),
        ));
        assert_eq!(
            *order.borrow(),
            ["a", "b", "c", "a", "b", "c", "a", "b", "c"]
        );
    }

    #[test]
    fn a_waiter_that_leaves_does_not_keep_the_turn() {
        let turn = Turn::default();
        let first = future::block_on(turn.lock());
        let mut second = Box::pin(turn.lock());
        let mut third = Box::pin(turn.lock());
        assert!(future::block_on(future::poll_once(second.as_mut())).is_none());
        assert!(future::block_on(future::poll_once(third.as_mut())).is_none());
        drop(first); // handed to `second`...
        drop(second); // ...which leaves before noticing: `third` gets it
        let _third = future::block_on(third);
        assert!(future::block_on(future::poll_once(turn.lock())).is_none());
    }

    #[test]
    fn one_holder_at_a_time_across_threads_and_nobody_is_left_waiting() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, AtomicUsize};

        let turn = Arc::new(Turn::default());
        let inside = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (turn, inside, done) = (turn.clone(), inside.clone(), done.clone());
                std::thread::spawn(move || {
                    for i in 0..20_000 {
                        let _t = future::block_on(turn.lock());
                        assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                        if i % 64 == 0 {
                            std::thread::yield_now();
                        }
                        inside.store(false, Ordering::SeqCst);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(done.load(Ordering::Relaxed), 80_000);
        // Free again, through the fast path.
        assert_eq!(turn.word.load(Ordering::SeqCst), FREE);
        assert!(future::block_on(future::poll_once(turn.lock())).is_some());
    }
}
