//! Random timelines: seeded settings and steps (with and without jitter, through
//! `FCALL` and `EVALSHA`), and many groups through every chunked structure.

use super::*;

/// A small seeded generator for random timelines (xorshift64*); `Rng(state)` starts
/// from a raw state, [`Rng::new`] from any seed (zero included).
pub(super) struct Rng(pub(super) u64);
impl Rng {
    pub(super) fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// True with probability `percent` / 100.
    pub(super) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub(super) fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize].clone()
    }
    pub(super) fn millis(&mut self, lo: u64, hi: u64) -> std::time::Duration {
        std::time::Duration::from_millis(lo + self.below(hi - lo + 1))
    }
}

pub(super) fn random_settings(rng: &mut Rng, jitter: bool) -> (Settings, FrontierConfig) {
    let mut s = if jitter { Settings::default() } else { base() };
    s.seed = rng.next();
    if jitter {
        s.randomize_download_delay = Jitter::Range {
            low: -0.3,
            high: 0.4,
        };
    }
    s.concurrent_requests = rng.pick(&[2, 4, 16]);
    s.backoff_window = rng.pick(&[5.0, 20.0, 0.0]);
    s.backoff_min_delay = rng.pick(&[0.5, 1.0]);
    let frontier = FrontierConfig::default()
        .scheduler_order(rng.pick(&[QueueOrder::Lifo, QueueOrder::Fifo]))
        .start_order(rng.pick(&[StartOrder::Fifo, StartOrder::Lifo, StartOrder::Same]))
        .depth_priority(rng.pick(&[0, 1]))
        .depth_limit(rng.pick(&[0, 3]));
    s.throttling_window = 15.0;
    let s = s
        .with_scope("a.com", ScopeConfig::new().delay(1.0).concurrency(2))
        .with_scope(
            "b.com",
            ScopeConfig::new()
                .delay(0.4)
                .rampup(RampupConfig::default().min_delay(0.05)),
        )
        .with_scope(
            "api",
            ScopeConfig::new()
                .quota(6.0)
                .window(rng.pick(&[10.0, 10.0, 0.0]))
                .concurrency(2),
        )
        .with_scope(
            "c.com",
            ScopeConfig::new().delay(0.25).backoff(
                BackoffConfig::default()
                    .http_codes(vec![500, 429])
                    .delay_factor(3.0),
            ),
        );
    (s, frontier)
}

fn random_steps(rng: &mut Rng, n: usize) -> Vec<Step> {
    const HOSTS: [&str; 6] = [
        "a.com",
        "b.com",
        "c.com",
        "d.com",
        "10.0.0.1:8080",
        "localhost:9",
    ];
    let mut steps = Vec::with_capacity(n);
    for _ in 0..n {
        let roll = rng.below(100);
        let step = match roll {
            0..=29 => {
                let host = rng.pick(&HOSTS);
                let scheme = if host.ends_with(":8080") || host.ends_with(":9") {
                    "http"
                } else {
                    "https"
                };
                let mut r = Request::get(format!("{scheme}://{host}/p/{}", rng.below(40)))
                    .priority(rng.below(5) as i32 - 2)
                    .depth(rng.below(5) as u32);
                match rng.below(20) {
                    0 => r = r.start(),
                    1 => r = r.dont_filter(),
                    2 => r = r.dont_track(),
                    3 => r = r.dont_throttle(),
                    4 => r = r.delay(rng.below(5000) as f64 / 1000.0),
                    5 => r = r.scope("api"),
                    6 => r = r.scope("api").scope_amount(host, 2.0),
                    7 => r = r.scope("a.com").scope("c.com"),
                    8 => r = r.callback("parse_item"),
                    _ => {}
                }
                Step::Push(r)
            }
            30..=31 => Step::Peek,
            32..=64 => Step::Poll,
            65..=76 => {
                let out = match rng.below(10) {
                    0 => Out::Status(429),
                    1 => Out::RetryAfter(503, rng.below(20) as u32),
                    2 => Out::Error("timeout"),
                    3 => Out::Status(500),
                    4 => Out::Cancelled,
                    5 => Out::Spent(200, rng.below(10) as u32),
                    _ => Out::Ok,
                };
                Step::Complete(rng.below(8) as usize, out)
            }
            77..=80 => Step::Retry(
                rng.below(8) as usize,
                rng.pick(&[Out::Status(429), Out::Error("connection"), Out::Ok]),
                -1,
            ),
            81..=88 => Step::Advance(rng.below(3000)),
            89..=93 => Step::Sleep,
            94 => Step::DelayScope(rng.pick(&HOSTS), rng.below(10) as f64),
            95 => Step::CrawlDelay(rng.pick(&HOSTS), rng.below(4) as f64 + 0.5),
            96 => Step::SetDelay(rng.pick(&HOSTS), rng.below(3) as f64 * 0.5),
            97 => Step::SetConcurrency(rng.pick(&HOSTS), rng.below(4) as u32),
            _ => Step::Reconcile(
                "api",
                if rng.below(2) == 0 {
                    QuotaReconcile::Consumed(2.0)
                } else {
                    QuotaReconcile::Remaining(1.0)
                },
            ),
        };
        steps.push(step);
    }
    steps
}

