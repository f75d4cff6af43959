//! The `NativeThrottler` class: the politeness engine alone, for the asyncio `Throttler`.

use hashbrown::HashMap;
use polite_throttle_core::{
    NotReady, Permit, RequestFlags, ScopeUse, Throttler, Ticket, TicketPoll,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::convert::{
    figures, header_pairs, make_outcome, now_or, parse_settings, scope_stats_dict,
};

/// The politeness engine alone, for the asyncio `Throttler` (`polite_frontier.throttle`).
#[pyclass(unsendable, module = "polite_frontier._native")]
pub struct NativeThrottler {
    throttler: Throttler,
    permits: HashMap<u64, Permit>,
    tickets: HashMap<u64, Ticket>,
    next_permit: u64,
}

fn scope_uses(scopes: &[(String, f64)]) -> Vec<ScopeUse<'_>> {
    scopes
        .iter()
        .map(|(s, a)| ScopeUse {
            scope: s.as_str(),
            amount: *a,
        })
        .collect()
}

fn check_scopes(scopes: &[(String, f64)]) -> PyResult<()> {
    if scopes.is_empty() {
        return Err(PyValueError::new_err("scopes must name at least one scope"));
    }
    for (name, amount) in scopes {
        if name.is_empty() || name.contains(['\t', '\n']) {
            return Err(PyValueError::new_err(format!(
                "a scope name must be non-empty without tabs or newlines, got {name:?}"
            )));
        }
        if !amount.is_finite() || *amount < 0.0 {
            return Err(PyValueError::new_err(format!(
                "the amount of scope {name:?} must be a finite number >= 0, got {amount}"
            )));
        }
    }
    Ok(())
}

#[pymethods]
impl NativeThrottler {
    #[new]
    #[pyo3(signature = (settings_json, now=None))]
    fn new(settings_json: &str, now: Option<f64>) -> PyResult<Self> {
        // The frontier's ordering keys are accepted (one settings format) and unused.
        let (settings, _) = parse_settings(settings_json)?;
        let throttler = Throttler::new(settings, now_or(now)?)
            .map_err(|e| PyValueError::new_err(format!("invalid throttling settings: {e}")))?;
        Ok(NativeThrottler {
            throttler,
            permits: HashMap::new(),
            tickets: HashMap::new(),
            next_permit: 1,
        })
    }

