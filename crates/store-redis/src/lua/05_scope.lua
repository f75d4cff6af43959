-- lua/05_scope.lua: one throttling scope's state machine: delay and base delay, backoff
-- levels and recovery, rampup windows, quota windows, the gate, sends, completions and
-- triggers. Mirrors ScopeState in crates/throttle-core/src/scope.rs.
--
-- Field names: bd base delay, d delay, c concurrency, a active, lv level, na next
-- allowed, hu hard until, ls last sent, ba backoff anchor, rs ramp start, wt window
-- triggers, qs quota start, qc consumed, rf robots floor, sn sent, dn done, tr triggers,
-- lu last used.
local KT
local Tcache = {}     -- name -> state, written back by tflush
local function blank_state(p, now)
  return {bd = p.delay, d = p.delay, c = p.concurrency, a = 0, lv = 0, na = 0, hu = 0,
          ba = now, wt = 0, qc = 0, sn = 0, dn = 0, tr = 0, lu = now}
end

local function set_base_delay(st, secs)
  st.bd = secs
  if st.lv == 0 then
    st.d = secs
    if st.ls then st.na = st.ls + secs_to_ns(st.d) end
  else
    st.d = math.max(st.d, secs)
    if st.ls then st.na = math.max(st.na, st.ls + secs_to_ns(st.d)) end
  end
end

local function raise_base_delay(st, secs)
  if secs > st.bd then st.bd = secs end
  st.d = math.max(st.d, st.bd)
  if st.ls then st.na = math.max(st.na, st.ls + secs_to_ns(st.d)) end
end

local function recovery_step(st, p)
  st.lv = st.lv - 1
  st.ba = st.ba + p.bw
  if st.lv == 0 then
    st.d = st.bd
  else
    st.d = math.max(math.max(st.d / p.factor, st.bd), p.bmin)
  end
end

local function rampup_boundary(st, p, r)
  local triggers = st.wt
  st.wt = 0
  if st.rs then st.rs = st.rs + p.bw end
  if triggers >= r.low or st.lv > 0 then return end
  local floor_d = math.max(r.min_delay, st.rf or 0)
  if st.d > floor_d then
    local nxt = math.max(st.d * r.factor, floor_d)
    if nxt - floor_d < RAMPUP_SNAP then nxt = floor_d end
    st.d = nxt
    st.bd = nxt
  elseif not st.rf and st.c ~= 0 and st.c < p.max_concurrency then
    st.c = st.c + 1
  end
end

-- The first trigger beyond the target in a window undoes rampup's last step (the last
-- concurrency raise, or else the last delay cut), never past the starting values.
local function rampup_step_back(st, p, r)
  local floor_d = math.max(r.min_delay, st.rf or 0)
  local top = math.max(p.delay, floor_d)
  if st.bd <= floor_d and p.concurrency ~= 0 and st.c > p.concurrency then
    st.c = st.c - 1
  elseif st.bd < top then
    local back = floor_d
    if st.bd > 0 then back = st.bd / r.factor end
    st.bd = math.min(back, top)
    st.d = math.max(st.d, st.bd)
  end
end

local function ramp_saturated(st, p, r)
  local floor_d = math.max(r.min_delay, st.rf or 0)
  return st.d <= floor_d and (st.rf ~= nil or st.c == 0 or st.c >= p.max_concurrency)
end

-- floor(a / b) for non-negative integers below 2^53, exactly.
local function idiv(a, b)
  local q = floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

local function advance(st, p, now)
  if st.qs and p.quota then
    if p.qw == 0 then
      -- A zero-length quota window elapses at once: the count starts afresh every request.
      st.qc = 0
    elseif now >= st.qs then
      local windows = idiv(now - st.qs, p.qw)
      if windows > 0 then
        st.qs = st.qs + p.qw * windows
        st.qc = 0
      end
    end
  end
  local w = p.bw
  if w == 0 then
    -- Zero-length backoff windows elapse at once: full recovery now (rampup is off).
    if st.lv > 0 then
      st.lv = 0
      st.d = st.bd
    end
    return
  end
  while true do
    local rec_at = nil
    if st.lv > 0 then rec_at = st.ba + w end
    local ramp_at = nil
    if p.rampup and st.rs then ramp_at = st.rs + w end
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
      if st.lv == 0 and st.wt == 0 and ramp_saturated(st, p, r) and st.rs then
        local skip = idiv(math.max(now - st.rs, 0), w)
        st.rs = st.rs + w * skip
      end
    end
  end
end

-- Gate: 'open', 'full', or the time until which it is held. A full scope whose rampup
-- may still raise its concurrency is held until its next rampup boundary, the next lazy
-- update that may free a slot (ScopeState::slot_may_free_at; inline: the main chunk is
-- at Lua's 200 locals).
local function gate(st, p, amount, now)
  local untl = math.max(st.hu, st.na)
  if p.quota and st.qs then
    if st.qc > 0 and st.qc + amount > p.quota then
      untl = math.max(untl, st.qs + p.qw)
    end
  end
  if st.c ~= 0 and st.a >= st.c then
    if p.rampup and st.rs and not st.rf and st.c < p.max_concurrency and p.bw > 0
        and st.rs + p.bw > now then
      return math.max(st.rs + p.bw, untl)
    end
    return 'full'
  end
  if untl > now then return untl end
  return 'open'
end

local function spacing(st, p)
  if st.lv > 0 then
    return math.max(jitter_apply(p.bjitter, st.d), p.bmin)
  end
  return jitter_apply(p.jitter, st.d)
end

local function record_send(st, p, amount, now)
  st.a = st.a + 1
  st.sn = st.sn + 1
  st.ls = now
  local sp = spacing(st, p)
  st.na = math.max(st.na, now + secs_to_ns(sp))
  if p.rampup and not st.rs then st.rs = now end
  if p.quota then
    if not st.qs then st.qs = now end
    st.qc = st.qc + amount
  end
end

local function record_done(st)
  st.a = math.max(st.a - 1, 0)
  st.dn = st.dn + 1
end

local function trigger(st, p, header_ns, now)
  st.tr = st.tr + 1
  st.wt = st.wt + 1
  if header_ns then
    header_ns = math.min(header_ns, secs_to_ns(p.bmax))
    st.hu = math.max(st.hu, now + header_ns)
  end
  local r = p.rampup
  if r and st.wt <= r.high then return end
  if r and r.step_back and st.wt == r.high + 1 then rampup_step_back(st, p, r) end
  st.lv = math.min(st.lv + 1, MAX_LEVEL)
  st.ba = now
  if header_ns then
    st.d = math.max(st.d, p.bmin)
  else
    local stepped
    if st.d == 0 then
      stepped = p.bmin
    else
      stepped = math.min(math.max(st.d * p.factor, p.bmin), p.bmax)
    end
    st.d = math.max(st.d, stepped)
    local wait = math.max(jitter_apply(p.bjitter, st.d), st.d)
    st.na = math.max(st.na, now + secs_to_ns(wait))
  end
end

local function hard_delay(st, p, wait_ns, now)
  st.lv = math.min(st.lv + 1, MAX_LEVEL)
  st.tr = st.tr + 1
  st.wt = st.wt + 1
  st.ba = now
  st.hu = math.max(st.hu, now + wait_ns)
  st.d = math.max(st.d, p.bmin)
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
