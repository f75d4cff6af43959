-- lua/05_scope.lua: one throttling scope's state machine: delay and base delay, backoff
-- levels and recovery, rampup windows, quota windows, the gate, sends, completions and
-- triggers. Mirrors ScopeState in crates/throttle-core/src/scope.rs.
--
-- A scope state is a table with ScopeState's fields, by their Rust names: base_delay,
-- delay (seconds), concurrency, active, level (backoff), next_allowed, hard_until,
-- last_sent, backoff_anchor, ramp_start, window_triggers, quota_start, consumed (quota),
-- robots_floor (seconds), sent, done, triggers, last_used; times in ns. Its fields live
-- only during a call: the stored record (encode_state, 06_throttler.lua) is positional.
-- last_sent, ramp_start, quota_start and robots_floor are nil when unset (Rust: None).
local KEY_STATES   -- "t": scope states by name
local STATES = {}   -- name -> state, this call; written back by flush_scopes
local function blank_state(p, now)
  return {base_delay = p.delay, delay = p.delay, concurrency = p.concurrency, active = 0,
          level = 0, next_allowed = 0, hard_until = 0, backoff_anchor = now,
          window_triggers = 0, consumed = 0, sent = 0, done = 0, triggers = 0,
          last_used = now}
end

local function set_base_delay(st, secs)
  st.base_delay = secs
  if st.level == 0 then
    st.delay = secs
    if st.last_sent then st.next_allowed = st.last_sent + secs_to_ns(st.delay) end
  else
    st.delay = math.max(st.delay, secs)
    if st.last_sent then
      st.next_allowed = math.max(st.next_allowed, st.last_sent + secs_to_ns(st.delay))
    end
  end
end

local function raise_base_delay(st, secs)
  if secs > st.base_delay then st.base_delay = secs end
  st.delay = math.max(st.delay, st.base_delay)
  if st.last_sent then
    st.next_allowed = math.max(st.next_allowed, st.last_sent + secs_to_ns(st.delay))
  end
end

local function recovery_step(st, p)
  st.level = st.level - 1
  st.backoff_anchor = st.backoff_anchor + p.backoff_window
  if st.level == 0 then
    st.delay = st.base_delay
  else
    st.delay = math.max(math.max(st.delay / p.factor, st.base_delay), p.backoff_min_delay)
  end
end

local function rampup_boundary(st, p, r)
  local triggers = st.window_triggers
  st.window_triggers = 0
  if st.ramp_start then st.ramp_start = st.ramp_start + p.backoff_window end
  if triggers >= r.low or st.level > 0 then return end
  local floor_d = math.max(r.min_delay, st.robots_floor or 0)
  if st.delay > floor_d then
    local nxt = math.max(st.delay * r.factor, floor_d)
    if nxt - floor_d < RAMPUP_SNAP then nxt = floor_d end
    st.delay = nxt
    st.base_delay = nxt
  elseif not st.robots_floor and st.concurrency ~= 0 and st.concurrency < p.max_concurrency then
    st.concurrency = st.concurrency + 1
  end
end

-- The first trigger beyond the target in a window undoes rampup's last step (the last
-- concurrency raise, or else the last delay cut), never past the starting values.
local function rampup_step_back(st, p, r)
  local floor_d = math.max(r.min_delay, st.robots_floor or 0)
  local top = math.max(p.delay, floor_d)
  if st.base_delay <= floor_d and p.concurrency ~= 0 and st.concurrency > p.concurrency then
    st.concurrency = st.concurrency - 1
  elseif st.base_delay < top then
    local back = floor_d
    if st.base_delay > 0 then back = st.base_delay / r.factor end
    st.base_delay = math.min(back, top)
    st.delay = math.max(st.delay, st.base_delay)
  end
end

local function ramp_saturated(st, p, r)
  local floor_d = math.max(r.min_delay, st.robots_floor or 0)
  return st.delay <= floor_d
    and (st.robots_floor ~= nil or st.concurrency == 0
         or st.concurrency >= p.max_concurrency)
end

-- floor(a / b) for non-negative integers below 2^53, exactly.
local function idiv(a, b)
  local q = floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