    /// Reserves `scopes` (pairs of name and quota amount) now, or queues a ticket.
    /// Returns `("permit", id, None)`, or `("ticket", id, wait)` where `wait` is seconds
    /// until the ticket should be polled again or `None` (woken by a release).
    #[pyo3(signature = (scopes, dont_track=false, dont_throttle=false, now=None))]
    fn acquire_or_enqueue<'py>(
        &mut self,
        py: Python<'py>,
        scopes: Vec<(String, f64)>,
        dont_track: bool,
        dont_throttle: bool,
        now: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        check_scopes(&scopes)?;
        let now = now_or(now)?;
        let uses = scope_uses(&scopes);
        let flags = RequestFlags::default()
            .dont_track(dont_track)
            .dont_throttle(dont_throttle);
        match self.throttler.try_acquire_or_enqueue(&uses, flags, now) {
            Ok(permit) => {
                let id = self.keep(permit);
                Ok(("permit", id, None::<f64>).into_pyobject(py)?.into_any())
            }
            Err((ticket, why)) => {
                self.tickets.insert(ticket.get(), ticket);
                let wait = match why {
                    NotReady::NotUntil(t) => Some(t.saturating_duration_since(now).as_secs_f64()),
                    NotReady::Blocked => None,
                };
                Ok(("ticket", ticket.get(), wait).into_pyobject(py)?.into_any())
            }
        }
    }

    /// Polls a ticket: `("permit", id, None)` when its turn came, `("wait", None,
    /// seconds or None)`, or `("unknown", None, None)`.
    #[pyo3(signature = (ticket, now=None))]
    fn poll_ticket<'py>(
        &mut self,
        py: Python<'py>,
        ticket: u64,
        now: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let now = now_or(now)?;
        let Some(&t) = self.tickets.get(&ticket) else {
            return Ok(("unknown", None::<u64>, None::<f64>)
                .into_pyobject(py)?
                .into_any());
        };
        match self.throttler.poll_ticket(t, now) {
            TicketPoll::Ready(permit) => {
                self.tickets.remove(&ticket);
                let id = self.keep(permit);
                Ok(("permit", Some(id), None::<f64>)
                    .into_pyobject(py)?
                    .into_any())
            }
            TicketPoll::Waiting(NotReady::NotUntil(until)) => Ok((
                "wait",
                None::<u64>,
                Some(until.saturating_duration_since(now).as_secs_f64()),
            )
                .into_pyobject(py)?
                .into_any()),
            TicketPoll::Waiting(NotReady::Blocked) => Ok(("wait", None::<u64>, None::<f64>)
                .into_pyobject(py)?
                .into_any()),
            TicketPoll::Unknown => {
                self.tickets.remove(&ticket);
                Ok(("unknown", None::<u64>, None::<f64>)
                    .into_pyobject(py)?
                    .into_any())
            }
        }
    }

    /// Gives a ticket's place up.
    fn cancel(&mut self, ticket: u64) -> bool {
        match self.tickets.remove(&ticket) {
            Some(t) => self.throttler.cancel(t),
            None => false,
        }
    }

    /// Releases a permit: `status`/`headers` for a response, `error` for a failure,
    /// neither for an abandoned request. Returns False for an unknown permit.
    #[pyo3(signature = (permit, status=None, headers=None, error=None, now=None))]
    fn release(
        &mut self,
        permit: u64,
        status: Option<u16>,
        headers: Option<&Bound<'_, PyAny>>,
        error: Option<&str>,
        now: Option<f64>,
    ) -> PyResult<bool> {
        let now = now_or(now)?;
        let headers = header_pairs(headers)?;
        let Some(p) = self.permits.remove(&permit) else {
            return Ok(false);
        };
        let outcome = make_outcome(status, &headers, error);
        Ok(self.throttler.release(p, &outcome, now))
    }

    /// Seconds until the next timed wake-up, or `None`.
    #[pyo3(signature = (now=None))]
    fn poll_timeout(&self, now: Option<f64>) -> PyResult<Option<f64>> {
        let now = now_or(now)?;
        Ok(self
            .throttler
            .poll_timeout()
            .map(|t| t.saturating_duration_since(now).as_secs_f64()))
    }

    /// Wakes timed tickets due at `now`.
    #[pyo3(signature = (now=None))]
    fn handle_timeout(&mut self, now: Option<f64>) -> PyResult<()> {
        self.throttler.handle_timeout(now_or(now)?);
        Ok(())
    }

    /// Tickets that should look again, in order.
    fn wakeups(&mut self) -> Vec<u64> {
        let mut out = Vec::new();
        while let Some(t) = self.throttler.poll_wakeup() {
            out.push(t.get());
        }
        out
    }

    /// The throttling state of one scope, or `None`.
    #[pyo3(signature = (scope, now=None))]
    fn scope_stats<'py>(
        &mut self,
        py: Python<'py>,
        scope: &str,
        now: Option<f64>,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let now = now_or(now)?;
        self.throttler
            .scope_stats(scope, now)
            .map(|s| scope_stats_dict(py, figures!(s)))
            .transpose()
    }

    /// Holds `scope` for `secs` seconds.
    #[pyo3(signature = (scope, secs, now=None))]
    fn delay_scope(&mut self, scope: &str, secs: f64, now: Option<f64>) -> PyResult<()> {
        let now = now_or(now)?;
        self.throttler
            .delay_scope(scope, secs, now)
            .map_err(|e| PyValueError::new_err(format!("{e}")))
    }

    /// Permits out.
    fn in_flight(&self) -> u32 {
        self.throttler.in_flight()
    }
}

impl NativeThrottler {
    fn keep(&mut self, permit: Permit) -> u64 {
        let id = self.next_permit;
        self.next_permit += 1;
        self.permits.insert(id, permit);
        id
    }
}
