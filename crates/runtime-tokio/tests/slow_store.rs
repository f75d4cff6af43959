//! A store call that holds the frontier for a while (an fsync under write-back pressure,
//! say) must not make a poll waiting behind it record its send as earlier than it goes
//! out: the scope's next request would then follow it without its delay. Real time on a
//! multi-threaded runtime, as a crawl runs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use polite_frontier_core::{
    Frontier, FrontierError, MemoryStoreError, Poll, PushOutcome, Request, RequestId, Scheduling,
    VolatileStore,
};
use polite_runtime_common::CHECKPOINT_FAILURES_IN_A_ROW;
use polite_runtime_tokio::{Clock, DriverError, DriverFor};
use polite_throttle_core::{
    CrawlDelayDecision, Outcome, QuotaReconcile, ScopeConfig, Settings, Timestamp,
};

/// The in-memory frontier, run off the executor like a blocking store, whose `complete`
/// takes `slow` (inside the driver's hold on the frontier).
struct SlowComplete {
    inner: Frontier<VolatileStore>,
    slow: Duration,
    /// How many of the next flushes fail (a store whose disk is full or went away).
    failing_flushes: usize,
    /// Flushes asked for so far, failed or not.
    flushes: Arc<AtomicUsize>,
}

impl SlowComplete {
    fn new(clock: Clock, slow: Duration, failing_flushes: usize) -> Self {
        SlowComplete {
            inner: Frontier::in_memory(Settings::default(), clock.now()).unwrap(),
            slow,
            failing_flushes,
            flushes: Arc::default(),
        }
    }
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
        self.flushes.fetch_add(1, Ordering::SeqCst);
        if self.failing_flushes > 0 {
            self.failing_flushes -= 1;
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
        ..SlowComplete::new(clock, Duration::from_millis(800), 0)
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

/// What the test's `tracing` subscriber wrote (on this thread, while the guard lives).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        use tracing_subscriber::util::SubscriberInitExt;
        let logs = Logs::default();
        let writer = logs.clone();
        let guard = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .set_default();
        (logs, guard)
    }

    /// The lines logged at error level.
    fn errors(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|l| l.contains("ERROR"))
            .map(str::to_owned)
            .collect()
    }
}

/// A flush that fails is logged with its error and flushing goes on at the next tick;
/// only failures in a row end `checkpoint_every`, with the last error.
#[tokio::test(start_paused = true)]
async fn checkpoint_every_logs_a_failed_flush_and_keeps_flushing() {
    let (logs, _guard) = Logs::capture();
    let clock = Clock::wall();
    // The first two flushes fail (fewer than CHECKPOINT_FAILURES_IN_A_ROW), then they work.
    let store = SlowComplete::new(clock, Duration::ZERO, 2);
    let flushes = store.flushes.clone();
    let driver = DriverFor::new(store, clock);
    let flusher = tokio::spawn(driver.clone().checkpoint_every(Duration::from_secs(5)));
    tokio::time::sleep(Duration::from_secs(22)).await;
    assert!(
        !flusher.is_finished(),
        "a transient failure does not stop flushing"
    );
    assert_eq!(
        flushes.load(Ordering::SeqCst),
        4,
        "flushes at 5, 10, 15 and 20 s"
    );
    let errors = logs.errors();
    assert_eq!(
        errors.len(),
        2,
        "one error line per failed flush: {errors:#?}"
    );
    for (line, n) in errors.iter().zip(1..) {
        assert!(
            line.contains("periodic checkpoint of the frontier failed")
                && line.contains("memory store: no request #0")
                && line.contains(&format!("failures_in_a_row={n}")),
            "{line}"
        );
    }
    driver.close().await.unwrap();
    assert!(flusher.await.unwrap().is_ok());
}

/// A store whose flushes keep failing ends `checkpoint_every` with the error after
/// `CHECKPOINT_FAILURES_IN_A_ROW` attempts, each logged, instead of ending silently; with
/// flushes that succeed it runs until the driver is shut down, then ends with `Ok`.
#[tokio::test(start_paused = true)]
async fn checkpoint_every_reports_failures_in_a_row_and_ends_on_shutdown() {
    let (logs, _guard) = Logs::capture();
    let clock = Clock::wall();
    let failing = SlowComplete::new(clock, Duration::ZERO, usize::MAX);
    let flushes = failing.flushes.clone();
    let driver = DriverFor::new(failing, clock);
    let result = driver
        .clone()
        .checkpoint_every(Duration::from_secs(5))
        .await;
    assert!(
        matches!(result, Err(DriverError::Frontier(FrontierError::Store(_)))),
        "{result:?}"
    );
    let limit = CHECKPOINT_FAILURES_IN_A_ROW as usize;
    assert_eq!(flushes.load(Ordering::SeqCst), limit);
    let errors = logs.errors();
    assert_eq!(errors.len(), limit, "{errors:#?}");
    assert!(errors[limit - 1].contains("giving up"), "{errors:#?}");

    let healthy = SlowComplete::new(clock, Duration::ZERO, 0);
    let driver = DriverFor::new(healthy, clock);
    let flusher = tokio::spawn(driver.clone().checkpoint_every(Duration::from_secs(5)));
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert!(!flusher.is_finished(), "flushes that succeed go on");
    driver.close().await.unwrap();
    assert!(flusher.await.unwrap().is_ok());
}
