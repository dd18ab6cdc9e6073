//! Waiting for something to happen: a condition checked every few milliseconds until it holds,
//! failing the test with what was awaited (and what was seen instead) once a deadline passes.
//!
//! Use it where a test would otherwise sleep for a guessed time and hope the event happened: the
//! wait ends as soon as the condition holds, however slow or fast the machine. The deadline is
//! only a bound for a test that would otherwise hang, never a measure; no test asserts how long
//! anything took. Where the code under test offers a signal (a channel, an event on a
//! subscription, an answer), wait on that instead.
//!
//! Conditions that read the test's surroundings (`|| async { user.call(…).await … }`) take
//! references copied in (`let user = &user;` before the closure, `async move` inside), so the
//! future a call returns borrows nothing from the closure.

use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, Instant};

/// How long a wait may take before the test fails: generous, for busy CI machines.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// How often a condition is checked.
const POLL: Duration = Duration::from_millis(10);

/// Checks `check` until it answers `true`; after [`TIMEOUT`], panics naming `what` was awaited.
pub async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    until_ok(what, || {
        let checked = check();
        async move { if checked.await { Ok(()) } else { Err("not yet") } }
    })
    .await
}

/// Checks a synchronous condition (a counter, a recorded request) until it holds; after
/// [`TIMEOUT`], panics naming `what` was awaited.
pub async fn until_true(what: &str, mut check: impl FnMut() -> bool) {
    until_ok(what, || std::future::ready(if check() { Ok(()) } else { Err("not yet") })).await
}

/// Checks `check` until it answers `Ok`, and returns that value; after [`TIMEOUT`], panics
/// naming `what` was awaited and the last `Err` (what was seen instead).
pub async fn until_ok<T, E, F, Fut>(what: &str, check: F) -> T
where
    E: Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    until_ok_within(TIMEOUT, what, check).await
}

/// [`until_ok`] with another deadline (for waits that span restarts or many turns).
pub async fn until_ok_within<T, E, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    E: Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(seen) if Instant::now() > deadline => {
                panic!("timed out after {timeout:?} waiting until {what}; last seen: {seen:?}")
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}
