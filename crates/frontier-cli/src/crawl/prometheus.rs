//! Prometheus metrics of a crawl (`--metrics`).

use super::*;

/// Help texts of the Prometheus metrics (`--metrics`).
pub(super) fn describe_metrics() {
    metrics::describe_counter!(
        "frontier_requests_sent_total",
        "HTTP requests sent (every attempt, robots.txt and sitemaps included)"
    );
    metrics::describe_counter!(
        "frontier_responses_total",
        "Responses received, by status class"
    );
    metrics::describe_counter!("frontier_rate_limited_total", "Responses with status 429");
    metrics::describe_counter!(
        "frontier_transport_errors_total",
        "Requests that got no response, by error kind"
    );
    metrics::describe_counter!(
        "frontier_retries_total",
        "Requests put back: after a failure (retry_times) or a throttling answer"
    );
    metrics::describe_gauge!("frontier_queue_length", "Requests left in the frontier");
    metrics::describe_gauge!("frontier_in_flight", "Requests in flight");
    metrics::describe_gauge!("frontier_pages_total", "Pages finished in this run");
    metrics::describe_gauge!(
        "frontier_scope_delay_seconds",
        "Current delay between sends of a scope (the busiest 100)"
    );
    metrics::describe_gauge!(
        "frontier_scope_backoff_level",
        "Backoff level of a scope (the busiest 100)"
    );
}

impl<B> Ctx<B>
where
    B: CrawlFrontier,
    B::StoreError: std::error::Error + Send + Sync + 'static,
    B::Closed: Send + 'static,
{
    /// The gauges: queue length, requests in flight, and delay and backoff level of the
    /// busiest scopes (at most 100, to bound the series a broad crawl creates).
    pub(super) async fn publish_gauges(&self, rows: &[ScopeRow]) {
        metrics::gauge!("frontier_queue_length").set(self.left().await as f64);
        metrics::gauge!("frontier_in_flight")
            .set(rows.iter().map(|r| f64::from(r.active)).sum::<f64>());
        metrics::gauge!("frontier_pages_total").set(self.pages.load(Ordering::Relaxed) as f64);
        let (shown, _) = crate::progress::busiest(rows, 100);
        for row in shown {
            let scope = row.scope.clone();
            metrics::gauge!("frontier_scope_delay_seconds", "scope" => scope.clone())
                .set(row.delay);
            metrics::gauge!("frontier_scope_backoff_level", "scope" => scope)
                .set(f64::from(row.level));
        }
    }
}