local function advance(st, p, now)
  if st.quota_start and p.quota then
    if p.quota_window == 0 then
      -- A zero-length quota window elapses at once: the count starts afresh every request.
      st.consumed = 0
    elseif now >= st.quota_start then
      local windows = idiv(now - st.quota_start, p.quota_window)
      if windows > 0 then
        st.quota_start = st.quota_start + p.quota_window * windows
        st.consumed = 0
      end
    end
  end
  local w = p.backoff_window
  if w == 0 then
    -- Zero-length backoff windows elapse at once: full recovery now (rampup is off).
    if st.level > 0 then
      st.level = 0
      st.delay = st.base_delay
    end
    return
  end
  while true do
    local rec_at = nil
    if st.level > 0 then rec_at = st.backoff_anchor + w end
    local ramp_at = nil
    if p.rampup and st.ramp_start then ramp_at = st.ramp_start + w end
    local recover
    if rec_at and ramp_at and rec_at <= now and rec_at <= ramp_at then recover = true
    elseif rec_at and not ramp_at and rec_at <= now then recover = true
    elseif ramp_at and ramp_at <= now then recover = false
    else break end
    if recover then
      recovery_step(st, p)
    else
      local r = p.rampup
      rampup_boundary(st, p, r)
      if st.level == 0 and st.window_triggers == 0 and ramp_saturated(st, p, r)
          and st.ramp_start then
        local skip = idiv(math.max(now - st.ramp_start, 0), w)
        st.ramp_start = st.ramp_start + w * skip
      end
    end
  end
end

-- Gate: 'open', 'full', or the time until which it is held. A full scope whose rampup
-- may still raise its concurrency is held until its next rampup boundary, the next lazy
-- update that may free a slot (ScopeState::slot_may_free_at; inline: the main chunk is
-- at Lua's 200 locals).
local function gate(st, p, amount, now)
  local untl = math.max(st.hard_until, st.next_allowed)
  if p.quota and st.quota_start then
    if st.consumed > 0 and st.consumed + amount > p.quota then
      untl = math.max(untl, st.quota_start + p.quota_window)
    end
  end
  if st.concurrency ~= 0 and st.active >= st.concurrency then
    if p.rampup and st.ramp_start and not st.robots_floor
        and st.concurrency < p.max_concurrency and p.backoff_window > 0
        and st.ramp_start + p.backoff_window > now then
      return math.max(st.ramp_start + p.backoff_window, untl)
    end
    return 'full'
  end
  if untl > now then return untl end
  return 'open'
end

local function spacing(st, p)
  if st.level > 0 then
    return math.max(jitter_apply(p.backoff_jitter, st.delay), p.backoff_min_delay)
  end
  return jitter_apply(p.jitter, st.delay)
end

local function record_send(st, p, amount, now)
  st.active = st.active + 1
  st.sent = st.sent + 1
  st.last_sent = now
  local sp = spacing(st, p)
  st.next_allowed = math.max(st.next_allowed, now + secs_to_ns(sp))
  if p.rampup and not st.ramp_start then st.ramp_start = now end
  if p.quota then
    if not st.quota_start then st.quota_start = now end
    st.consumed = st.consumed + amount
  end
end

local function record_done(st)
  st.active = math.max(st.active - 1, 0)
  st.done = st.done + 1
end

local function trigger(st, p, header_ns, now)
  st.triggers = st.triggers + 1
  st.window_triggers = st.window_triggers + 1
  if header_ns then
    header_ns = math.min(header_ns, secs_to_ns(p.backoff_max_delay))
    st.hard_until = math.max(st.hard_until, now + header_ns)
  end
  local r = p.rampup
  if r and st.window_triggers <= r.high then return end
  if r and r.step_back and st.window_triggers == r.high + 1 then rampup_step_back(st, p, r) end
  st.level = math.min(st.level + 1, MAX_LEVEL)
  st.backoff_anchor = now
  if header_ns then
    st.delay = math.max(st.delay, p.backoff_min_delay)
  else
    local stepped
    if st.delay == 0 then
      stepped = p.backoff_min_delay
    else
      stepped = math.min(math.max(st.delay * p.factor, p.backoff_min_delay),
                         p.backoff_max_delay)
    end
    st.delay = math.max(st.delay, stepped)
    local wait = math.max(jitter_apply(p.backoff_jitter, st.delay), st.delay)
    st.next_allowed = math.max(st.next_allowed, now + secs_to_ns(wait))
  end
end

local function hard_delay(st, p, wait_ns, now)
  st.level = math.min(st.level + 1, MAX_LEVEL)
  st.triggers = st.triggers + 1
  st.window_triggers = st.window_triggers + 1
  st.backoff_anchor = now
  st.hard_until = math.max(st.hard_until, now + wait_ns)
  st.delay = math.max(st.delay, p.backoff_min_delay)
end

local function is_trigger(p, outcome)
  if outcome.status then return p.codeset[outcome.status] == true end
  if outcome.error then
    for _, e in ipairs(p.exceptions) do
      if e == outcome.error then return true end
    end
  end
  return false
end
