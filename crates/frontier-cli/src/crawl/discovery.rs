//! Where requests come from besides links: robots.txt (RFC 9309) and sitemaps.

use super::*;

impl<B> Ctx<B>
where
    B: CrawlFrontier,
    B::StoreError: std::error::Error + Send + Sync + 'static,
    B::Closed: Send + 'static,
{
    /// Fetches `url`'s robots.txt in this worker (fleet mode), each attempt with a
    /// permit of the fleet's budget on its host, retried like a queued robots.txt
    /// request; records and returns the rules (`None` if the crawl was stopped first).
    pub(super) async fn robots_inline(&self, url: &Url) -> anyhow::Result<Option<robots::Rules>> {
        let Some(side) = &self.side else {
            return Ok(None);
        };
        let origin = robots::origin(url);
        let robots_url = robots::robots_url(url);
        let scope = host_scope(&robots_url).map_err(|e| anyhow::anyhow!("{robots_url}: {e}"))?;
        let (mut retries, mut throttled) = (0, 0);
        let lifetime = Duration::from_secs_f64(self.crawl.robotstxt_cache_lifetime);
        let unreachable = Duration::from_secs_f64(self.crawl.robotstxt_unreachable_retry);
        let (rules, lifetime) = loop {
            // A permit: the same spacing as every page of this host, fleet-wide.
            let permit = loop {
                if self.stopper.is_stopped() {
                    self.robots
                        .set(&origin, robots::Rules::DisallowAll, Duration::ZERO);
                    return Ok(None);
                }
                let (s, now) = (scope.clone(), self.driver.now());
                let got = side_call(side, move |f| {
                    f.try_acquire(&[polite_throttle_core::ScopeUse::new(&s)], now)
                })
                .await??;
                match got {
                    Ok(permit) => break permit,
                    Err(polite_throttle_core::NotReady::NotUntil(t)) => {
                        let wait = t.saturating_duration_since(self.driver.now());
                        tokio::time::sleep(wait.min(Duration::from_secs(5))).await;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            };
            let fetched = self.fetch_following(url, &robots_url).await;
            let outcome = match &fetched {
                Fetched::Failed { kind, .. } => Outcome::error(kind),
                Fetched::Response {
                    status, headers, ..
                } => response_outcome(*status, headers),
            };
            let now = self.driver.now();
            side_call(side, move |f| f.release(permit, &outcome, now)).await??;
            let (status, body) = match fetched {
                Fetched::Failed { .. } => (None, Vec::new()),
                Fetched::Response { status, body, .. } => (Some(status), body),
            };
            let throttling = matches!(status, Some(429))
                || (status == Some(503)
                    && matches!(
                        outcome,
                        Outcome::Response {
                            header_delay: Some(_),
                            ..
                        }
                    ));
            if throttling && throttled < self.crawl.max_throttled_retries {
                throttled += 1;
                continue;
            }
            if matches!(status, None | Some(429) | Some(500..)) && retries < self.crawl.retry_times
            {
                retries += 1;
                continue;
            }
            break match status {
                Some(200..=299) => (robots::parse(&self.crawl.user_agent, &body), lifetime),
                None | Some(429) | Some(500..) => (robots::Rules::DisallowAll, unreachable),
                Some(_) => (robots::Rules::AllowAll, lifetime),
            };
        };
        if matches!(rules, robots::Rules::DisallowAll) {
            tracing::warn!(robots = %robots_url, "robots.txt unreachable: its origin is disallowed until it is fetched again");
        }
        if let Some(delay) = rules.crawl_delay() {
            self.driver.handle_crawl_delay(scope, delay).await?;
        }
        self.push_listed_sitemaps(&rules).await?;
        self.robots.set(&origin, rules.clone(), lifetime);
        Ok(Some(rules))
    }

    /// Fetches `target` following up to 5 redirects at once (robots.txt's rule).
    pub(super) async fn fetch_following(&self, base: &Url, target: &str) -> Fetched {
        let mut fetched = self.fetch(target).await;
        self.count(target, |s| s.fetches += 1);
        let mut hops = 0;
        while let Fetched::Response {
            status: 300..=399,
            headers,
            ..
        } = &fetched
        {
            let next = headers
                .iter()
                .find(|(k, _)| k == "location")
                .and_then(|(_, v)| std::str::from_utf8(v).ok())
                .and_then(|loc| base.join(loc.trim()).ok())
                .filter(|t| matches!(t.scheme(), "http" | "https"));
            let Some(next) = next.filter(|_| hops < 5) else {
                break;
            };
            hops += 1;
            fetched = self.fetch(next.as_str()).await;
            self.count(target, |s| s.fetches += 1);
        }
        fetched
    }

    pub(super) async fn robots_txt(&self, lease: Lease) -> Res {
        let url_text = lease.request.url.to_string();
        let Ok(url) = Url::parse(&url_text) else {
            self.driver.complete(lease.id(), Outcome::Cancelled).await?;
            return Ok(());
        };
        let origin = robots::origin(&url);
        if self.robots.is_ready(&origin) {
            // A second copy (queued before a restart): already known.
            self.driver.complete(lease.id(), Outcome::Cancelled).await?;
            return Ok(self.driver.flush().await?);
        }
        // Redirects of robots.txt are followed at once, up to 5 hops (RFC 9309 2.3.1.2).
        let fetched = self.fetch_following(&url, &url_text).await;
        let lifetime = Duration::from_secs_f64(self.crawl.robotstxt_cache_lifetime);
        let unreachable = Duration::from_secs_f64(self.crawl.robotstxt_unreachable_retry);
        let (outcome, rules, lifetime) = match fetched {
            Fetched::Failed { kind, .. } => {
                let outcome = Outcome::error(kind);
                if self.maybe_retry(&lease, outcome).await? {
                    return Ok(());
                }
                (outcome, robots::Rules::DisallowAll, unreachable)
            }
            Fetched::Response {
                status,
                headers,
                body,
                ..
            } => {
                let outcome = response_outcome(status, &headers);
                self.count(&url_text, |s| {
                    s.bytes += body.len() as u64;
                    s.rate_limited += u64::from(status == 429);
                });
                if self
                    .maybe_requeue_throttled(&lease, status, outcome)
                    .await?
                    || ((status == 429 || status >= 500)
                        && self.maybe_retry(&lease, outcome).await?)
                {
                    return Ok(());
                }
                match status {
                    200..=299 => (
                        outcome,
                        robots::parse(&self.crawl.user_agent, &body),
                        lifetime,
                    ),
                    // Unreachable (and a 429 that would not stop): disallow all for now.
                    429 | 500.. => (outcome, robots::Rules::DisallowAll, unreachable),
                    // Unavailable (4xx), or a redirect loop: allow all.
                    _ => (outcome, robots::Rules::AllowAll, lifetime),
                }
            }
        };
        if matches!(rules, robots::Rules::DisallowAll) {
            tracing::warn!(robots = %url_text, retry_in = unreachable.as_secs_f64(), "robots.txt unreachable: its origin is disallowed until it is fetched again");
        }
        self.retries_of(&url_text);
        if let Some(delay) = rules.crawl_delay()
            && let Ok(scope) = host_scope(&url_text)
        {
            self.driver.handle_crawl_delay(scope, delay).await?;
        }
        self.push_listed_sitemaps(&rules).await?;
        self.robots.set(&origin, rules, lifetime);
        self.driver.complete(lease.id(), outcome).await?;
        Ok(self.driver.flush().await?)
    }

    /// Queues the sitemaps robots.txt lists, within the allowed domains.
    pub(super) async fn push_listed_sitemaps(&self, rules: &robots::Rules) -> Res {
        for sitemap in rules.sitemaps() {
            let host_ok = Url::parse(&sitemap).ok().is_some_and(|u| {
                matches!(u.scheme(), "http" | "https")
                    && allowed_domain(&self.allow, u.host_str().unwrap_or_default())
            });
            if host_ok {
                self.push_sitemap(&sitemap).await?;
            }
        }
        Ok(())
    }

    /// Queues a sitemap (deduplicated like any request).
    pub(super) async fn push_sitemap(&self, url: &str) -> Res {
        let request = Request::get(url)
            .callback(SITEMAP)
            .priority(SITEMAP_PRIORITY)
            .start();
        if let PushOutcome::Queued(_) = self.driver.push(request).await? {
            self.count(url, |s| s.queued += 1);
        }
        Ok(())
    }

    /// A sitemap: its pages join the crawl as start requests (within the allowed
    /// domains and patterns), its child sitemaps are queued.
    pub(super) async fn sitemap(&self, lease: Lease) -> Res {
        let url_text = lease.request.url.to_string();
        let fetched = self.fetch(&url_text).await;
        self.count(&url_text, |s| s.fetches += 1);
        let (outcome, body) = match fetched {
            Fetched::Failed { kind, .. } => {
                let outcome = Outcome::error(kind);
                if self.maybe_retry(&lease, outcome).await? {
                    return Ok(());
                }
                (outcome, None)
            }
            Fetched::Response {
                status,
                headers,
                body,
                ..
            } => {
                let outcome = response_outcome(status, &headers);
                self.count(&url_text, |s| s.bytes += body.len() as u64);
                if self
                    .maybe_requeue_throttled(&lease, status, outcome)
                    .await?
                    || (self.crawl.retry_http_codes.contains(&status)
                        && self.maybe_retry(&lease, outcome).await?)
                {
                    return Ok(());
                }
                (outcome, (200..300).contains(&status).then_some(body))
            }
        };
        self.retries_of(&url_text);
        match body.map(|b| sitemap::parse_sitemap(&b)) {
            Some(Ok(map)) => {
                if map.truncated {
                    tracing::warn!(sitemap = %url_text, "sitemap over 50,000 URLs: the rest is ignored");
                }
                match map.kind {
                    sitemap::SitemapKind::Index => {
                        for child in map.urls {
                            self.push_sitemap(child.as_str()).await?;
                        }
                    }
                    _ => {
                        let pages: Vec<Request> = map
                            .urls
                            .iter()
                            .filter(|u| self.wanted(u.as_str()))
                            .map(|u| Request::get(u.as_str()).callback(PAGE).start())
                            .collect();
                        let urls: Vec<Box<str>> = pages.iter().map(|r| r.url.clone()).collect();
                        let outcomes = self.driver.push_all(pages).await?;
                        for (u, o) in urls.iter().zip(outcomes) {
                            if let PushOutcome::Queued(_) = o {
                                self.count(u, |s| s.queued += 1);
                            }
                        }
                    }
                }
            }
            Some(Err(e)) => tracing::warn!(sitemap = %url_text, error = %e, "sitemap not read"),
            None => tracing::warn!(sitemap = %url_text, "sitemap could not be fetched"),
        }
        self.driver.complete(lease.id(), outcome).await?;
        Ok(self.driver.flush().await?)
    }
}
