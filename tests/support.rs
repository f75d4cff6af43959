//! Shared helpers for the workspace's cross-crate tests.