pub(super) const RANDOM_SCOPES: [&str; 7] = [
    "a.com",
    "b.com",
    "c.com",
    "d.com",
    "10.0.0.1:8080",
    "localhost:9",
    "api",
];

#[test]
fn random_timelines_without_jitter() {
    let mut total = 0;
    for seed in 1..=30u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let s = random_settings(&mut rng, false);
        let steps = random_steps(&mut rng, 250);
        total += run_both(&format!("random seed {seed}"), s, &RANDOM_SCOPES, &steps);
    }
    if server().is_some() {
        assert!(total > 30 * 150, "compared {total} answers");
    }
}

#[test]
fn random_timelines_with_jitter() {
    for seed in 100..=115u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let s = random_settings(&mut rng, true);
        let steps = random_steps(&mut rng, 250);
        run_both(&format!("jitter seed {seed}"), s, &RANDOM_SCOPES, &steps);
    }
}

#[test]
fn random_timelines_through_evalsha() {
    for seed in 200..=205u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let s = random_settings(&mut rng, seed % 2 == 0);
        let steps = random_steps(&mut rng, 250);
        run_both_with(
            &format!("evalsha seed {seed}"),
            s,
            &RANDOM_SCOPES,
            &steps,
            ScriptMode::Eval,
        );
    }
}

/// Many groups: enough hosts and requests that every chunked structure of the Redis
/// layout splits, thins out and merges (the leaves of the candidate and event sets, the
/// buckets of name records, a queue bucket whose requests overflow to a key of their
/// own), compared step by step with the in-process frontier.
#[test]
fn many_groups_through_chunked_structures() {
    for seed in 300..=302u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut s = base();
        s.concurrent_requests = rng.pick(&[16, 64]);
        // Every host waits after each send: hundreds of parked groups and timers.
        s.download_delay = rng.pick(&[0.5, 2.0]);
        let frontier = FrontierConfig::default()
            .scheduler_order(rng.pick(&[QueueOrder::Lifo, QueueOrder::Fifo]))
            .start_order(rng.pick(&[StartOrder::Fifo, StartOrder::Same]));
        let request = |rng: &mut Rng, i: u64| {
            // Host 0 gets a tenth of all requests: more than its queue bucket holds.
            let h = if i.is_multiple_of(10) {
                0
            } else {
                rng.below(400)
            };
            let mut r = Request::get(format!("https://h{h}.example/p/{i}"))
                .priority(rng.below(9) as i32 - 4);
            if rng.below(25) == 0 {
                r = r.start();
            }
            if rng.below(40) == 0 {
                r = r.scope("shared").scope(format!("h{h}.example"));
            }
            r
        };
        let mut steps = Vec::new();
        for i in 0..2000 {
            steps.push(Step::Push(request(&mut rng, i)));
        }
        for i in 2000..6000 {
            let step = match rng.below(20) {
                0..=2 => Step::Push(request(&mut rng, i)),
                3 => Step::Peek,
                4..=11 => Step::Poll,
                12..=15 => Step::Complete(
                    rng.below(32) as usize,
                    if rng.below(15) == 0 {
                        Out::Status(429)
                    } else {
                        Out::Ok
                    },
                ),
                16 => Step::Retry(rng.below(32) as usize, Out::Ok, -1),
                17..=18 => Step::Advance(rng.below(700)),
                _ => Step::Sleep,
            };
            steps.push(step);
        }
        run_both(
            &format!("many groups seed {seed}"),
            (s, frontier),
            &["h0.example", "h1.example", "shared"],
            &steps,
        );
    }
    // The structures these timelines are meant to exercise exist (the other tests'
    // crawls have a few hosts: one bucket, one leaf, no queue of its own).
    let Some(server) = server() else { return };
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("{conf*").query(&mut c).unwrap();
    let count = |pred: &dyn Fn(&[u8]) -> bool| keys.iter().filter(|k| pred(k)).count();
    let after_tag = |k: &[u8]| {
        k.splitn(2, |&b| b == b'}')
            .nth(1)
            .unwrap_or_default()
            .to_vec()
    };
    let own_queues = count(&|k| after_tag(k).starts_with(b":q:"));
    let buckets = count(&|k| after_tag(k).starts_with(b":N:"));
    let split_leaves = count(&|k| {
        let t = after_tag(k);
        (t.starts_with(b":C|") || t.starts_with(b":E|")) && t.len() > 3
    });
    assert!(own_queues >= 1, "no queue overflowed to a key of its own");
    assert!(buckets >= 8, "name buckets did not split: {buckets}");
    assert!(
        split_leaves >= 3,
        "ordered sets did not split: {split_leaves}"
    );
}
