//! Helpers shared by the benchmarks.

/// `n` distinct host names shaped like the peers' URLs
/// (`host{i % D}.example{j}.com`, see `shared/peers/README.md`).
pub fn host_names(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("host{}.example{}.com", i, i % 97))
        .collect()
}
