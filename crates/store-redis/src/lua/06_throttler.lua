-- lua/06_throttler.lua: the crawl's scope states: overrides, the stored state record, the
-- per-call cache, all-or-nothing admission over a request's scopes, and release with an
-- outcome. Mirrors crates/throttle-core/src/throttler/admission.rs, release.rs,
-- scope_map.rs (finding and creating states) and hibernation.rs (overrides).
--
-- Overrides (live changes and Crawl-delay results), by scope name.
-- An override is a table of base_delay (set_delay, Crawl-delay), concurrency
-- (set_concurrency, Crawl-delay), robots_floor (Crawl-delay) and robots_warned (a
-- conflicting Crawl-delay was reported), each nil when not overridden. Stored in "ov" as
-- msgpack under the short keys bd, c, rd and rw (kept: existing crawls hold them).
local KEY_OVERRIDES   -- "ov"
-- No lookup at all while the crawl has no override (the counter "overrides" counts them).
local function override_of(name)
  if C.overrides == 0 then return nil end
  local stored = load_msgpack(KEY_OVERRIDES, name)
  if not stored then return nil end
  return {base_delay = stored.bd, concurrency = stored.c, robots_floor = stored.rd,
          robots_warned = stored.rw}
end
local function override_save(name, ov, existed)
  save_msgpack(KEY_OVERRIDES, name, {bd = ov.base_delay, c = ov.concurrency, rd = ov.robots_floor,
                    rw = ov.robots_warned})
  if not existed then C.overrides = C.overrides + 1 end
end

