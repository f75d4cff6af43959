//! A store call that holds the frontier for a while (an fsync under write-back pressure,
//! say) must not make a poll waiting behind it record its send as earlier than it goes
//! out: the scope's next request would then follow it without its delay. Real time on a
//! multi-threaded runtime, as a crawl runs.

use std::time::{Duration, Instant};

use polite_frontier_core::{
    Frontier, FrontierError, MemoryStoreError, Poll, PushOutcome, Request, RequestId, Scheduling,
    VolatileStore,
};
use polite_runtime_tokio::{Clock, DriverError, DriverFor};
use polite_throttle_core::{
    CrawlDelayDecision, Outcome, QuotaReconcile, ScopeConfig, Settings, Timestamp,
};

/// The in-memory frontier, run off the executor like a blocking store, whose `complete`
/// takes `slow` (inside the driver's hold on the frontier).
struct SlowComplete {
    inner: Frontier<VolatileStore>,
    slow: Duration,
    /// Every checkpoint fails (a store whose disk went away).
    checkpoint_fails: bool,
}

type Error = FrontierError<<Frontier<VolatileStore> as Scheduling>::StoreError>;

impl Scheduling for SlowComplete {
    type StoreError = <Frontier<VolatileStore> as Scheduling>::StoreError;
    type Closed = VolatileStore;
    const BLOCKING: bool = true;

    fn push(&mut self, request: &Request, now: Timestamp) -> Result<PushOutcome, Error> {
        self.inner.push(request, now)
    }

    fn poll(&mut self, now: Timestamp) -> Result<Poll, Error> {
        self.inner.poll(now)
    }

    fn complete(
        &mut self,
        lease: RequestId,
        outcome: &Outcome<'_>,
        now: Timestamp,
    ) -> Result<bool, Error> {
        std::thread::sleep(self.slow);
        self.inner.complete(lease, outcome, now)
    }

    fn retry(
        &mut self,
        lease: RequestId,
        outcome: &Outcome<'_>,
        priority_adjust: i32,
        now: Timestamp,
    ) -> Result<bool, Error> {
        self.inner.retry(lease, outcome, priority_adjust, now)
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        self.inner.poll_timeout()
    }

    fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }

    fn delay_scope(&mut self, scope: &str, secs: f64, now: Timestamp) -> Result<(), Error> {
        self.inner.delay_scope(scope, secs, now)
    }

    fn handle_crawl_delay(
        &mut self,
        scope: &str,
        secs: f64,
        now: Timestamp,
    ) -> Result<CrawlDelayDecision, Error> {
        self.inner.handle_crawl_delay(scope, secs, now)
    }

    fn reconcile_quota(
        &mut self,
        scope: &str,
        how: QuotaReconcile,
        now: Timestamp,
    ) -> Result<(), Error> {
        self.inner.reconcile_quota(scope, how, now)
    }

    fn flush(&mut self) -> Result<(), Error> {
        self.inner.flush()
    }

    fn checkpoint(&mut self) -> Result<(), Error> {
        if self.checkpoint_fails {
            return Err(FrontierError::Store(MemoryStoreError::UnknownSeq(0)));
        }
        self.inner.checkpoint()
    }

    fn close(self) -> Result<VolatileStore, Error> {
        self.inner.close()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_behind_a_slow_call_keeps_the_scope_delay() {
    const DELAY: f64 = 0.25;
    let clock = Clock::wall();
    let settings = Settings::default()
        .without_jitter()
        .with_scope("a.test", ScopeConfig::new().delay(DELAY));
    let frontier = SlowComplete {
        inner: Frontier::in_memory(settings, clock.now()).unwrap(),
        slow: Duration::from_millis(800),
        checkpoint_fails: false,
    };
    let driver = DriverFor::new(frontier, clock);
    let requests = (0..3).map(|i| Request::get(format!("http://a.test/{i}")));
    driver.push_all(requests.collect()).await.unwrap();
    let first = driver.next().await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_secs_f64(DELAY + 0.05)).await;
    // The completion holds the frontier for 0.8 s; a poll asks 50 ms into it, when the
    // scope's delay since the first send has passed.
    let completing = {
        let driver = driver.clone();
        tokio::spawn(async move { driver.complete(first.id(), Outcome::status(200)).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = driver.next().await.unwrap().unwrap();
    let second_at = Instant::now();
    completing.await.unwrap().unwrap();
    let third = driver.next().await.unwrap().unwrap();
    let gap = second_at.elapsed();
    assert_ne!(second.request.url, third.request.url);
    // The second goes out when the completion lets go, so the third waits the delay
    // after that, not after the moment the second poll was asked for.
    assert!(
        gap >= Duration::from_secs_f64(DELAY * 0.9),
        "the third request came {gap:?} after the second (delay {DELAY} s)"
    );
}

/// `checkpoint_every` reports the first checkpoint that fails (and stops there) instead
/// of ending silently, and ends with `Ok` once the driver is closed.
#[tokio::test(start_paused = true)]
async fn checkpoint_every_reports_a_failed_checkpoint_and_ends_on_close() {
    let clock = Clock::wall();
    let failing = SlowComplete {
        inner: Frontier::in_memory(Settings::default(), clock.now()).unwrap(),
        slow: Duration::ZERO,
        checkpoint_fails: true,
    };
    let driver = DriverFor::new(failing, clock);
    let result = driver
        .clone()
        .checkpoint_every(Duration::from_secs(5))
        .await;
    assert!(
        matches!(result, Err(DriverError::Frontier(FrontierError::Store(_)))),
        "{result:?}"
    );

    let healthy = SlowComplete {
        inner: Frontier::in_memory(Settings::default(), clock.now()).unwrap(),
        slow: Duration::ZERO,
        checkpoint_fails: false,
    };
    let driver = DriverFor::new(healthy, clock);
    let checkpointer = tokio::spawn(driver.clone().checkpoint_every(Duration::from_secs(5)));
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert!(
        !checkpointer.is_finished(),
        "checkpoints that succeed go on"
    );
    driver.close().await.unwrap();
    assert!(checkpointer.await.unwrap().is_ok());
}
