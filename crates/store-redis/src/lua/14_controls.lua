-- lua/14_controls.lua: programmatic controls and inspection: delay_scope, set_delay,
-- set_concurrency, reconcile, crawl_delay, scope stats, info. Mirrors
-- crates/throttle-core/src/throttler/controls.rs and inspect.rs.
--
local function scope_changed(name, now)
  local r = record(name)
  if r and r.s then rearm(name, now) end
end

-- Remembers the kind of a scope named by the caller (its default parameters).
local function reg(name, kind)
  if kind ~= '' then call('HSETNX', PREFIX .. 'np', name, '\0' .. kind) end
end

local function ov_update(name, f)
  local old = override_of(name)
  local ov = old or {}
  f(ov)
  override_save(name, ov, old ~= nil)
end

-- delay_scope NAME KIND NS
OPS.delay_scope = function(args)
  reg(args[1], args[2])
  local now = clock_clamp(NOW)
  local st, p = resolve_scope(args[1], now)
  hard_delay(st, p, tonumber(args[3]), now)
  flush_all()
  return 1
end

-- set_delay NAME KIND SECS
OPS.set_delay = function(args)
  reg(args[1], args[2])
  local secs = tonumber(args[3])
  local now = clock_clamp(NOW)
  ov_update(args[1], function(ov) ov.base_delay = secs end)
  local st = resolve_scope(args[1], now)
  set_base_delay(st, secs)
  scope_changed(args[1], NOW)
  flush_all()
  return 1
end

-- set_concurrency NAME KIND N
OPS.set_concurrency = function(args)
  reg(args[1], args[2])
  local c = tonumber(args[3])
  local p = params_of(args[1])
  if c ~= 0 and c < p.min_concurrency then
    fail('CONFIG', 'concurrency must not be below the scope\'s min_concurrency ('
      .. c .. ' < ' .. p.min_concurrency .. ')')
  end
  local now = clock_clamp(NOW)
  ov_update(args[1], function(ov) ov.concurrency = c end)
  local st = resolve_scope(args[1], now)
  st.concurrency = c
  scope_changed(args[1], NOW)
  flush_all()
  return 1
end

-- reconcile NAME KIND HOW VALUE (HOW: 'c' consumed delta, 'r' remaining)
OPS.reconcile = function(args)
  reg(args[1], args[2])
  local v = tonumber(args[4])
  local now = clock_clamp(NOW)
  local st, p = resolve_scope(args[1], now)
  if p.quota then
    if args[3] == 'c' then st.consumed = math.max(st.consumed + v, 0)
    else st.consumed = math.max(p.quota - v, 0) end
    if st.consumed > 0 and not st.quota_start then st.quota_start = now end
  end
  scope_changed(args[1], NOW)
  flush_all()
  return 1
end

-- crawl_delay NAME KIND SECS: {'applied', delay, concurrency} / {'kept', warned} /
-- {'ignored'}
OPS.crawl_delay = function(args)
  reg(args[1], args[2])
  local name, secs = args[1], tonumber(args[3])
  local s = settings()
  if not s.throttling_robotstxt_obey or secs == 0 then return {'ignored'} end
  local now = clock_clamp(NOW)
  local capped = math.min(secs, s.throttling_robotstxt_max_delay)
  local p = params_of(name)
  local conflicts = (p.explicit_delay ~= nil and p.explicit_delay < capped)
    or (p.explicit_concurrency ~= nil
        and (p.explicit_concurrency == 0 or p.explicit_concurrency > 1))
  local st0 = find_scope(name)
  local old_ov = override_of(name)
  local ov = old_ov or {}
  local current
  if st0 then current = st0.base_delay else current = ov.base_delay or p.delay end
  if conflicts then
    local warned = not p.ignore_robots_txt and not ov.robots_warned
    if warned then
      ov.robots_warned = true
      override_save(name, ov, old_ov ~= nil)
      flush_all()
    end
    return {'kept', warned and 1 or 0}
  end
  local delay = math.max(current, capped)
  local conc = math.max(p.min_concurrency, 1)
  ov.base_delay, ov.concurrency, ov.robots_floor = delay, conc, delay
  override_save(name, ov, old_ov ~= nil)
  local st = resolve_scope(name, now)
  raise_base_delay(st, delay)
  st.concurrency = conc
  st.robots_floor = delay
  flush_all()
  return {'applied', fmt(delay), conc}
end

-- scope NAME KIND [raw]: the scope's stats as of now, or nil if it has no state.
-- With a third argument 'raw': as of the last operation on it, without applying
-- anything (a read that changes nothing).
OPS.scope = function(args)
  reg(args[1], args[2])
  local st = find_scope(args[1])
  if not st then return nil end
  if args[3] ~= 'raw' then
    advance(st, params_of(args[1]), clock_clamp(NOW))
    flush_all()
  end
  return {st.sent, st.done, st.triggers, st.active, fmt(st.base_delay), fmt(st.delay),
          st.concurrency, st.level, fmt(st.next_allowed), fmt(st.hard_until), fmt(st.consumed)}
end

-- info: counters {queued, delayed, leased, in_flight(throttle), groups, enqueued,
-- dequeued, leased, acked, retried, redelivered, max_depth, permits held, stats...}
OPS.info = function(args)
  local st = call('HGETALL', KEY_STATS)
  local out = {C.queued, C.delayed, call('HLEN', KEY_LEASES), C.in_flight,
               C.groups, C.enqueued, C.dequeued, C.leased, C.acked,
               C.retried, C.redelivered, C.max_depth, call('HLEN', PREFIX .. 'pm')}
  for i = 1, #st do out[#out + 1] = st[i] end
  return out
end

