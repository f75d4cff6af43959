//! Where permits come from: a throttle in this process, or (with the `redis` feature) a
//! budget shared through Redis.

use polite_runtime_common::{Runtime, Throttle, ThrottlePermit};
use polite_throttle_core::Outcome;

use crate::BoxError;

/// A source of permits.
pub(crate) enum Budget<R: Runtime> {
    Local(Throttle<R>),
    #[cfg(feature = "redis")]
    Shared(crate::shared::SharedBudget<R>),
}

impl<R: Runtime> Clone for Budget<R> {
    fn clone(&self) -> Self {
        match self {
            Budget::Local(t) => Budget::Local(t.clone()),
            #[cfg(feature = "redis")]
            Budget::Shared(s) => Budget::Shared(s.clone()),
        }
    }
}

/// A permit held while a request is in flight; dropped unfinished, it is released
/// without an outcome.
pub(crate) enum Held<R: Runtime> {
    Local(ThrottlePermit<R>),
    #[cfg(feature = "redis")]
    Shared(crate::shared::SharedPermit<R>),
}

impl<R: Runtime> Budget<R> {
    /// Waits for a permit on `scope`, recording the wait on the current span.
    pub(crate) async fn acquire(&self, scope: &str) -> Result<Held<R>, BoxError> {
        let start = std::time::Instant::now();
        let held = match self {
            Budget::Local(t) => Held::Local(t.acquire(&crate::service::uses(scope)).await),
            #[cfg(feature = "redis")]
            Budget::Shared(s) => Held::Shared(s.acquire(scope).await?),
        };
        let waited = start.elapsed().as_secs_f64() * 1e3;
        tracing::Span::current().record("wait_ms", waited);
        Ok(held)
    }
}

impl<R: Runtime> Held<R> {
    /// Releases the permit with how the request ended.
    /// Releases the permit with how the request ended. A shared permit's release reaches
    /// Redis before this returns, so a request made once the response is out sees the
    /// outcome (a 429's hold, say) in every process.
    pub(crate) async fn finish(self, outcome: &Outcome<'static>) {
        match self {
            Held::Local(p) => p.finish(outcome),
            #[cfg(feature = "redis")]
            Held::Shared(p) => p.finish(*outcome).await,
        }
        tracing::debug!(?outcome, "request finished");
    }
}