-- A scope state in "t": a byte saying which optional times are set (1 last sent, 2 ramp
-- start, 4 quota start, 8 robots floor), 14 doubles (base_delay, delay, concurrency,
-- active, level, next_allowed, hard_until, backoff_anchor, window_triggers, consumed,
-- sent, done, triggers, last_used), then the optional ones.
-- By `bits`: the doubles after the bits byte (decoding) and the whole record (encoding),
-- each with one more double per optional time set; and the record's length.
-- (One table of three: the main chunk is at Lua's 200 locals.)
local TF = {dec = {}, enc = {}, len = {}, fmt = '>Bdddddddddddddd'}
function TF.make(bits)
  local k = bits % 2 + floor(bits / 2) % 2 + floor(bits / 4) % 2 + floor(bits / 8) % 2
  local extra = string.rep('d', k)
  TF.dec[bits] = '>dddddddddddddd' .. extra
  TF.enc[bits] = TF.fmt .. extra
  TF.len[bits] = 113 + 8 * k
end
local function decode_state(name, raw)
  local bits = sbyte(raw, 1)
  local len = TF.len
  if bits and bits <= 15 and not len[bits] then TF.make(bits) end
  if not bits or bits > 15 or #raw ~= len[bits] then
    fail('CORRUPT', KEY_STATES .. '[' .. name .. ']: undecodable scope state')
  end
  local base_delay, delay, concurrency, active, level, next_allowed, hard_until,
    backoff_anchor, window_triggers, consumed, sent, done, triggers, last_used,
    o1, o2, o3, o4 = sunpack(TF.dec[bits], raw, 2)
  local s = {base_delay = base_delay, delay = delay, concurrency = concurrency,
             active = active, level = level, next_allowed = next_allowed,
             hard_until = hard_until, backoff_anchor = backoff_anchor,
             window_triggers = window_triggers, consumed = consumed, sent = sent,
             done = done, triggers = triggers, last_used = last_used}
  -- The optional times, in order, each taking the next value.
  if bits % 2 == 1 then s.last_sent, o1, o2, o3 = o1, o2, o3, o4 end
  if bits % 4 >= 2 then s.ramp_start, o1, o2 = o1, o2, o3 end
  if bits % 8 >= 4 then s.quota_start, o1 = o1, o2 end
  if bits >= 8 then s.robots_floor = o1 end
  return s
end
local function encode_state(s)
  local bits = (s.last_sent and 1 or 0) + (s.ramp_start and 2 or 0)
    + (s.quota_start and 4 or 0) + (s.robots_floor and 8 or 0)
  if not TF.len[bits] then TF.make(bits) end
  -- The optional times that are set, in order, moved to the front.
  local x1, x2, x3, x4 = s.last_sent, s.ramp_start, s.quota_start, s.robots_floor
  if not x3 then x3, x4 = x4, nil end
  if not x2 then x2, x3, x4 = x3, x4, nil end
  if not x1 then x1, x2, x3, x4 = x2, x3, x4, nil end
  return spack(TF.enc[bits], bits, s.base_delay, s.delay, s.concurrency, s.active,
               s.level, s.next_allowed, s.hard_until, s.backoff_anchor, s.window_triggers,
               s.consumed, s.sent, s.done, s.triggers, s.last_used, x1, x2, x3, x4)
end

-- The state of `name`, created if needed, brought up to `now`, marked used.
-- Returns state, params.
local function find_scope(name)
  local st = STATES[name]
  if st then return st end
  local raw = call('HGET', KEY_STATES, name)
  if not raw then return nil end
  st = decode_state(name, raw)
  st._raw = raw   -- as stored: written back only when it changed
  STATES[name] = st
  return st
end
local function resolve_scope(name, now)
  local p = params_of(name)
  local st = find_scope(name)
  if st then
    advance(st, p, now)
  else
    st = blank_state(p, now)
    local ov = override_of(name)
    if ov then
      if ov.base_delay then set_base_delay(st, ov.base_delay) end
      if ov.concurrency then st.concurrency = ov.concurrency end
      if ov.robots_floor then st.robots_floor = ov.robots_floor end
    end
    STATES[name] = st
  end
  st.last_used = now
  return st, p
end
local function flush_scopes()
  local args = {}
  for name, st in pairs(STATES) do
    local raw = encode_state(st)
    if raw ~= st._raw then
      args[#args + 1] = name
      args[#args + 1] = raw
      st._raw = raw
    end
  end
  if #args > 0 then call_many('HSET', KEY_STATES, args, 2000) end
end

local function norm_amount(a)
  if a ~= a or a < 0 then return 0 end
  return a
end

-- gate_all over uses {{name, amount}...} (fair, nothing reserved: no waiters here).
local function gate_all(uses, now)
  if C.in_flight >= settings().concurrent_requests then return 'blocked' end
  local untl, full = nil, false
  for _, u in ipairs(uses) do
    local st = STATES[u[1]]
    local g = gate(st, params_of(u[1]), u[2], now)
    if g == 'full' then full = true
    elseif g ~= 'open' then untl = untl and math.max(untl, g) or g end
  end
  if full then return 'blocked' end
  if untl then return untl end
  return nil
end

local function resolve_all(uses, now)
  local list = {}
  for _, u in ipairs(uses) do
    local a = norm_amount(u[2])
    resolve_scope(u[1], now)
    local merged = false
    for _, x in ipairs(list) do
      if x[1] == u[1] then x[2] = x[2] + a; merged = true; break end
    end
    if not merged then list[#list + 1] = {u[1], a} end
  end
  return list
end

-- try_acquire_hinted: returns true and whether the send is counted (the permit holds the
-- uses' scopes, or none when not throttled), or nil and why.
local function try_acquire(uses, dont_throttle, now)
  now = clock_clamp(now)
  if dont_throttle then return true, false end
  if #uses == 1 then
    -- One scope (the common case): resolve_all, gate_all and the sends below, without
    -- their lists.
    local name = uses[1][1]
    local a = norm_amount(uses[1][2])
    local st, p = resolve_scope(name, now)
    if C.in_flight >= (SETTINGS or settings()).concurrent_requests then return nil, 'blocked' end
    local g = gate(st, p, a, now)
    if g == 'full' then return nil, 'blocked' end
    if g ~= 'open' then return nil, g end
    record_send(st, p, a, now)
    C.in_flight = C.in_flight + 1
    return true, true
  end
  local list = resolve_all(uses, now)
  local why = gate_all(list, now)
  if why then return nil, why end
  for _, x in ipairs(list) do
    record_send(STATES[x[1]], params_of(x[1]), x[2], now)
  end
  C.in_flight = C.in_flight + 1
  return true, true
end

local function check_all(uses, now)
  now = clock_clamp(now)
  local list = resolve_all(uses, now)
  return gate_all(list, now)
end

local function check_scope(name, amount, now)
  now = clock_clamp(now)
  local st, p = resolve_scope(name, now)
  local g = gate(st, p, norm_amount(amount), now)
  if g == 'open' then return nil end
  if g == 'full' then return 'blocked' end
  return g
end

-- A scope's load (in flight / concurrency; 0 unknown or unlimited). In TF: the main
-- chunk is at Lua's 200 locals.
function TF.load(name)
  local st = find_scope(name)
  if st and st.concurrency ~= 0 then return st.active / st.concurrency end
  return 0
end
-- The highest load among the scopes of `list`: scope names, or with `field`, the names
-- at x[field] of its items (1 for the uses' {name, amount}).
local function max_load(list, field)
  local best = 0
  for i = 1, #list do
    local x = list[i]
    local l = TF.load(field and x[field] or x)
    if l > best then best = l end
  end
  return best
end

-- release_and_load: frees the permit's slots and feeds the outcome to backoff. A permit is
-- {scopes = the scope names it holds, counted = whether it counts as in flight}.
local function release(permit, outcome, now)
  now = clock_clamp(now)
  for _, name in ipairs(permit.scopes) do
    local p = params_of(name)
    local st = find_scope(name)
    if not st then fail('CORRUPT', 'lease holds scope ' .. name .. ' without a state') end
    advance(st, p, now)
    record_done(st)
    if not outcome.cancelled and is_trigger(p, outcome) then
      trigger(st, p, outcome.header, now)
    end
    if outcome.budget then
      -- The budget is spent: held until its reset (capped), no backoff step.
      st.hard_until = math.max(st.hard_until,
        now + math.min(outcome.budget, secs_to_ns(p.backoff_max_delay)))
    end
    st.last_used = now
  end
  if permit.counted then C.in_flight = C.in_flight - 1 end
  return max_load(permit.scopes)
end

