//! Compiles only if the core crates stay `no_std` (see Cargo.toml).
#![no_std]

extern crate alloc;

use polite_throttle_core::{Outcome, ScopeUse, Settings, Throttler, Timestamp};

/// Pushes and polls a request so the frontier is instantiated without `std`.
pub fn frontier() -> bool {
    let Ok(mut f) = polite_frontier_core::Frontier::in_memory(Settings::default(), Timestamp::ZERO) else {
        return false;
    };
    let pushed = f.push(&polite_frontier_core::Request::get("https://example.com/"), Timestamp::ZERO);
    pushed.is_ok() && matches!(f.poll(Timestamp::ZERO), Ok(polite_frontier_core::Poll::Ready(_)))
}

/// Exercises the decision loop so the whole API is instantiated without `std`.
pub fn decide() -> bool {
    let Ok(mut t) = Throttler::new(Settings::default(), Timestamp::ZERO) else {
        return false;
    };
    match t.try_acquire(&[ScopeUse::new("example.com")], Timestamp::ZERO) {
        Ok(p) => t.release(p, &Outcome::status(200), Timestamp::from_secs(1)),
        Err(_) => false,
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    loop {}
}
